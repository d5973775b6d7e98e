// Unary elementwise ops: out = f(x, a, b), the CPU's formulas (cpu/elementwise.cpp)
// in the same element type, one functor per op (elementwise_formulas.cuh) so that each
// kernel is specialised.
//
// Layout: any strides (elementwise.cuh). Launch shape: 256 threads, grid-stride,
// 16-byte vector loads when dense. Floor: memory bandwidth (read x, write out once);
// the transcendental ones (gelu, erf, tanh) still sit under it on an H100 in f32.
// Comparisons write bool; every other op writes x's dtype.
#include "elementwise_formulas.cuh"

namespace reel::cuda {
namespace {

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
