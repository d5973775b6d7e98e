// Statistics and norms: logsumexp, std, the vector p-norm and what is built on it
// (normalize, cosine_similarity). Composites of the reductions and elementwise ops,
// except the p-norm for p other than 1 and +-inf, whose rule needs a zero-norm guard
// (PyTorch's: the gradient of a zero norm is 0, where the composite would give NaN).
#include <cmath>
#include <limits>

#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// the shape of a reduction of x over dims without keepdim (empty dims: all)
Dims reduced_shape(const OpScope& op, const Tensor& x, const Dims& dims) {
  std::vector<bool> gone(size_t(x.dim()), dims.empty());
  for (int64_t d : dims) gone[size_t(wrap_dim(op.op, d, x.dim(), op.site))] = true;
  Dims out;
  for (int i = 0; i < x.dim(); ++i)
    if (!gone[size_t(i)]) out.push_back(x.size(i));
  return out;
}

Tensor scalar_of(const Tensor& like, double v) { return full({}, v, {.dtype = like.dtype(), .device = like.device()}); }

// dx = g x |x|^(p-2) / y^(p-1) (p = 2: g x / y), 0 where y = 0; g and y keep the reduced dims
Tensor norm_grad(const Tensor& g, const Tensor& x, const Tensor& y, double p) {
  Tensor zero_norm;
  {
    NoGradGuard guard;
    zero_norm = eq(y, 0.0);
  }
  Tensor safe_y = where(zero_norm, scalar_of(y, 1.0), y);
  Tensor scale = where(zero_norm, scalar_of(y, 0.0), p == 2 ? div(g, safe_y) : div(g, pow(safe_y, p - 1)));
  return p == 2 ? mul(x, scale) : mul(mul(x, pow(abs(x), p - 2)), scale);
}

// y = (sum |x|^p)^(1/p) over dims, kept as size-1 dims
Tensor pnorm_kept(const Tensor& x, double p, const Dims& dims) {
  OpScope op("norm", {});
  Tensor y;
  {
    NoGradGuard guard;
    y = p == 2 ? sqrt(sum(square(x), dims, true)) : pow(sum(pow(abs(x), p), dims, true), 1.0 / p);
  }
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = norm_grad(g[0], n.saved_tensor(0), n.saved_tensor(1), n.args<PNormArgs>().p);
      }, {&x}, {&y});
  if (n) {
    n->save(x);
    n->save(y);
  }
  keep_args(op, n, PNormArgs{.p = p});
  return y;
}

}  // namespace

// y = m + log(sum(exp(x - m))), m = max over dims (0 where it is infinite); dx = g softmax(x)
Tensor logsumexp(const Tensor& x_in, const Dims& dims, bool keepdim, Site site) {
  OpScope op("logsumexp", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  Dims out = reduced_shape(op, x, dims);
  Tensor m;
  {
    NoGradGuard guard;
    m = x.numel() ? amax(x, dims, true) : zeros(sum(x, dims, true).shape(), {.dtype = x.dtype(), .device = x.device()});
    m = where(isinf(m), scalar_of(m, 0.0), m);
  }
  Tensor y = add(log(sum(exp(sub(x, m)), dims, true)), m);
  return keepdim ? y : y.reshape(out);
}

// sqrt(var)
Tensor std(const Tensor& x_in, const Dims& dims, int64_t correction, bool keepdim, Site site) {
  OpScope op("std", site);
  const Tensor x = autocast_f32(x_in);
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor norm(const Tensor& x_in, double p, const Dims& dims, bool keepdim, Site site) {
  OpScope op("norm", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  if (std::isnan(p) || (p < 0 && !std::isinf(p)))
    fail(op.op, fmt::format("expected p > 0, p = 0 or p = +-inf, got {}", p), op.site);
  Dims out = reduced_shape(op, x, dims);
  Tensor y;
  if (p == 1) {
    y = sum(abs(x), dims, true);
  } else if (std::isinf(p)) {
    if (x.numel() == 0) fail(op.op, fmt::format("the {}inf norm of an empty tensor {} is undefined", p < 0 ? "-" : "",
                                                x.shape().str()), op.site);
    y = p > 0 ? amax(abs(x), dims, true) : amin(abs(x), dims, true);
  } else if (p == 0) {  // the count of non-zeros: no gradient
    NoGradGuard guard;
    y = sum(ne(x, 0.0), dims, true).to(x.dtype());
  } else {
    y = pnorm_kept(x, p, dims);
  }
  return keepdim ? y : y.reshape(out);
}

Tensor normalize(const Tensor& x_in, double p, int64_t dim, double eps, Site site) {
  OpScope op("normalize", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  return div(x, clamp_min(norm(x, p, {dim}, true), eps));
}

Tensor cosine_similarity(const Tensor& a_in, const Tensor& b_in, int64_t dim, double eps, Site site) {
  OpScope op("cosine_similarity", site);
  const Tensor a = autocast_f32(a_in), b = autocast_f32(b_in);
  check_defined(op, a, "the first input");
  check_defined(op, b, "the second input");
  check_same_device(op, a, b);
  Dims shape = broadcast_shapes(op.op, a.shape(), b.shape(), op.site);
  int d = wrap_dim(op.op, dim, shape.size(), op.site);
  Tensor ea = a.expand(shape), eb = b.expand(shape);
  Tensor na = clamp_min(norm(ea, 2, {d}, true), eps), nb = clamp_min(norm(eb, 2, {d}, true), eps);
  return sum(mul(div(ea, na), div(eb, nb)), {d});
}

}  // namespace reel
