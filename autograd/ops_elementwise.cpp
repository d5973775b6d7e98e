// Elementwise ops: unary, binary with NumPy broadcasting, comparisons, where, and the
// C++ operators. Each op: checks, forward call, backward rule, together.
#include <cmath>

#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// out = f(x) for a floating x (integers are promoted to f32)
Tensor unary_forward(const OpScope& op, UnaryOp kind, const Tensor& x, double a = 0, double b = 0) {
  check_defined(op, x, "the input");
  Tensor in = x.is_floating_point() ? x : cast(x, DType::f32);
  Tensor out = new_in_layout_of(in, in.shape(), in.dtype());
  if (out.numel()) backend_of(in).unary(kind, out, in, a, b);
  return out;
}

// Promotes a and b to one dtype and broadcasts them to one shape.
struct Broadcast {
  Tensor a, b;
  Dims shape;
};
Broadcast broadcast(const OpScope& op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "the first operand");
  check_defined(op, b, "the second operand");
  check_same_device(op, a, b);
  Dims shape = broadcast_shapes(op.op, a.shape(), b.shape(), op.site);
  DType dt = promote(a.dtype(), b.dtype());
  return {expand_view(cast(a, dt), shape), expand_view(cast(b, dt), shape), shape};
}

Tensor binary_forward(const OpScope& op, BinaryOp kind, const Tensor& a, const Tensor& b, bool to_float = false) {
  Broadcast bc = broadcast(op, a, b);
  if (to_float && !is_floating(bc.a.dtype())) {
    bc.a = cast(bc.a, DType::f32);
    bc.b = cast(bc.b, DType::f32);
  }
  // a channels-last operand (a convolution's activation) keeps the output channels-last
  const bool a_cl = is_channels_last(bc.a.shape(), bc.a.strides());
  Tensor out = new_in_layout_of(a_cl ? bc.a : bc.b, bc.shape, bc.a.dtype());
  if (out.numel()) backend_of(out).binary(kind, out, bc.a, bc.b);
  return out;
}

Tensor compare(const OpScope& op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  Broadcast bc = broadcast(op, a, b);
  Tensor out = new_tensor(bc.shape, DType::boolean, bc.a.device());
  if (out.numel()) backend_of(out).binary(kind, out, bc.a, bc.b);
  return out;
}

Tensor compare_scalar(const OpScope& op, UnaryOp kind, const Tensor& x, double v) {
  check_defined(op, x, "the input");
  Tensor out = new_tensor(x.shape(), DType::boolean, x.device());
  if (out.numel()) backend_of(x).unary(kind, out, x, v);
  return out;
}

}  // namespace

Tensor relu_grad(const Tensor& g, const Tensor& y) {
  if (grad_enabled()) return mul(g, logical_not(le(y, 0.0)).to(g.dtype()));  // keeps g's graph
  Tensor gx = new_in_layout_of(y, y.shape(), y.dtype());
  backend_of(gx).binary(BinaryOp::relu_backward, gx, g, y);
  return gx;
}

// ---- unary: y = f(x), dy/dx written beside each

// y = -x; dx = -g
Tensor neg(const Tensor& x, Site site) {
  OpScope op("neg", site);
  Tensor y = unary_forward(op, UnaryOp::neg, x);
  record(op, [](Node&, const Grads& g, Grads& gi) { gi[0] = neg(g[0]); }, {&x}, {&y});
  return y;
}

// y = |x|; dx = g sign(x)
Tensor abs(const Tensor& x, Site site) {
  OpScope op("abs", site);
  Tensor y = unary_forward(op, UnaryOp::abs, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { gi[0] = mul(g[0], sign(n.saved_tensor(0))); },
                       {&x}, {&y}))
    n->save(x);
  return y;
}

// y = e^x; dx = g y
Tensor exp(const Tensor& x_in, Site site) {
  OpScope op("exp", site);
  const Tensor x = autocast_f32(x_in);
  Tensor y = unary_forward(op, UnaryOp::exp, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { gi[0] = mul(g[0], n.saved_tensor(0)); },
                       {&x}, {&y}))
    n->save(y);
  return y;
}

// y = ln x; dx = g / x
Tensor log(const Tensor& x_in, Site site) {
  OpScope op("log", site);
  const Tensor x = autocast_f32(x_in);
  Tensor y = unary_forward(op, UnaryOp::log, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { gi[0] = div(g[0], n.saved_tensor(0)); },
                       {&x}, {&y}))
    n->save(x);
  return y;
}

// y = sqrt x; dx = g / (2 y)
Tensor sqrt(const Tensor& x, Site site) {
  OpScope op("sqrt", site);
  Tensor y = unary_forward(op, UnaryOp::sqrt, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = div(g[0], mul(n.saved_tensor(0), 2.0));
      }, {&x}, {&y}))
    n->save(y);
  return y;
}

// y = x^-1/2; dx = -g y^3 / 2
Tensor rsqrt(const Tensor& x_in, Site site) {
  OpScope op("rsqrt", site);
  const Tensor x = autocast_f32(x_in);
  Tensor y = unary_forward(op, UnaryOp::rsqrt, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = mul(g[0], mul(pow(n.saved_tensor(0), 3.0), -0.5));
      }, {&x}, {&y}))
    n->save(y);
  return y;
}

// y = x^2; dx = 2 g x
Tensor square(const Tensor& x, Site site) {
  OpScope op("square", site);
  Tensor y = unary_forward(op, UnaryOp::square, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = mul(g[0], mul(n.saved_tensor(0), 2.0));
      }, {&x}, {&y}))
    n->save(x);
  return y;
}

// y = 1/x; dx = -g y^2
Tensor reciprocal(const Tensor& x_in, Site site) {
  OpScope op("reciprocal", site);
  const Tensor x = autocast_f32(x_in);
  Tensor y = unary_forward(op, UnaryOp::reciprocal, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = neg(mul(g[0], square(n.saved_tensor(0))));
      }, {&x}, {&y}))
    n->save(y);
  return y;
}

// y = sin x; dx = g cos x
Tensor sin(const Tensor& x, Site site) {
  OpScope op("sin", site);
  Tensor y = unary_forward(op, UnaryOp::sin, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { gi[0] = mul(g[0], cos(n.saved_tensor(0))); },
                       {&x}, {&y}))
    n->save(x);
  return y;
}

// y = cos x; dx = -g sin x
Tensor cos(const Tensor& x, Site site) {
  OpScope op("cos", site);
  Tensor y = unary_forward(op, UnaryOp::cos, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = neg(mul(g[0], sin(n.saved_tensor(0))));
      }, {&x}, {&y}))
    n->save(x);
  return y;
}

// y = max(x, 0); dx = g where x > 0 (0 at exactly 0, as PyTorch); relu(NaN) = NaN and
// its gradient passes g (PyTorch's threshold_backward: 0 where y <= 0)
Tensor relu(const Tensor& x, Site site) {
  OpScope op("relu", site);
  Tensor y = unary_forward(op, UnaryOp::relu, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = relu_grad(g[0], n.saved_tensor(0));  // y > 0 iff x > 0
      }, {&x}, {&y}))
    n->save(y);
  return y;
}

// y = x > 0 ? x : slope x; dx = g (x > 0 ? 1 : slope)
Tensor leaky_relu(const Tensor& x, double slope, Site site) {
  OpScope op("leaky_relu", site);
  Tensor y = unary_forward(op, UnaryOp::leaky_relu, x, slope);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0);
        gi[0] = mul(g[0], where(gt(x, 0.0), ones_like(x), full_like(x, n.args<LeakyReluArgs>().slope)));
      }, {&x}, {&y});
  if (n) {
    n->save(x);
  }
  keep_args(op, n, LeakyReluArgs{.slope = slope});
  return y;
}

// y = 1 / (1 + e^-x); dx = g y (1 - y)
Tensor sigmoid(const Tensor& x, Site site) {
  OpScope op("sigmoid", site);
  Tensor y = unary_forward(op, UnaryOp::sigmoid, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor y = n.saved_tensor(0);
        if (grad_enabled()) {  // create_graph: recorded ops
          gi[0] = mul(g[0], mul(y, 1.0 - y));
          return;
        }
        Tensor gx = new_like(y);
        backend_of(gx).binary(BinaryOp::sigmoid_backward, gx, g[0], y);
        gi[0] = gx;
      }, {&x}, {&y}))
    n->save(y);
  return y;
}

// y = tanh x; dx = g (1 - y^2)
Tensor tanh(const Tensor& x, Site site) {
  OpScope op("tanh", site);
  Tensor y = unary_forward(op, UnaryOp::tanh, x);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor y = n.saved_tensor(0);
        if (grad_enabled()) {  // create_graph: recorded ops
          gi[0] = mul(g[0], 1.0 - square(y));
          return;
        }
        Tensor gx = new_like(y);
        backend_of(gx).binary(BinaryOp::tanh_backward, gx, g[0], y);
        gi[0] = gx;
      }, {&x}, {&y}))
    n->save(y);
  return y;
}

// y = x^p; dx = g p x^(p-1), and 0 for p = 0 (x^-1 would make 0 * inf = NaN at x = 0)
Tensor pow(const Tensor& x_in, double p, Site site) {
  OpScope op("pow", site);
  const Tensor x = autocast_f32(x_in);
  Tensor y = unary_forward(op, UnaryOp::pow_scalar, x, p);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        double p = n.args<PowArgs>().exponent;
        if (p == 0.0) {
          gi[0] = zeros_like(g[0]);
          return;
        }
        gi[0] = mul(g[0], mul(pow(n.saved_tensor(0), p - 1), p));
      }, {&x}, {&y});
  if (n) {
    n->save(x);
  }
  keep_args(op, n, PowArgs{.exponent = p});
  return y;
}

// y = min(max(x, low), high); dx = g where low <= x <= high
Tensor clamp(const Tensor& x, double low, double high, Site site) {
  OpScope op("clamp", site);
  if (low > high) fail("clamp", fmt::format("low {} is above high {}", low, high), op.site);
  Tensor y = unary_forward(op, UnaryOp::clamp, x, low, high);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0);
        Tensor inside = logical_and(ge(x, n.args<ClampArgs>().low), le(x, n.args<ClampArgs>().high));
        gi[0] = where(inside, g[0], zeros_like(g[0]));
      }, {&x}, {&y});
  if (n) {
    n->save(x);
  }
  keep_args(op, n, ClampArgs{.low = low, .high = high});
  return y;
}

// y = sign(x): not differentiable, no record
Tensor sign(const Tensor& x, Site site) {
  OpScope op("sign", site);
  check_defined(op, x, "the input");
  Tensor y = new_like(x);
  if (y.numel()) backend_of(x).unary(UnaryOp::sign, y, x);
  return y;
}

Tensor logical_not(const Tensor& x, Site site) {
  OpScope op("logical_not", site);
  return compare_scalar(op, UnaryOp::logical_not, x, 0);
}

// ---- binary with broadcasting; gradients summed back to each input's shape

// y = a + b; da = g, db = g
Tensor add(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("add", site);
  Tensor y = binary_forward(op, BinaryOp::add, a, b);
  record(op, [](Node& n, const Grads& g, Grads& gi) {
    if (n.needs_grad(0)) gi[0] = sum_to(g[0], n.input_shape(0));
    if (n.needs_grad(1)) gi[1] = sum_to(g[0], n.input_shape(1));
  }, {&a, &b}, {&y});
  return y;
}

// y = relu(a + b) in one pass (a residual block's sum and ReLU), broadcasting as add;
// with g' = g (y > 0): da = g', db = g' (summed to their shapes). Saves y only.
Tensor add_relu(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("add_relu", site);
  Tensor y = binary_forward(op, BinaryOp::add_relu, a, b);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor gy = relu_grad(g[0], n.saved_tensor(0));
        if (n.needs_grad(0)) gi[0] = sum_to(gy, n.input_shape(0));
        if (n.needs_grad(1)) gi[1] = sum_to(gy, n.input_shape(1));
      }, {&a, &b}, {&y}))
    n->save(y);
  return y;
}

// y = a - b; da = g, db = -g
Tensor sub(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("sub", site);
  Tensor y = binary_forward(op, BinaryOp::sub, a, b);
  record(op, [](Node& n, const Grads& g, Grads& gi) {
    if (n.needs_grad(0)) gi[0] = sum_to(g[0], n.input_shape(0));
    if (n.needs_grad(1)) gi[1] = sum_to(neg(g[0]), n.input_shape(1));
  }, {&a, &b}, {&y});
  return y;
}

// y = a + alpha b; da = g, db = alpha g (sub: alpha negated)
static Tensor add_scaled(const char* name, const Tensor& a, const Tensor& b, double alpha, Site site) {
  OpScope op(name, site);
  Tensor y;
  {
    NoGradGuard forward_only;  // one recorded op, whose rule is below
    Broadcast bc = broadcast(op, a, b);
    if (!is_floating(bc.a.dtype()) && alpha != std::trunc(alpha))
      fail(name, fmt::format("expected a whole-number alpha for integer operands {} and {}, got a fraction",
                             describe(a), describe(b)), op.site);
    Tensor scaled = new_tensor(bc.shape, bc.b.dtype(), bc.b.device());
    if (scaled.numel()) backend_of(scaled).unary(UnaryOp::mul_scalar, scaled, bc.b, alpha);
    y = binary_forward(op, BinaryOp::add, bc.a, scaled);
  }
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        if (n.needs_grad(0)) gi[0] = sum_to(g[0], n.input_shape(0));
        if (n.needs_grad(1)) gi[1] = sum_to(mul(g[0], n.args<AlphaArgs>().alpha), n.input_shape(1));
      }, {&a, &b}, {&y});
  keep_args(op, n, AlphaArgs{.alpha = alpha});
  return y;
}

Tensor add(const Tensor& a, const Tensor& b, double alpha, Site site) { return add_scaled("add", a, b, alpha, site); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha, Site site) { return add_scaled("sub", a, b, -alpha, site); }

// y = a b; da = g b, db = g a
Tensor mul(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("mul", site);
  Tensor y = binary_forward(op, BinaryOp::mul, a, b);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        if (n.needs_grad(0)) gi[0] = sum_to(mul(g[0], n.saved_tensor(1)), n.input_shape(0));
        if (n.needs_grad(1)) gi[1] = sum_to(mul(g[0], n.saved_tensor(0)), n.input_shape(1));
      }, {&a, &b}, {&y})) {
    n->save(n->needs_grad(1) ? a : Tensor());
    n->save(n->needs_grad(0) ? b : Tensor());
  }
  return y;
}

// y = a / b; da = g / b, db = -g a / b^2
Tensor div(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("div", site);
  Tensor y = binary_forward(op, BinaryOp::div, a, b, true);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor a = n.saved_tensor(0), b = n.saved_tensor(1);
        if (n.needs_grad(0)) gi[0] = sum_to(div(g[0], b), n.input_shape(0));
        if (n.needs_grad(1)) gi[1] = sum_to(neg(div(mul(g[0], a), mul(b, b))), n.input_shape(1));
      }, {&a, &b}, {&y})) {
    n->save(a);
    n->save(b);
  }
  return y;
}

namespace {
// Gradient weights of maximum (loser = lt) and minimum (loser = gt), PyTorch 1.13's rule:
// the larger (smaller) input takes g, ties split it, and the loser takes 0. With a NaN
// operand neither input is the loser, so both take the whole g (y is NaN either way).
Tensor extremum_weight(const Tensor& mine, const Tensor& other, const Tensor& g, bool maximum) {
  Tensor lose = maximum ? lt(mine, other) : gt(mine, other);
  Tensor w = add(logical_not(lose).to(g.dtype()), mul(eq(mine, other).to(g.dtype()), -0.5));
  return mul(g, w);
}

Tensor elementwise_extremum(const OpScope& op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward(op, kind, a, b);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor a = n.saved_tensor(0), b = n.saved_tensor(1);
        bool maximum = n.args<ExtremumArgs>().maximum;
        if (n.needs_grad(0)) gi[0] = sum_to(extremum_weight(a, b, g[0], maximum), n.input_shape(0));
        if (n.needs_grad(1)) gi[1] = sum_to(extremum_weight(b, a, g[0], maximum), n.input_shape(1));
      }, {&a, &b}, {&y});
  if (n) {
    n->save(a);
    n->save(b);
  }
  keep_args(op, n, ExtremumArgs{.maximum = kind == BinaryOp::maximum});
  return y;
}
}  // namespace

// y = max(a, b); the gradient goes to the larger input (split evenly on ties, whole to both on NaN)
Tensor maximum(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("maximum", site);
  return elementwise_extremum(op, BinaryOp::maximum, a, b);
}

// y = min(a, b); the gradient goes to the smaller input (split evenly on ties, whole to both on NaN)
Tensor minimum(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("minimum", site);
  return elementwise_extremum(op, BinaryOp::minimum, a, b);
}

// y = a^b; da = g b a^(b-1), db = g y ln a; as PyTorch, da = 0 where b = 0 and db = 0
// where a = 0 and b >= 0 (else 0 * inf = NaN there)
Tensor pow(const Tensor& a_in, const Tensor& b_in, Site site) {
  OpScope op("pow", site);
  const Tensor a = autocast_f32(a_in), b = autocast_f32(b_in);
  Tensor y = binary_forward(op, BinaryOp::pow, a, b, true);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor a = n.saved_tensor(0), b = n.saved_tensor(1), y = n.saved_tensor(2);
        if (n.needs_grad(0)) {
          Tensor ga = mul(g[0], mul(b, pow(a, sub(b, 1.0))));
          gi[0] = sum_to(where(eq(b, 0.0), zeros_like(ga), ga), n.input_shape(0));
        }
        if (n.needs_grad(1)) {
          Tensor gb = mul(g[0], mul(y, log(a)));
          gi[1] = sum_to(where(logical_and(eq(a, 0.0), ge(b, 0.0)), zeros_like(gb), gb), n.input_shape(1));
        }
      }, {&a, &b}, {&y})) {
    n->save(a);
    n->save(b);
    n->save(y);
  }
  return y;
}

// ---- scalar forms: y = x op s
Tensor add(const Tensor& a, double b, Site site) {
  OpScope op("add", site);
  Tensor y = unary_forward(op, UnaryOp::add_scalar, a, b);
  record(op, [](Node&, const Grads& g, Grads& gi) { gi[0] = g[0]; }, {&a}, {&y});
  return y;
}
Tensor sub(const Tensor& a, double b, Site site) {
  OpScope op("sub", site);
  return add(a, -b);
}
Tensor mul(const Tensor& a, double b, Site site) {
  OpScope op("mul", site);
  Tensor y = unary_forward(op, UnaryOp::mul_scalar, a, b);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { gi[0] = mul(g[0], n.args<ScaleArgs>().scale); }, {&a}, {&y});
  keep_args(op, n, ScaleArgs{.scale = b});
  return y;
}
// A true division, as PyTorch (x * (1 / s) differs from x / s in the last bit for about
// half of all x): the binary op with s as a 0-dim tensor of the result's dtype.
Tensor div(const Tensor& a, double b, Site site) {
  DType dt = a.defined() && is_floating(a.dtype()) ? a.dtype() : DType::f32;
  return div(a, full({}, b, {.dtype = dt, .device = a.defined() ? a.device() : Device{}}), site);
}

// y = s - x; dx = -g
static Tensor rsub(const Tensor& x, double s, Site site) {
  OpScope op("rsub", site);
  Tensor y = unary_forward(op, UnaryOp::rsub_scalar, x, s);
  record(op, [](Node&, const Grads& g, Grads& gi) { gi[0] = neg(g[0]); }, {&x}, {&y});
  return y;
}

// y = s / x; dx = -g s / x^2 = -g y / x
static Tensor rdiv(const Tensor& x, double s, Site site) {
  OpScope op("rdiv", site);
  Tensor y = unary_forward(op, UnaryOp::rdiv_scalar, x, s);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = neg(div(mul(g[0], n.saved_tensor(1)), n.saved_tensor(0)));
      }, {&x}, {&y})) {
    n->save(x);
    n->save(y);
  }
  return y;
}

// ---- comparisons and logic: no gradient
Tensor eq(const Tensor& a, const Tensor& b, Site site) { OpScope op("eq", site); return compare(op, BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b, Site site) { OpScope op("ne", site); return compare(op, BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b, Site site) { OpScope op("lt", site); return compare(op, BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b, Site site) { OpScope op("le", site); return compare(op, BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b, Site site) { OpScope op("gt", site); return compare(op, BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b, Site site) { OpScope op("ge", site); return compare(op, BinaryOp::ge, a, b); }
Tensor eq(const Tensor& a, double b, Site site) { OpScope op("eq", site); return compare_scalar(op, UnaryOp::eq_scalar, a, b); }
Tensor ne(const Tensor& a, double b, Site site) { OpScope op("ne", site); return compare_scalar(op, UnaryOp::ne_scalar, a, b); }
Tensor lt(const Tensor& a, double b, Site site) { OpScope op("lt", site); return compare_scalar(op, UnaryOp::lt_scalar, a, b); }
Tensor le(const Tensor& a, double b, Site site) { OpScope op("le", site); return compare_scalar(op, UnaryOp::le_scalar, a, b); }
Tensor gt(const Tensor& a, double b, Site site) { OpScope op("gt", site); return compare_scalar(op, UnaryOp::gt_scalar, a, b); }
Tensor ge(const Tensor& a, double b, Site site) { OpScope op("ge", site); return compare_scalar(op, UnaryOp::ge_scalar, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("logical_and", site);
  return compare(op, BinaryOp::logical_and, a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("logical_or", site);
  return compare(op, BinaryOp::logical_or, a, b);
}

// y = cond ? a : b; da = g where cond, db = g where !cond
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Site site) {
  OpScope op("where", site);
  check_defined(op, cond, "the condition");
  check_dtype(op, cond, DType::boolean, "the condition");
  check_same_device(op, cond, a);
  Broadcast bc = broadcast(op, a, b);
  Dims shape = broadcast_shapes("where", cond.shape(), bc.shape, op.site);
  Tensor c = expand_view(cond, shape), ea = expand_view(bc.a, shape), eb = expand_view(bc.b, shape);
  Tensor y = new_tensor(shape, ea.dtype(), ea.device());
  if (y.numel()) backend_of(y).where(y, c, ea, eb);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor c = n.saved_tensor(0), z = zeros_like(g[0]);
        if (n.needs_grad(1)) gi[1] = sum_to(where(c, g[0], z), n.input_shape(1));
        if (n.needs_grad(2)) gi[2] = sum_to(where(c, z, g[0]), n.input_shape(2));
      }, {&cond, &a, &b}, {&y}))
    n->save(cond);
  return y;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, Site site) {
  OpScope op("allclose", site);
  NoGradGuard guard;
  Broadcast bc = broadcast(op, a, b);
  Tensor da = cast(bc.a, DType::f64), db = cast(bc.b, DType::f64);
  std::vector<double> va = da.to_vector<double>(), vb = db.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) return false;
    if (va[i] == vb[i]) continue;
    if (std::abs(va[i] - vb[i]) > atol + rtol * std::abs(vb[i])) return false;
  }
  return true;
}

// ---- operators
Tensor operator+(const Tensor& a, TensorArg b) { return add(a, b.t, b.site); }
Tensor operator-(const Tensor& a, TensorArg b) { return sub(a, b.t, b.site); }
Tensor operator*(const Tensor& a, TensorArg b) { return mul(a, b.t, b.site); }
Tensor operator/(const Tensor& a, TensorArg b) { return div(a, b.t, b.site); }
Tensor operator+(const Tensor& a, ScalarArg b) { return add(a, b.v, b.site); }
Tensor operator-(const Tensor& a, ScalarArg b) { return add(a, -b.v, b.site); }
Tensor operator*(const Tensor& a, ScalarArg b) { return mul(a, b.v, b.site); }
Tensor operator/(const Tensor& a, ScalarArg b) { return div(a, b.v, b.site); }
Tensor operator+(double a, TensorArg b) { return add(b.t, a, b.site); }
Tensor operator-(double a, TensorArg b) { return rsub(b.t, a, b.site); }
Tensor operator*(double a, TensorArg b) { return mul(b.t, a, b.site); }
Tensor operator/(double a, TensorArg b) { return rdiv(b.t, a, b.site); }
Tensor operator-(TensorArg x) { return neg(x.t, x.site); }
Tensor operator==(const Tensor& a, TensorArg b) { return eq(a, b.t, b.site); }
Tensor operator!=(const Tensor& a, TensorArg b) { return ne(a, b.t, b.site); }
Tensor operator<(const Tensor& a, TensorArg b) { return lt(a, b.t, b.site); }
Tensor operator<=(const Tensor& a, TensorArg b) { return le(a, b.t, b.site); }
Tensor operator>(const Tensor& a, TensorArg b) { return gt(a, b.t, b.site); }
Tensor operator>=(const Tensor& a, TensorArg b) { return ge(a, b.t, b.site); }
Tensor operator==(const Tensor& a, ScalarArg b) { return eq(a, b.v, b.site); }
Tensor operator!=(const Tensor& a, ScalarArg b) { return ne(a, b.v, b.site); }
Tensor operator<(const Tensor& a, ScalarArg b) { return lt(a, b.v, b.site); }
Tensor operator<=(const Tensor& a, ScalarArg b) { return le(a, b.v, b.site); }
Tensor operator>(const Tensor& a, ScalarArg b) { return gt(a, b.v, b.site); }
Tensor operator>=(const Tensor& a, ScalarArg b) { return ge(a, b.v, b.site); }

}  // namespace reel
