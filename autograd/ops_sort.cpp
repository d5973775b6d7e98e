// Sorting and selection along one dim: max/min with their indices, sort, argsort,
// topk, and multinomial sampling. The kernel (Backend::sort) sorts rows of a
// contiguous [R, n] copy with the sorted dim last and returns the positions; the
// values that need a gradient are then read back through gather, whose rule (a
// scatter_add into zeros) is the gradient of a selection, twice differentiable.
#include <cmath>
#include <limits>

#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

// values and indices of the first k of each sorted line of x along dim d
ValuesIndices sorted_along(const Tensor& x, int d, int64_t k, bool descending) {
  const int last = x.dim() - 1;
  Dims tshape = x.shape();  // the shape of x.transpose(d, last)
  std::swap(tshape[d], tshape[last]);
  const int64_t n = tshape[last];
  int64_t R = 1;
  for (int i = 0; i < last; ++i) R *= tshape[i];
  tshape[last] = k;
  Tensor values = new_tensor({R, k}, x.dtype(), x.device());
  Tensor indices = new_tensor({R, k}, DType::i64, x.device());
  if (R * k > 0) {
    NoGradGuard guard;
    Tensor rows = x.transpose(d, last).contiguous().reshape({R, n});
    backend_of(x).sort(values, indices, rows, descending);
  }
  Tensor idx = make_view(indices, tshape, contiguous_strides(tshape), 0).transpose(d, last).contiguous();
  if (should_record({&x})) return {gather(x, d, idx), idx};
  return {make_view(values, tshape, contiguous_strides(tshape), 0).transpose(d, last).contiguous(), idx};
}

// x with at least one dim (a 0-d tensor sorts as a one-element vector), and the wrapped dim
int sort_dim(const OpScope& op, const Tensor& x, int64_t dim) {
  check_defined(op, x, "the input");
  return wrap_dim(op.op, dim, std::max(x.dim(), 1), op.site);
}

ValuesIndices extremum_with_index(const char* name, const Tensor& x, int64_t dim, bool keepdim, bool largest,
                                  const Site& site) {
  OpScope op(name, site);
  check_defined(op, x, "the input");
  check_nonempty(op, x, "input");
  Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x;
  int d = wrap_dim(op.op, dim, x1.dim(), op.site);
  Tensor idx = largest ? argmax(x1, d, true) : argmin(x1, d, true);
  Tensor values = gather(x1, d, idx);
  if (x.dim() == 0) return {values.reshape({}), idx.reshape({})};
  if (!keepdim) return {values.squeeze(d), idx.squeeze(d)};
  return {values, idx};
}

}  // namespace

// y = x at its argmax along dim; the gradient flows to that one element (gather's rule)
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim, Site site) {
  return extremum_with_index("max", x, dim, keepdim, true, site);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim, Site site) {
  return extremum_with_index("min", x, dim, keepdim, false, site);
}

// y = x permuted along dim into order; dx = g scattered back to the original positions
ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, Site site) {
  OpScope op("sort", site);
  int d = sort_dim(op, x, dim);
  if (x.dim() == 0) {
    ValuesIndices r = sorted_along(x.reshape({1}), 0, 1, descending);
    return {r.values.reshape({}), r.indices.reshape({})};
  }
  return sorted_along(x, d, x.size(d), descending);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, Site site) {
  OpScope op("argsort", site);
  NoGradGuard guard;
  return sort(x, dim, descending).indices;
}

// the first k of sort(x, dim, largest)
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, Site site) {
  OpScope op("topk", site);
  int d = sort_dim(op, x, dim);
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (k < 0 || k > n)
    fail(op.op, fmt::format("k = {} is out of range for dim {} of the input {}: expected 0 to {}", k, d,
                            x.shape().str(), n), op.site);
  if (x.dim() == 0) {
    ValuesIndices r = sorted_along(x.reshape({1}), 0, k, largest);
    return {r.values.reshape(k ? Dims{} : Dims{0}), r.indices.reshape(k ? Dims{} : Dims{0})};
  }
  return sorted_along(x, d, k, largest);
}

// With replacement: each draw u ~ U[0, total) picks the first category whose running sum
// exceeds u (counted as the running sums <= u: an [N, num_samples, C] comparison, which is
// small for the usual num_samples = 1 and grows with many draws from a large C). Without: the num_samples largest keys log(1 - u) / p (Efraimidis-Spirakis),
// which draws categories one after another in proportion to the weights that remain, as
// PyTorch does, in one sort.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Site site) {
  OpScope op("multinomial", site);
  check_defined(op, probs, "the probabilities");
  check_floating(op, probs, "the probabilities");
  if (probs.dim() != 1 && probs.dim() != 2)
    fail(op.op, fmt::format("expected probabilities [C] or [N, C], got {}", probs.shape().str()), op.site);
  const int64_t C = probs.size(-1);
  if (C == 0) fail(op.op, fmt::format("expected at least one category, got {}", probs.shape().str()), op.site);
  if (num_samples < 1) fail(op.op, fmt::format("expected num_samples >= 1, got {}", num_samples), op.site);
  if (!replacement && num_samples > C)
    fail(op.op, fmt::format("cannot draw {} samples without replacement from {} categories", num_samples, C),
         op.site);
  NoGradGuard guard;
  Tensor p = probs.dim() == 1 ? probs.unsqueeze(0) : probs;
  const int64_t N = p.size(0);
  {  // the distribution: finite, non-negative, some weight in every row (one host sync)
    Tensor bad = logical_or(logical_not(isfinite(p)), lt(p, 0.0));
    Tensor positive = sum(gt(p, 0.0), {1});
    if (any(bad).item<bool>())
      fail(op.op, fmt::format("expected finite, non-negative probabilities, got some that are not in {}",
                              describe(probs)), op.site);
    int64_t fewest = amin(positive).item<int64_t>();
    if (fewest == 0) fail(op.op, fmt::format("a row of {} has no positive probability", describe(probs)), op.site);
    if (!replacement && fewest < num_samples)
      fail(op.op, fmt::format("cannot draw {} samples without replacement: a row of {} has only {} categories "
                              "with positive probability", num_samples, describe(probs), fewest), op.site);
  }
  Tensor out;
  if (replacement) {
    Tensor cdf = cumsum(p, 1);                                     // [N, C]
    Tensor u = mul(rand({N, num_samples}, {.dtype = p.dtype(), .device = p.device()}), cdf.narrow(1, C - 1, 1));
    Tensor below = le(cdf.unsqueeze(1), u.unsqueeze(2));           // [N, S, C]
    out = clamp_max(sum(below, {2}), double(C - 1)).to(DType::i64);
  } else {
    Tensor u = rand({N, C}, {.dtype = p.dtype(), .device = p.device()});
    Tensor keys = div(log(1.0 - u), p);                            // -inf where p = 0
    keys = where(gt(p, 0.0), keys, full({}, -std::numeric_limits<double>::infinity(),
                                        {.dtype = p.dtype(), .device = p.device()}));
    out = topk(keys, num_samples, 1).indices;
  }
  return probs.dim() == 1 ? out.reshape({num_samples}) : out;
}

}  // namespace reel
