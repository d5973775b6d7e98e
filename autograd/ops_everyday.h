// The everyday PyTorch surface beyond the first wave: the ops a ported training
// script reaches for (masks, triangles, sorting, scans, norms, scatter, padding,
// resampling, 1-d convolution and pooling, einsum). PyTorch's names and semantics;
// each is differentiable where PyTorch's is. Included by ops.h: users include reel.h.
//
//   Tensor causal = tril(ones({T, T}, {.dtype = DType::boolean}));
//   Tensor att = masked_fill(scores, logical_not(causal), -INFINITY).softmax(-1);
//   auto [top, idx] = topk(logits, 5);            // values and indices, along the last dim
//   Tensor next = multinomial(softmax(logits, -1), 1);
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ops.h"

namespace reel {

// ---- creation (host-computed, then placed on opt.device)
// `steps` points from start to end inclusive, spaced evenly (PyTorch's rounding)
Tensor linspace(double start, double end, int64_t steps, Options opt = {}, Site site = {});
// n x m (m < 0: n x n) with ones on the diagonal
Tensor eye(int64_t n, int64_t m = -1, Options opt = {}, Site site = {});

// ---- masks and triangles (autograd/ops_fill.cpp)
// y = mask ? value : x, mask bool broadcast to x's shape; dx = g where !mask
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, Site site = {});
// the same with a 0-d value tensor, which gets the gradient summed over the mask
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value, Site site = {});
// the lower (upper) triangle of the last two dims: j - i <= diagonal (>= diagonal), else 0
Tensor tril(const Tensor& x, int64_t diagonal = 0, Site site = {});
Tensor triu(const Tensor& x, int64_t diagonal = 0, Site site = {});

// ---- tests of values (bool results, no gradient) and nan_to_num
Tensor isnan(const Tensor& x, Site site = {});
Tensor isinf(const Tensor& x, Site site = {});
Tensor isfinite(const Tensor& x, Site site = {});
// NaN -> nan, +inf -> posinf (default: the dtype's largest), -inf -> neginf (its lowest); dx = g where finite
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = {},
                  std::optional<double> neginf = {}, Site site = {});
// whether any (all) element is non-zero over dims (empty dims: all), bool
Tensor any(const Tensor& x, const Dims& dims = {}, bool keepdim = false, Site site = {});
Tensor all(const Tensor& x, const Dims& dims = {}, bool keepdim = false, Site site = {});

// ---- clamping and interpolation
Tensor clamp_min(const Tensor& x, double low, Site site = {});
Tensor clamp_max(const Tensor& x, double high, Site site = {});
// a + w (b - a), broadcasting a, b (and w)
Tensor lerp(const Tensor& a, const Tensor& b, double weight, Site site = {});
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight, Site site = {});

// ---- reductions with indices, sorting, sampling (autograd/ops_sort.cpp)
// Unpacks as `auto [values, indices] = max(x, 1);`, as PyTorch's named tuple does.
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // i64
};
// the largest (smallest) value along dim and its index (the first on ties); the
// gradient goes to that index only, as PyTorch's
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false, Site site = {});
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false, Site site = {});
// sorted along dim, stably (ties keep their order), NaN above every number
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, Site site = {});
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, Site site = {});
// the k largest (smallest) along dim, in sorted order
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, Site site = {});
// i64 [num_samples] (or [N, num_samples] for probs [N, C]): category indices drawn with
// probability proportional to probs' rows (non-negative, not necessarily summing to 1),
// from the default generator. Without replacement no index repeats in a row
// (num_samples <= number of non-zero weights).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Site site = {});

// ---- scans (autograd/ops_scan.cpp)
Tensor cumsum(const Tensor& x, int64_t dim, Site site = {});
Tensor cumprod(const Tensor& x, int64_t dim, Site site = {});

// ---- statistics and norms (autograd/ops_stats.cpp)
// log(sum(exp(x))) over dims, without overflow (all -inf gives -inf)
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false, Site site = {});
// standard deviation, Bessel's correction by default (correction = 1)
Tensor std(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false, Site site = {});
// vector p-norm over dims (empty: all): p = 1, 2 (also PyTorch's "fro"), INFINITY, -INFINITY,
// or any other p > 0. The gradient at a zero norm is 0, as PyTorch's.
Tensor norm(const Tensor& x, double p = 2, const Dims& dims = {}, bool keepdim = false, Site site = {});
// x / max(norm(x, p, dim), eps)
Tensor normalize(const Tensor& x, double p = 2, int64_t dim = 1, double eps = 1e-12, Site site = {});
// sum(a b) / (max(|a|, eps) max(|b|, eps)) along dim, a and b broadcast together
Tensor cosine_similarity(const Tensor& a, const Tensor& b, int64_t dim = 1, double eps = 1e-8, Site site = {});

// ---- linear algebra (autograd/ops_contract.cpp)
Tensor outer(const Tensor& a, const Tensor& b, Site site = {});  // [n] x [m] -> [n, m]
// beta input + alpha (m1 @ m2): input broadcast to [n, p], m1 [n, m], m2 [m, p]
Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta = 1, double alpha = 1,
             Site site = {});
// beta input + alpha bmm(b1, b2): input broadcast to [B, n, p]
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1, double alpha = 1,
               Site site = {});
// Einstein summation over letters, "ij,jk->ik" (or implicit output: the letters seen once,
// sorted), "..." for broadcast leading dims, any number of operands; contracted pairwise
// as bmm (through permute and reshape). A letter repeated within one operand (a diagonal)
// is refused.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands, Site site = {});

// ---- shape (autograd/ops_shape.cpp)
// x tiled reps[i] times along dim i (reps may have more dims than x: leading dims are added)
Tensor repeat(const Tensor& x, const Dims& reps, Site site = {});
// repeat, with reps padded by leading 1s when it has fewer dims than x
Tensor tile(const Tensor& x, const Dims& reps, Site site = {});
Tensor flip(const Tensor& x, const Dims& dims, Site site = {});
// elements shifted by shifts[i] along dims[i], wrapping around; empty dims: x flattened, then restored
Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims = {}, Site site = {});
// views of x along dim of the given sizes (which must add up to x's size there)
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0, Site site = {});

// ---- scatter (autograd/ops_scatter.cpp). Out of place: each returns a new tensor.
// y = x with y[p with p[dim] = index[p]] = src[p]; dx = g except where written, dsrc = gather(g)
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Site site = {});
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value, Site site = {});
// y = x with src added at index (repeated positions add up); dx = g, dsrc = gather(g)
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Site site = {});
// y = x with alpha src's slices added at index along dim; dx = g, dsrc = alpha index_select(g)
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, double alpha = 1,
                 Site site = {});
// y = x with y[indices[0][i], indices[1][i], ...] = values[i] (or += when accumulate): the
// index tensors (i64, broadcast together) address x's leading dims; values broadcast to
// [index shape..., x's remaining dims]
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false,
                 Site site = {});

// ---- padding and resampling (autograd/ops_resample.cpp)
enum class PadMode : uint8_t { constant, reflect, replicate, circular };
struct PadOptions {
  PadMode mode = PadMode::constant;
  double value = 0;  // constant mode
};
// pad = {left, right} of the last dim, then {top, bottom} of the one before, ... (as F.pad);
// negative amounts crop (constant mode)
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadOptions opt = {}, Site site = {});
enum class InterpolateMode : uint8_t { nearest, linear, bilinear };
struct InterpolateOptions {
  std::vector<int64_t> size = {};          // the output's spatial size, or
  std::vector<double> scale_factor = {};   // a factor per spatial dim (one number: all)
  InterpolateMode mode = InterpolateMode::nearest;
  bool align_corners = false;         // linear and bilinear only
};
// x [N, C, L] (nearest, linear) or [N, C, H, W] (nearest, bilinear)
Tensor interpolate(const Tensor& x, const InterpolateOptions& opt, Site site = {});

// ---- 1-d convolution and pooling, transposed convolution (autograd/ops_conv1d.cpp; conv_transpose2d in ops_conv.cpp)
// A 1-d convolution's padding: an amount, or "valid" / "same" (as ConvPadding)
struct ConvPadding1 {
  ConvPadding1(int64_t size = 0) : size(size) {}
  template <size_t N>
  ConvPadding1(const char (&mode)[N]) : mode(mode, N - 1) {}
  explicit ConvPadding1(std::string mode) : mode(std::move(mode)) {}
  int64_t size = 0;
  std::string mode;  // empty: the amount
};
struct Conv1dOptions {
  int64_t stride = 1;
  ConvPadding1 padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};
// x [N, C, L], weight [O, C/groups, K], bias [O]: conv2d on [N, C, 1, L] (errors name conv1d)
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv1dOptions opt = {}, Site site = {});
struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  int64_t groups = 1;
  Size2 dilation = 1;
};
// x [N, C, H, W], weight [C, O/groups, KH, KW], bias [O] -> [N, O, OH, OW],
// OH = (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding + 1: the gradient of conv2d
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                        ConvTranspose2dOptions opt = {}, Site site = {});
struct Pool1dOptions {
  int64_t kernel = 2;
  int64_t stride = 0;  // 0: the kernel size
  int64_t padding = 0;
  bool count_include_pad = true;  // avg only
  bool ceil_mode = false;  // as Pool2dOptions
  int64_t dilation = 1;  // max only
};
// x [N, C, L]
Tensor max_pool1d(const Tensor& x, Pool1dOptions opt = {}, Site site = {});
Tensor avg_pool1d(const Tensor& x, Pool1dOptions opt = {}, Site site = {});
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t out_l, Site site = {});

}  // namespace reel
