// Binary elementwise ops: out = f(a, b) with a and b already broadcast to out's shape
// (stride 0 on broadcast dims) and of one dtype; the CPU's formulas (cpu/elementwise.cpp;
// the functors in elementwise_formulas.cuh), including NaN propagation through
// maximum/minimum and the fused activation gradients.
//
// Layout: any strides (elementwise.cuh): a bias broadcast over rows is a 2-D strided
// operand with a 0 stride, read through the offset calculator. Launch shape: 256 threads,
// grid-stride, 16-byte vector loads when every operand is dense. Floor: memory bandwidth.
#include "elementwise_formulas.cuh"

namespace reel::cuda {
namespace {

constexpr bool is_compare(BinaryOp op) {
  return op == BinaryOp::eq || op == BinaryOp::ne || op == BinaryOp::lt || op == BinaryOp::le ||
         op == BinaryOp::gt || op == BinaryOp::ge || op == BinaryOp::logical_and || op == BinaryOp::logical_or;
}
constexpr bool any_dtype(BinaryOp op) {
  return is_compare(op) || op == BinaryOp::add || op == BinaryOp::sub || op == BinaryOp::mul || op == BinaryOp::add_relu ||
         op == BinaryOp::maximum || op == BinaryOp::minimum;
}

template <BinaryOp OP, typename T>
void run(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b) {
  if constexpr (is_compare(OP)) launch_elementwise<bool, T, T>(ctx, "binary", BinaryFn<OP, T>{}, out, {&a, &b});
  else launch_elementwise<T, T, T>(ctx, "binary", BinaryFn<OP, T>{}, out, {&a, &b});
}

template <typename T>
void binary_typed(Context& ctx, BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  constexpr bool fp = std::is_floating_point_v<T>;
#define REEL_BINARY(name)                                   \
  case BinaryOp::name:                                      \
    if constexpr (fp || any_dtype(BinaryOp::name)) {        \
      return run<BinaryOp::name, T>(ctx, out, a, b);        \
    }                                                       \
    break;
  switch (op) {
    REEL_BINARY(add) REEL_BINARY(sub) REEL_BINARY(mul) REEL_BINARY(maximum) REEL_BINARY(minimum)
    REEL_BINARY(eq) REEL_BINARY(ne) REEL_BINARY(lt) REEL_BINARY(le) REEL_BINARY(gt) REEL_BINARY(ge)
    REEL_BINARY(logical_and) REEL_BINARY(logical_or)
    REEL_BINARY(div) REEL_BINARY(pow) REEL_BINARY(relu_backward)
    REEL_BINARY(sigmoid_backward) REEL_BINARY(tanh_backward) REEL_BINARY(add_relu)
  }
#undef REEL_BINARY
  throw Error("binary op " + std::to_string(int(op)) + ": not defined for dtype " + dtype_name(a.dtype()));
}

}  // namespace

void CudaBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  expect_here("binary", {&out, &a, &b});
  Context& c = ctx();
  dispatch(a.dtype(), "binary", [&]<typename T>() { binary_typed<T>(c, op, out, a, b); });
}

}  // namespace reel::cuda
