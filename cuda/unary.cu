// Unary elementwise ops: out = f(x, a, b), the CPU's formulas (cpu/elementwise.cpp)
// in the same element type, one functor per op so that each kernel is specialised.
//
// Layout: any strides (elementwise.cuh). Launch shape: 256 threads, grid-stride,
// 16-byte vector loads when dense. Floor: memory bandwidth (read x, write out once);
// the transcendental ones (gelu, erf, tanh) still sit under it on an H100 in f32.
// Comparisons write bool; every other op writes x's dtype.
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

// The activations (cuda/activation.cu has their gradients): PyTorch 1.13's formulas,
// as cpu/activation.cpp computes them in f64.
template <typename T>
__device__ __forceinline__ T gelu_fwd(T x) {  // x Phi(x)
  return T(0.5) * x * erfc(-x * T(0.70710678118654752440));
}
template <typename T>
__device__ __forceinline__ T gelu_tanh_fwd(T x) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  return T(0.5) * x * (T(1) + tanh(k * (x + c * x * x * x)));
}

template <UnaryOp OP, typename T>
struct UnaryFn {
  T a, b;
  double da;
  __device__ __forceinline__ auto operator()(T v) const {
    if constexpr (OP == UnaryOp::neg) return T(-v);
    else if constexpr (OP == UnaryOp::abs) return v < T(0) ? T(-v) : v;
    else if constexpr (OP == UnaryOp::sign) return T((T(0) < v) - (v < T(0)));
    else if constexpr (OP == UnaryOp::square) return T(v * v);
    else if constexpr (OP == UnaryOp::relu) return v > T(0) || v != v ? v : T(0);  // NaN stays, as on the CPU
    else if constexpr (OP == UnaryOp::add_scalar) return T(v + a);
    else if constexpr (OP == UnaryOp::mul_scalar) return T(v * a);
    else if constexpr (OP == UnaryOp::rsub_scalar) return T(a - v);
    else if constexpr (OP == UnaryOp::clamp) return v < a ? a : (v > b ? b : v);
    else if constexpr (OP == UnaryOp::eq_scalar) return double(v) == da;
    else if constexpr (OP == UnaryOp::ne_scalar) return double(v) != da;
    else if constexpr (OP == UnaryOp::lt_scalar) return double(v) < da;
    else if constexpr (OP == UnaryOp::le_scalar) return double(v) <= da;
    else if constexpr (OP == UnaryOp::gt_scalar) return double(v) > da;
    else if constexpr (OP == UnaryOp::ge_scalar) return double(v) >= da;
    else if constexpr (OP == UnaryOp::logical_not) return !(v != T(0));
    else if constexpr (OP == UnaryOp::exp) return T(exp(v));
    else if constexpr (OP == UnaryOp::log) return T(log(v));
    else if constexpr (OP == UnaryOp::sqrt) return T(sqrt(v));
    else if constexpr (OP == UnaryOp::rsqrt) return T(T(1) / sqrt(v));
    else if constexpr (OP == UnaryOp::reciprocal) return T(T(1) / v);
    else if constexpr (OP == UnaryOp::sin) return T(sin(v));
    else if constexpr (OP == UnaryOp::cos) return T(cos(v));
    else if constexpr (OP == UnaryOp::log1p) return T(log1p(v));
    else if constexpr (OP == UnaryOp::gelu) return gelu_fwd(v);
    else if constexpr (OP == UnaryOp::sigmoid) return T(T(1) / (T(1) + exp(-v)));
    else if constexpr (OP == UnaryOp::tanh) return T(tanh(v));
    else if constexpr (OP == UnaryOp::rdiv_scalar) return T(a / v);
    else if constexpr (OP == UnaryOp::pow_scalar) return T(pow(v, a));
    else if constexpr (OP == UnaryOp::rpow_scalar) return T(pow(a, v));
    else if constexpr (OP == UnaryOp::leaky_relu) return v > T(0) ? v : T(a * v);
    else if constexpr (OP == UnaryOp::erf) return T(erf(v));
    else if constexpr (OP == UnaryOp::gelu_tanh) return gelu_tanh_fwd(v);
    else if constexpr (OP == UnaryOp::silu) return T(v / (T(1) + exp(-v)));
    else if constexpr (OP == UnaryOp::mish) return T(v * tanh(log1p(exp(v))));
    else if constexpr (OP == UnaryOp::hardswish) return T(v * min(max(v + T(3), T(0)), T(6)) / T(6));
    else if constexpr (OP == UnaryOp::softplus) return v * a > b ? v : T(log1p(exp(v * a)) / a);
    else if constexpr (OP == UnaryOp::elu) return v > T(0) ? v : T(a * expm1(v));
    else return v;
  }
};

constexpr bool is_compare(UnaryOp op) {
  return op == UnaryOp::eq_scalar || op == UnaryOp::ne_scalar || op == UnaryOp::lt_scalar ||
         op == UnaryOp::le_scalar || op == UnaryOp::gt_scalar || op == UnaryOp::ge_scalar ||
         op == UnaryOp::logical_not;
}
// ops defined for every dtype; the others only for f32 and f64 (as on the CPU)
constexpr bool any_dtype(UnaryOp op) {
  return is_compare(op) || op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sign ||
         op == UnaryOp::square || op == UnaryOp::relu || op == UnaryOp::add_scalar || op == UnaryOp::mul_scalar ||
         op == UnaryOp::rsub_scalar || op == UnaryOp::clamp;
}

template <UnaryOp OP, typename T>
void run(Context& ctx, const Tensor& out, const Tensor& x, double a, double b) {
  UnaryFn<OP, T> f{T(a), T(b), a};
  if constexpr (is_compare(OP)) launch_elementwise<bool, T>(ctx, "unary", f, out, {&x});
  else launch_elementwise<T, T>(ctx, "unary", f, out, {&x});
}

// The x*x form of pow(x, 2) that the CPU takes, so both agree exactly.
template <typename T>
struct SquareFn {
  __device__ __forceinline__ T operator()(T v) const { return v * v; }
};

template <typename T>
void unary_typed(Context& ctx, UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  constexpr bool fp = std::is_floating_point_v<T>;
#define REEL_UNARY(name)                                                   \
  case UnaryOp::name:                                                      \
    if constexpr (fp || any_dtype(UnaryOp::name)) {                        \
      return run<UnaryOp::name, T>(ctx, out, x, a, b);                     \
    }                                                                      \
    break;
  switch (op) {
    REEL_UNARY(neg) REEL_UNARY(abs) REEL_UNARY(sign) REEL_UNARY(square) REEL_UNARY(relu)
    REEL_UNARY(add_scalar) REEL_UNARY(mul_scalar) REEL_UNARY(rsub_scalar) REEL_UNARY(clamp)
    REEL_UNARY(eq_scalar) REEL_UNARY(ne_scalar) REEL_UNARY(lt_scalar) REEL_UNARY(le_scalar)
    REEL_UNARY(gt_scalar) REEL_UNARY(ge_scalar) REEL_UNARY(logical_not)
    REEL_UNARY(exp) REEL_UNARY(log) REEL_UNARY(sqrt) REEL_UNARY(rsqrt) REEL_UNARY(reciprocal)
    REEL_UNARY(sin) REEL_UNARY(cos) REEL_UNARY(log1p) REEL_UNARY(gelu) REEL_UNARY(sigmoid)
    REEL_UNARY(tanh) REEL_UNARY(rdiv_scalar) REEL_UNARY(rpow_scalar) REEL_UNARY(leaky_relu)
    REEL_UNARY(erf) REEL_UNARY(gelu_tanh) REEL_UNARY(silu) REEL_UNARY(mish) REEL_UNARY(hardswish)
    REEL_UNARY(softplus) REEL_UNARY(elu)
    case UnaryOp::pow_scalar:
      if constexpr (fp) {
        if (a == 2.0) return launch_elementwise<T, T>(ctx, "unary", SquareFn<T>{}, out, {&x});
        return run<UnaryOp::pow_scalar, T>(ctx, out, x, a, b);
      }
      break;
  }
#undef REEL_UNARY
  throw Error("unary op " + std::to_string(int(op)) + ": not defined for dtype " + dtype_name(x.dtype()));
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  expect_here("unary", {&out, &x});
  Context& c = ctx();
  dispatch(x.dtype(), "unary", [&]<typename T>() { unary_typed<T>(c, op, out, x, a, b); });
}

}  // namespace reel::cuda
