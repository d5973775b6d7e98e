// The activations beyond relu: gelu (exact and tanh), erf, silu, mish, hardswish,
// softplus, elu. Each: y = f(x) elementwise ([*] -> [*], integers promoted to f32), x
// saved; the backward rule is one fused backend call, g f'(x) (Backend::unary_backward),
// and under create_graph the same derivative as recorded ops, written beside each op.
// Formulas and edge rules are PyTorch 1.13's (test/reference/activations.py checks them).
#include <cmath>

#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;
constexpr double kSqrt1_2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;

Tensor sigmoid_of(const Tensor& x) { return reciprocal(add(exp(neg(x)), 1.0)); }

// gelu'(x) = Phi(x) + x phi(x)
Tensor d_gelu(const Tensor& g, const Tensor& x) {
  Tensor cdf = mul(add(erf(mul(x, kSqrt1_2)), 1.0), 0.5);
  Tensor pdf = mul(exp(mul(square(x), -0.5)), kInvSqrt2Pi);
  return mul(g, add(cdf, mul(x, pdf)));
}
// gelu_tanh'(x) = (1 + t) / 2 + x (1 - t^2) u' / 2, t = tanh u, u = c (x + k x^3)
Tensor d_gelu_tanh(const Tensor& g, const Tensor& x) {
  const double c = std::sqrt(2.0 / M_PI), k = 0.044715;
  Tensor t = tanh(mul(add(x, mul(pow(x, 3.0), k)), c));
  Tensor du = mul(add(mul(square(x), 3 * k), 1.0), c);
  return mul(g, add(mul(add(t, 1.0), 0.5), mul(mul(x, 1.0 - square(t)), mul(du, 0.5))));
}
// erf'(x) = 2 / sqrt(pi) e^(-x^2)
Tensor d_erf(const Tensor& g, const Tensor& x) {
  return mul(g, mul(exp(neg(square(x))), 2.0 / std::sqrt(M_PI)));
}
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x)
Tensor d_silu(const Tensor& g, const Tensor& x) {
  Tensor s = sigmoid_of(x);
  return mul(g, mul(s, add(mul(x, 1.0 - s), 1.0)));
}
// mish'(x) = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x))
Tensor d_mish(const Tensor& g, const Tensor& x) {
  Tensor t = tanh(softplus(x));
  return mul(g, add(t, mul(mul(x, sigmoid_of(x)), 1.0 - square(t))));
}
// hardswish'(x) = 0 below -3, x/3 + 1/2 on [-3, 3], 1 above 3: PyTorch's scalar and CUDA
// kernels (1.5 at 3; its vectorised CPU body says 1 there, test/reference/edges35.py)
Tensor d_hardswish(const Tensor& g, const Tensor& x) {
  Tensor mid = mul(g, add(div(x, 3.0), 0.5));
  return where(lt(x, -3.0), zeros_like(g), where(le(x, 3.0), mid, g));
}
// softplus'(x) = sigmoid(beta x), 1 where beta x > threshold
Tensor d_softplus(const Tensor& g, const Tensor& x, double beta, double threshold) {
  Tensor z = mul(x, beta);
  return where(gt(z, threshold), g, mul(g, sigmoid_of(z)));
}
// elu'(x) = 1 for x > 0, alpha e^x otherwise
Tensor d_elu(const Tensor& g, const Tensor& x, double alpha) {
  return where(gt(x, 0.0), g, mul(g, mul(exp(x), alpha)));
}

// g f'(x) as recorded ops, for a create_graph backward
Tensor derivative(UnaryOp kind, const Tensor& g, const Tensor& x, double a, double b) {
  switch (kind) {
    case UnaryOp::gelu: return d_gelu(g, x);
    case UnaryOp::gelu_tanh: return d_gelu_tanh(g, x);
    case UnaryOp::erf: return d_erf(g, x);
    case UnaryOp::silu: return d_silu(g, x);
    case UnaryOp::mish: return d_mish(g, x);
    case UnaryOp::hardswish: return d_hardswish(g, x);
    case UnaryOp::softplus: return d_softplus(g, x, a, b);
    default: return d_elu(g, x, a);
  }
}

// y = f(x; a, b) on the backend; records g f'(x) with x saved, and the op with a, b (ActivationArgs)
Tensor activation(const OpScope& op, UnaryOp kind, const Tensor& x, double a = 0, double b = 0) {
  check_defined(op, x, "the input");
  Tensor in = x.is_floating_point() ? x : cast(x, DType::f32);
  Tensor y = new_like(in);
  if (y.numel()) backend_of(in).unary(kind, y, in, a, b);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0);
        const ActivationArgs& args = n.args<ActivationArgs>();
        const double a = args.a, b = args.b;
        if (grad_enabled()) {  // create_graph: recorded ops
          gi[0] = derivative(args.kind, g[0], x, a, b);
          return;
        }
        Tensor gx = new_like(x);
        if (gx.numel()) backend_of(gx).unary_backward(args.kind, gx, g[0], x, a, b);
        gi[0] = gx;
      }, {&x}, {&y});
  if (n) {
    n->save(in);
  }
  keep_args(op, n, ActivationArgs{.kind = kind, .a = a, .b = b});
  return y;
}

}  // namespace

// y = x Phi(x); approximate "tanh": y = x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2
Tensor gelu(const Tensor& x, std::string_view approximate, Site site) {
  OpScope op("gelu", site);
  if (approximate == "none") return activation(op, UnaryOp::gelu, x);
  if (approximate == "tanh") return activation(op, UnaryOp::gelu_tanh, x);
  fail("gelu", fmt::format("approximate must be \"none\" or \"tanh\", got \"{}\"", approximate), op.site);
}

// y = erf(x) = 2 / sqrt(pi) int_0^x e^(-t^2) dt
Tensor erf(const Tensor& x, Site site) {
  OpScope op("erf", site);
  return activation(op, UnaryOp::erf, x);
}

// y = x sigmoid(x)
Tensor silu(const Tensor& x, Site site) {
  OpScope op("silu", site);
  return activation(op, UnaryOp::silu, x);
}

// y = x tanh(ln(1 + e^x))
Tensor mish(const Tensor& x, Site site) {
  OpScope op("mish", site);
  return activation(op, UnaryOp::mish, x);
}

// y = x min(max(x + 3, 0), 6) / 6
Tensor hardswish(const Tensor& x, Site site) {
  OpScope op("hardswish", site);
  return activation(op, UnaryOp::hardswish, x);
}

// y = ln(1 + e^(beta x)) / beta, or x where beta x > threshold
Tensor softplus(const Tensor& x_in, double beta, double threshold, Site site) {
  OpScope op("softplus", site);
  const Tensor x = autocast_f32(x_in);
  return activation(op, UnaryOp::softplus, x, beta, threshold);
}

// y = x for x > 0, alpha (e^x - 1) otherwise
Tensor elu(const Tensor& x, double alpha, Site site) {
  OpScope op("elu", site);
  return activation(op, UnaryOp::elu, x, alpha);
}

// The hard-edged activations, composed: where(inside, f(x), edge value) with the edge
// values off the tape, so g reaches x exactly where PyTorch's backward rules pass it.

// y = clamp(x, min, max); dx = g where min < x < max (PyTorch's hardtanh_backward: 0 where
// x <= min or x >= max, so NaN passes g)
Tensor hardtanh(const Tensor& x, double min_val, double max_val, Site site) {
  OpScope op("hardtanh", site);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  if (!(min_val <= max_val))
    fail(op.op, fmt::format("expected min_val <= max_val, got {} and {}", min_val, max_val), op.site);
  Tensor edge = clamp(x.detach(), min_val, max_val);
  return where(logical_not(logical_or(le(x, min_val), ge(x, max_val))), x, edge);
}

Tensor relu6(const Tensor& x, Site site) {
  OpScope op("relu6", site);
  return hardtanh(x, 0.0, 6.0);
}

// y = clamp(x + 3, 0, 6) / 6; dx = g / 6 where -3 < x < 3 (PyTorch's hardsigmoid_backward)
Tensor hardsigmoid(const Tensor& x, Site site) {
  OpScope op("hardsigmoid", site);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  Tensor edge = div(clamp(add(x.detach(), 3.0), 0.0, 6.0), 6.0);
  return where(logical_and(gt(x, -3.0), lt(x, 3.0)), div(add(x, 3.0), 6.0), edge);
}

// y = x > threshold ? x : value; dx = g where x > threshold (PyTorch: 0 where x <= threshold,
// so NaN passes g)
Tensor threshold(const Tensor& x, double threshold, double value, Site site) {
  OpScope op("threshold", site);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  return where(le(x, threshold), full_like(x, value), x);
}

}  // namespace reel
