// The differentiable ops. Each is defined once (autograd/ops_*.cpp): its checks,
// its forward call into the backend and its backward rule, side by side. Every op
// takes the caller's Site last, filled in by the compiler.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel {

// ---- elementwise unary
Tensor neg(const Tensor& x, Site site = {});
Tensor abs(const Tensor& x, Site site = {});
Tensor exp(const Tensor& x, Site site = {});
Tensor log(const Tensor& x, Site site = {});
Tensor sqrt(const Tensor& x, Site site = {});
Tensor rsqrt(const Tensor& x, Site site = {});
Tensor square(const Tensor& x, Site site = {});
Tensor reciprocal(const Tensor& x, Site site = {});
Tensor sin(const Tensor& x, Site site = {});
Tensor cos(const Tensor& x, Site site = {});
Tensor relu(const Tensor& x, Site site = {});
// relu(a + b) in one pass, broadcasting as add: a residual block's end
Tensor add_relu(const Tensor& a, const Tensor& b, Site site = {});
Tensor leaky_relu(const Tensor& x, double slope = 0.01, Site site = {});
// x Phi(x), Phi the standard normal CDF (PyTorch's default); approximate = "tanh" gives
// x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2, as PyTorch's GELU(approximate='tanh')
Tensor gelu(const Tensor& x, std::string_view approximate = "none", Site site = {});
Tensor erf(const Tensor& x, Site site = {});
Tensor silu(const Tensor& x, Site site = {});  // x sigmoid(x)
Tensor mish(const Tensor& x, Site site = {});  // x tanh(softplus(x))
Tensor hardswish(const Tensor& x, Site site = {});  // x relu6(x + 3) / 6
// ln(1 + e^(beta x)) / beta; x itself where beta x > threshold (PyTorch's rule)
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20, Site site = {});
Tensor elu(const Tensor& x, double alpha = 1, Site site = {});  // x > 0 ? x : alpha (e^x - 1)
// PyTorch's hard-edged activations; each one's gradient is 0 at its break points
// themselves, as PyTorch's rules have it (clamp's passes g at its bounds)
Tensor hardtanh(const Tensor& x, double min_val = -1, double max_val = 1, Site site = {});  // clamp(x, min, max)
Tensor relu6(const Tensor& x, Site site = {});  // hardtanh(x, 0, 6)
Tensor hardsigmoid(const Tensor& x, Site site = {});  // relu6(x + 3) / 6
Tensor threshold(const Tensor& x, double threshold, double value, Site site = {});  // x > threshold ? x : value
Tensor sigmoid(const Tensor& x, Site site = {});
Tensor tanh(const Tensor& x, Site site = {});
Tensor pow(const Tensor& x, double exponent, Site site = {});
Tensor clamp(const Tensor& x, double low, double high, Site site = {});
// low and high as tensors, broadcast with x (either undefined: no bound; where they cross,
// high wins); PyTorch's gradients: x's where low <= x <= high, low's where x < low < high,
// high's where x > high or high < low
Tensor clamp(const Tensor& x, const Tensor& low, const Tensor& high, Site site = {});
Tensor sign(const Tensor& x, Site site = {});  // not differentiable (zero gradient)
Tensor logical_not(const Tensor& x, Site site = {});

// ---- elementwise binary, NumPy broadcasting
Tensor add(const Tensor& a, const Tensor& b, Site site = {});
Tensor sub(const Tensor& a, const Tensor& b, Site site = {});
// a + alpha b and a - alpha b, as PyTorch's `alpha` (one op, b scaled on the way)
Tensor add(const Tensor& a, const Tensor& b, double alpha, Site site = {});
Tensor sub(const Tensor& a, const Tensor& b, double alpha, Site site = {});
Tensor mul(const Tensor& a, const Tensor& b, Site site = {});
Tensor div(const Tensor& a, const Tensor& b, Site site = {});
Tensor maximum(const Tensor& a, const Tensor& b, Site site = {});
Tensor minimum(const Tensor& a, const Tensor& b, Site site = {});
Tensor pow(const Tensor& a, const Tensor& b, Site site = {});
Tensor add(const Tensor& a, double b, Site site = {});
Tensor sub(const Tensor& a, double b, Site site = {});
Tensor mul(const Tensor& a, double b, Site site = {});
Tensor div(const Tensor& a, double b, Site site = {});
// comparisons give bool tensors and no gradient
Tensor eq(const Tensor& a, const Tensor& b, Site site = {});
Tensor ne(const Tensor& a, const Tensor& b, Site site = {});
Tensor lt(const Tensor& a, const Tensor& b, Site site = {});
Tensor le(const Tensor& a, const Tensor& b, Site site = {});
Tensor gt(const Tensor& a, const Tensor& b, Site site = {});
Tensor ge(const Tensor& a, const Tensor& b, Site site = {});
Tensor eq(const Tensor& a, double b, Site site = {});
Tensor ne(const Tensor& a, double b, Site site = {});
Tensor lt(const Tensor& a, double b, Site site = {});
Tensor le(const Tensor& a, double b, Site site = {});
Tensor gt(const Tensor& a, double b, Site site = {});
Tensor ge(const Tensor& a, double b, Site site = {});
Tensor logical_and(const Tensor& a, const Tensor& b, Site site = {});
Tensor logical_or(const Tensor& a, const Tensor& b, Site site = {});
// cond ? a : b, broadcasting all three
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Site site = {});

// ---- reductions (dims may be negative; empty dims = all)
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false, Site site = {});
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false, Site site = {});
Tensor prod(const Tensor& x, const Dims& dims = {}, bool keepdim = false, Site site = {});
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false, Site site = {});
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false, Site site = {});
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false, Site site = {});
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false, Site site = {});
// over all elements: the flat index (row-major) of the first extremum, a 0-dim i64
Tensor argmax(const Tensor& x, Site site = {});
Tensor argmin(const Tensor& x, Site site = {});
// variance with Bessel's correction by default (correction = 1); groups of at most
// `correction` elements divide by 0, as PyTorch (nan, or inf for a spread group)
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false, Site site = {});
// sums g down to `shape` over its broadcast dims (the gradient of a broadcast)
Tensor sum_to(const Tensor& g, const Dims& shape, Site site = {});

// ---- linear algebra
// matmul with NumPy semantics: 1-D, 2-D and batched (broadcast batch dims)
Tensor matmul(const Tensor& a, const Tensor& b, Site site = {});
Tensor bmm(const Tensor& a, const Tensor& b, Site site = {});  // [B,M,K] x [B,K,N]
// y = x W^T + b, with the bias (and relu) fused: x [*, in], W [out, in], b [out]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Site site = {});
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Site site = {});

// ---- convolution and pooling, NCHW
// A pair of sizes (height, width) written as one number when both are equal:
// `.stride = 2` or `.padding = {1, 2}`. (Plain int64_t[2] fields took `.padding = 1`
// as {1, 0}: padding on the height only, silently.)
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t both = 0) : h(both), w(both) {}
  Size2(int64_t h, int64_t w) : h(h), w(w) {}
  int64_t operator[](int i) const { return i == 0 ? h : w; }
};
// A convolution's padding: amounts (one number or {h, w}), or PyTorch's strings "valid"
// (none) and "same" (the output as large as the input: stride 1 only, and where the total
// dilation (k - 1) is odd the extra one goes to the bottom / right, as PyTorch pads).
struct ConvPadding : Size2 {
  ConvPadding(int64_t both = 0) : Size2(both) {}
  ConvPadding(int64_t h, int64_t w) : Size2(h, w) {}
  ConvPadding(const Size2& amounts) : Size2(amounts) {}
  // "same" or "valid", checked by the op (an array, so that 0 stays an amount)
  template <size_t N>
  ConvPadding(const char (&mode)[N]) : mode(mode, N - 1) {}
  explicit ConvPadding(std::string mode) : mode(std::move(mode)) {}
  std::string mode;  // empty: the amounts
};
struct Conv2dOptions {
  Size2 stride = 1;
  ConvPadding padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions opt = {}, Site site = {});
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions opt = {}, Site site = {});
// Pooling takes x [N, C, H, W] -> [N, C, OH, OW], or unbatched [C, H, W] -> [C, OH, OW].
// OH = (H + 2 pad - dilation (kernel - 1) - 1) / stride + 1, rounded up with ceil_mode
// (PyTorch's rule: a last window that would start in the right padding is dropped).
struct Pool2dOptions {
  Size2 kernel = 2;
  Size2 stride = 0;  // 0: the kernel size
  Size2 padding = 0;
  bool count_include_pad = true;  // avg only
  bool ceil_mode = false;
  Size2 dilation = 1;  // max only: the window's elements `dilation` apart
  int64_t divisor_override = 0;  // avg only: divide every window's sum by this (0: the window's count)
};
Tensor max_pool2d(const Tensor& x, Pool2dOptions opt = {}, Site site = {});
// PyTorch's return_indices = true: also the i64 argmax of each window, flat h * W + w
// within its plane (what max_unpool2d takes)
struct PoolWithIndices {
  Tensor values, indices;
};
PoolWithIndices max_pool2d_with_indices(const Tensor& x, Pool2dOptions opt = {}, Site site = {});
Tensor avg_pool2d(const Tensor& x, Pool2dOptions opt = {}, Site site = {});
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w, Site site = {});

// ---- normalisation
// x [N, C, *]; running stats are updated in training mode when defined
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                  Site site = {});
// relu(batch_norm(cat(xs, 1), ...)) in one op: the concatenation is never made and only
// the output is kept for relu's mask, so a DenseNet layer's BN-ReLU over every earlier
// feature map costs one pass and one tensor. xs: pieces [N, C_j, *] (one shape but C_j).
Tensor batch_norm_relu(const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training, double momentum = 0.1,
                       double eps = 1e-5, Site site = {});
// ---- channel-blocked activations: xb [N, C/B, H, W, B], B = 8 or 16, channel c of pixel
// (h, w) at xb[n][c / B][h][w][c % B] (oneDNN's nChw16c): the layout the CPU's
// convolutions read without a reorder (conv2d_channel_block). A DenseNet layer's
// BN-ReLU writes it and its 3x3 convolution reads it (nn::BatchNorm::forward_relu_blocked,
// nn::Conv2d::forward_blocked). Ordinary tensors: print them, or view them plain with
// from_channel_blocks, which is xb.permute({0, 1, 4, 2, 3}).reshape({N, C, H, W}).
// The block B with which conv2d_blocked on x (its device, and its dtype after autocast)
// runs without any reorder, and faster than conv2d on plain x; 0 where there is none.
int64_t conv2d_channel_block(const Tensor& x);
Tensor to_channel_blocks(const Tensor& x, int64_t block, Site site = {});
Tensor from_channel_blocks(const Tensor& xb, Site site = {});
// batch_norm_relu(xs, ...) written channel-blocked, in the same pass; pieces [N, C_j, H, W]
Tensor batch_norm_relu_blocked(const std::vector<Tensor>& xs, const Tensor& weight, const Tensor& bias,
                               const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                               double eps, int64_t block, Site site = {});
// conv2d(from_channel_blocks(xb), weight, bias, opt) without the reorder; xb's gradient
// comes channel-blocked too
Tensor conv2d_blocked(const Tensor& xb, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions opt = {},
                      Site site = {});
// normalises over the trailing dims `normalized_shape`
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5, Site site = {});

// ---- softmax and losses
Tensor softmax(const Tensor& x, int64_t dim, Site site = {});
Tensor log_softmax(const Tensor& x, int64_t dim, Site site = {});
enum class Reduction : uint8_t { none, mean, sum };
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  // per-class weights [C] (no gradient), as PyTorch: loss_n scaled by weight[y_n], and the
  // mean divides by the sum of weight[y_n] over the rows not ignored
  Tensor weight = {};
};
// logits [N, C] or [N, C, d1, ...], labels i64 [N] or [N, d1, ...]: fused log-softmax + NLL.
// Rows labelled ignore_index give 0 and leave the mean's denominator. An empty batch gives
// what PyTorch gives: nan for the mean, 0 for the sum, an empty tensor for none.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, CrossEntropyOptions opt = {}, Site site = {});
// log_probs [N, C] or [N, C, d1, ...], labels i64 [N] or [N, d1, ...]; as cross_entropy
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels, CrossEntropyOptions opt = {}, Site site = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean, Site site = {});
struct BCEWithLogitsOptions {
  Reduction reduction = Reduction::mean;
  Tensor weight = {};      // broadcast to the input's shape: scales each element's loss
  Tensor pos_weight = {};  // [classes] (broadcast over the last dim): scales the positive term
};
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean, Site site = {});
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, BCEWithLogitsOptions opt,
                                        Site site = {});
// The losses whose gradient is not their composite's, with PyTorch 1.13's rules written out
// in autograd/ops_loss.cpp; nn::functional (nn/losses.h) names them, and nn::SmoothL1Loss,
// KLDivLoss and BCELoss call them. Input and target of one shape and dtype.
struct SmoothL1Options {
  Reduction reduction = Reduction::mean;
  double beta = 1.0;  // >= 0; 0 gives the L1 loss
};
// KLDivLoss's reductions: PyTorch's 'mean' averages over every element; 'batchmean'
// divides the sum by the batch size (input's first dim), the mathematically right KL.
enum class KLDivReduction : uint8_t { none, mean, sum, batchmean };
struct KLDivOptions {
  KLDivReduction reduction = KLDivReduction::mean;
  bool log_target = false;  // the target holds log-probabilities
};
struct BCEOptions {
  Reduction reduction = Reduction::mean;
  Tensor weight = {};  // rescales each element's loss; broadcast to the input's shape
};
// d = |x - y|: 0.5 d^2 / beta where d < beta, else d - 0.5 beta
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1Options opt = {}, Site site = {});
// input: log-probabilities. target t (probabilities): t (log t - input), 0 where t = 0;
// log_target: e^t (t - input)
Tensor kl_div(const Tensor& input, const Tensor& target, KLDivOptions opt = {}, Site site = {});
// input: probabilities in [0, 1] (others refused on the CPU, as PyTorch; NaN on the GPU,
// docs/cuda.md). -w (t log x + (1 - t) log(1 - x)), each log clamped
// at -100 (as PyTorch, so a saturated prediction gives a finite loss)
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, BCEOptions opt = {}, Site site = {});

// ---- randomness in the graph
// zeroes each element with probability p and scales the rest by 1/(1-p); identity when !training
Tensor dropout(const Tensor& x, double p, bool training = true, Site site = {});
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training = true, Site site = {});  // mask from gen

// ---- indexing
struct EmbeddingOptions {
  // the row whose lookups give no gradient (PyTorch's padding_idx); negative counts from the end
  std::optional<int64_t> padding_idx;
};
Tensor embedding(const Tensor& weight, const Tensor& indices, EmbeddingOptions opt = {}, Site site = {});  // weight [V, D]
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, Site site = {});
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, Site site = {});
Tensor one_hot(const Tensor& labels, int64_t num_classes, Site site = {});  // i64 [N] -> f32 [N, C]

// ---- joining and splitting
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0, Site site = {});
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0, Site site = {});
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0, Site site = {});
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0, Site site = {});

// ---- C++ operators (the caller's line travels in TensorArg / ScalarArg)
Tensor operator+(const Tensor& a, TensorArg b);
Tensor operator-(const Tensor& a, TensorArg b);
Tensor operator*(const Tensor& a, TensorArg b);
Tensor operator/(const Tensor& a, TensorArg b);
Tensor operator+(const Tensor& a, ScalarArg b);
Tensor operator-(const Tensor& a, ScalarArg b);
Tensor operator*(const Tensor& a, ScalarArg b);
Tensor operator/(const Tensor& a, ScalarArg b);
Tensor operator+(double a, TensorArg b);
Tensor operator-(double a, TensorArg b);
Tensor operator*(double a, TensorArg b);
Tensor operator/(double a, TensorArg b);
Tensor operator-(TensorArg x);
Tensor operator==(const Tensor& a, TensorArg b);
Tensor operator!=(const Tensor& a, TensorArg b);
Tensor operator<(const Tensor& a, TensorArg b);
Tensor operator<=(const Tensor& a, TensorArg b);
Tensor operator>(const Tensor& a, TensorArg b);
Tensor operator>=(const Tensor& a, TensorArg b);
Tensor operator==(const Tensor& a, ScalarArg b);
Tensor operator!=(const Tensor& a, ScalarArg b);
Tensor operator<(const Tensor& a, ScalarArg b);
Tensor operator<=(const Tensor& a, ScalarArg b);
Tensor operator>(const Tensor& a, ScalarArg b);
Tensor operator>=(const Tensor& a, ScalarArg b);
// In place, recorded as the in-place methods are (tensor.h); also on a temporary view:
// y[0] += w, y.narrow(1, 0, 2) *= 0.5.
Tensor& operator+=(Tensor& a, TensorArg b);
Tensor& operator-=(Tensor& a, TensorArg b);
Tensor& operator*=(Tensor& a, TensorArg b);
Tensor& operator/=(Tensor& a, TensorArg b);
Tensor& operator+=(Tensor& a, ScalarArg b);
Tensor& operator-=(Tensor& a, ScalarArg b);
Tensor& operator*=(Tensor& a, ScalarArg b);
Tensor& operator/=(Tensor& a, ScalarArg b);
Tensor operator+=(Tensor&& a, TensorArg b);
Tensor operator-=(Tensor&& a, TensorArg b);
Tensor operator*=(Tensor&& a, TensorArg b);
Tensor operator/=(Tensor&& a, TensorArg b);
Tensor operator+=(Tensor&& a, ScalarArg b);
Tensor operator-=(Tensor&& a, ScalarArg b);
Tensor operator*=(Tensor&& a, ScalarArg b);
Tensor operator/=(Tensor&& a, ScalarArg b);

// Elementwise closeness, as torch.allclose: |a - b| <= atol + rtol |b|
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, Site site = {});

}  // namespace reel

#include "ops_everyday.h"  // masks, sorting, scans, norms, scatter, padding, einsum, 1-d conv and pooling
