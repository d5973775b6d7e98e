// Creation (linspace, eye), masks and triangles (masked_fill, tril, triu), tests of
// values (isnan, isinf, isfinite, any, all), nan_to_num, clamp_min/clamp_max, clamp with
// tensor bounds and lerp. All compose from where, the comparisons and the reductions, so
// their gradients are those ops' rules (and twice differentiable with them), except clamp
// with tensor bounds, whose rule (PyTorch's masks) is written out of the same ops; none
// needs a kernel of its own.
#include <cmath>
#include <limits>

#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

// masked_fill's mask: bool, on x's device, broadcastable to x's shape (x keeps its shape,
// as PyTorch: a mask with more or larger dims is refused, not broadcast over)
void check_mask(const OpScope& op, const Tensor& x, const Tensor& mask) {
  check_defined(op, x, "the input");
  check_defined(op, mask, "the mask");
  check_dtype(op, mask, DType::boolean, "the mask");
  check_same_device(op, x, mask);
  bool fits = mask.dim() <= x.dim();
  for (int i = 1; fits && i <= mask.dim(); ++i)
    fits = mask.size(-i) == 1 || mask.size(-i) == x.size(-i);
  if (!fits)
    fail(op.op, fmt::format("the mask {} does not broadcast to the input's shape {}", mask.shape().str(),
                            x.shape().str()), op.site);
}

// a 0-d tensor of value in t's dtype and device, off the tape
Tensor scalar_like(const Tensor& t, double value) {
  return full({}, value, {.dtype = t.dtype(), .device = t.device()});
}

// bool [R, C]: keep[i][j] = lower ? j - i <= diagonal : j - i >= diagonal
Tensor triangle_mask(int64_t rows, int64_t cols, int64_t diagonal, bool lower, Device device) {
  std::vector<uint8_t> keep(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) keep[size_t(i * cols + j)] = lower ? j - i <= diagonal : j - i >= diagonal;
  return from_vector<uint8_t>(keep, {rows, cols}, {.dtype = DType::boolean, .device = device});
}

Tensor triangle(const char* name, const Tensor& x, int64_t diagonal, bool lower, const Site& site) {
  OpScope op(name, site);
  check_defined(op, x, "the input");
  if (x.dim() < 2)
    fail(op.op, fmt::format("expected a tensor of at least 2 dims (the last two are the matrix), got {}",
                            x.shape().str()), op.site);
  Tensor keep = triangle_mask(x.size(-2), x.size(-1), diagonal, lower, x.device());
  return where(keep, x, scalar_like(x, 0));
}

}  // namespace

// x_i = start + i step for i < steps / 2, end - (steps - 1 - i) step after (PyTorch's
// symmetric rounding), in f32 arithmetic for f32 results as PyTorch computes them
Tensor linspace(double start, double end, int64_t steps, Options opt, Site site) {
  OpScope op("linspace", site);
  if (steps < 0) fail(op.op, fmt::format("expected steps >= 0, got {}", steps), op.site);
  std::vector<double> v(static_cast<size_t>(steps));
  auto fill = [&]<typename T>() {
    const T a = T(start), b = T(end), step = steps > 1 ? (b - a) / T(steps - 1) : T(0);
    for (int64_t i = 0; i < steps; ++i)
      // fused multiply-adds, as PyTorch's vectorised kernel computes them (and whatever the
      // compiler's contraction setting: a Debug build gave a 1-ulp different value)
      v[size_t(i)] = double(i < steps / 2 ? std::fma(step, T(i), a) : std::fma(-step, T(steps - 1 - i), b));
  };
  if (opt.dtype == DType::f64) fill.template operator()<double>();
  else fill.template operator()<float>();
  if (steps == 1) v[0] = start;
  return from_vector<double>(v, {steps}, opt, op.site);
}

Tensor eye(int64_t n, int64_t m, Options opt, Site site) {
  OpScope op("eye", site);
  if (m < 0) m = n;
  if (n < 0) fail(op.op, fmt::format("expected n >= 0, got {}", n), op.site);
  std::vector<double> v(size_t(n * m), 0.0);
  for (int64_t i = 0; i < std::min(n, m); ++i) v[size_t(i * m + i)] = 1.0;
  return from_vector<double>(v, {n, m}, opt, op.site);
}

// y = mask ? value : x; dx = g where !mask (where's rule)
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, Site site) {
  OpScope op("masked_fill", site);
  check_mask(op, x, mask);
  return where(mask, scalar_like(x, value), x);
}

// y = mask ? value : x; dvalue = sum of g over the mask
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value, Site site) {
  OpScope op("masked_fill", site);
  check_mask(op, x, mask);
  check_defined(op, value, "the value");
  if (value.dim() != 0)
    fail(op.op, fmt::format("expected a 0-d value tensor, got {}", describe(value)), op.site);
  return where(mask, value.to(x.dtype()), x);
}

Tensor tril(const Tensor& x, int64_t diagonal, Site site) { return triangle("tril", x, diagonal, true, site); }
Tensor triu(const Tensor& x, int64_t diagonal, Site site) { return triangle("triu", x, diagonal, false, site); }

Tensor isnan(const Tensor& x, Site site) {
  OpScope op("isnan", site);
  check_defined(op, x, "the input");
  return ne(x, x);  // NaN is the only value unequal to itself
}

Tensor isinf(const Tensor& x, Site site) {
  OpScope op("isinf", site);
  check_defined(op, x, "the input");
  if (!x.is_floating_point()) return zeros(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  NoGradGuard guard;
  return eq(abs(x), std::numeric_limits<double>::infinity());
}

Tensor isfinite(const Tensor& x, Site site) {
  OpScope op("isfinite", site);
  check_defined(op, x, "the input");
  if (!x.is_floating_point()) return ones(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  NoGradGuard guard;
  return logical_not(logical_or(isnan(x), isinf(x)));
}

// y = x with NaN, +inf and -inf replaced; dx = g where x was finite
Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf,
                  Site site) {
  OpScope op("nan_to_num", site);
  check_defined(op, x, "the input");
  if (!x.is_floating_point()) return x.clone();
  const double big = x.dtype() == DType::f64 ? std::numeric_limits<double>::max()
                     : x.dtype() == DType::f16 ? 65504.0
                     : x.dtype() == DType::bf16 ? 3.3895313892515355e38
                                                : double(std::numeric_limits<float>::max());
  const double inf = std::numeric_limits<double>::infinity();
  Tensor is_nan, is_pos, is_neg;
  {
    NoGradGuard guard;
    is_nan = isnan(x);
    is_pos = eq(x, inf);
    is_neg = eq(x, -inf);
  }
  Tensor y = where(is_neg, scalar_like(x, neginf.value_or(-big)), x);
  y = where(is_pos, scalar_like(x, posinf.value_or(big)), y);
  return where(is_nan, scalar_like(x, nan), y);
}

// any: some element != 0 in each group; all: none == 0. Bool, no gradient.
Tensor any(const Tensor& x, const Dims& dims, bool keepdim, Site site) {
  OpScope op("any", site);
  check_defined(op, x, "the input");
  NoGradGuard guard;
  return gt(sum(ne(x, 0.0), dims, keepdim), 0.0);
}

Tensor all(const Tensor& x, const Dims& dims, bool keepdim, Site site) {
  OpScope op("all", site);
  check_defined(op, x, "the input");
  NoGradGuard guard;
  return eq(sum(eq(x, 0.0), dims, keepdim), 0.0);
}

Tensor clamp_min(const Tensor& x, double low, Site site) {
  OpScope op("clamp_min", site);
  return clamp(x, low, std::numeric_limits<double>::infinity());
}
Tensor clamp_max(const Tensor& x, double high, Site site) {
  OpScope op("clamp_max", site);
  return clamp(x, -std::numeric_limits<double>::infinity(), high);
}

// y = min(max(x, low), high), broadcast (NaN anywhere gives NaN); dx = g where
// low <= x <= high, dlow = g where x < low < high, dhigh = g where x > high or high < low
// (PyTorch 1.13's clamp_backward and clamp_backward_min_max), each summed to its shape
Tensor clamp(const Tensor& x, const Tensor& low, const Tensor& high, Site site) {
  OpScope op("clamp", site);
  check_defined(op, x, "the input");
  if (!low.defined() && !high.defined()) fail(op.op, "expected a low or a high bound, got neither", op.site);
  Dims shape = x.shape();
  for (const Tensor* b : {&low, &high}) {
    if (!b->defined()) continue;
    check_same_device(op, x, *b);
    if (b->dtype() != x.dtype())
      fail(op.op, fmt::format("expected bounds of the input's dtype, got input {} and bound {}", describe(x),
                              describe(*b)), op.site);
    shape = broadcast_shapes(op.op, shape, b->shape(), op.site);
  }
  Tensor y;
  {
    NoGradGuard forward_only;  // the rule below is the whole gradient
    y = x;
    if (low.defined()) y = maximum(y, low);
    if (high.defined()) y = minimum(y, high);
  }
  if (Node* n = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        Tensor x = n.saved_tensor(0), low = n.saved_tensor(1), high = n.saved_tensor(2);
        Tensor zero = zeros_like(g[0]);
        auto pass = [&](const Tensor& mask, int i) { gi[i] = sum_to(where(mask, g[0], zero), n.input_shape(i)); };
        if (n.needs_grad(0)) {
          Tensor inside = !low.defined() ? le(x, high) : !high.defined() ? ge(x, low)
                                                       : logical_and(ge(x, low), le(x, high));
          pass(inside, 0);
        }
        if (n.needs_grad(1)) pass(high.defined() ? logical_and(lt(x, low), lt(low, high)) : lt(x, low), 1);
        if (n.needs_grad(2)) pass(low.defined() ? logical_or(gt(x, high), lt(high, low)) : gt(x, high), 2);
      }, {&x, &low, &high}, {&y})) {
    n->save(x);
    n->save(low);
    n->save(high);
  }
  return y;
}

// y = a + w (b - a); da = g (1 - w), db = g w, dw = g (b - a)
Tensor lerp(const Tensor& a, const Tensor& b, double weight, Site site) {
  OpScope op("lerp", site);
  check_defined(op, a, "the start");
  check_defined(op, b, "the end");
  broadcast_shapes(op.op, a.shape(), b.shape(), op.site);  // checked in the user's order
  return add(a, mul(sub(b, a), weight));
}

Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight, Site site) {
  OpScope op("lerp", site);
  check_defined(op, a, "the start");
  check_defined(op, b, "the end");
  check_defined(op, weight, "the weight");
  broadcast_shapes(op.op, broadcast_shapes(op.op, a.shape(), b.shape(), op.site), weight.shape(), op.site);
  return add(a, mul(weight, sub(b, a)));
}

}  // namespace reel
