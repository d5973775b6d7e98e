// The activations' gradients, fused: out = g f'(x; a, b) with x the op's input, the
// formulas of cpu/activation.cpp (PyTorch 1.13's, hardswish's ends included: 0 below -3,
// x/3 + 1/2 on [-3, 3], 1 above 3).
//
// Layout: any strides (elementwise.cuh). Launch shape: 256 threads, grid-stride,
// 16-byte vector loads when dense. Floor: memory bandwidth (read g and x, write out).
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

template <UnaryOp OP, typename T>
struct GradFn {
  T a, b;
  __device__ __forceinline__ T operator()(T g, T x) const {
    if constexpr (OP == UnaryOp::gelu) {  // Phi(x) + x phi(x)
      return g * (T(0.5) * erfc(-x * T(0.70710678118654752440)) +
                  x * T(0.39894228040143267794) * exp(T(-0.5) * x * x));
    } else if constexpr (OP == UnaryOp::gelu_tanh) {  // (1 + t) / 2 + x (1 - t^2) u' / 2
      const T k = T(0.7978845608028654), c = T(0.044715);
      T t = tanh(k * (x + c * x * x * x));
      return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
    } else if constexpr (OP == UnaryOp::erf) {
      return g * T(1.1283791670955126) * exp(-x * x);
    } else if constexpr (OP == UnaryOp::silu) {
      T s = T(1) / (T(1) + exp(-x));
      return g * s * (T(1) + x * (T(1) - s));
    } else if constexpr (OP == UnaryOp::mish) {
      T t = tanh(log1p(exp(x)));
      return g * (t + x * (T(1) / (T(1) + exp(-x))) * (T(1) - t * t));
    } else if constexpr (OP == UnaryOp::hardswish) {
      return x < T(-3) ? T(0) : (x <= T(3) ? g * (x / T(3) + T(0.5)) : g);
    } else if constexpr (OP == UnaryOp::softplus) {
      T z = x * a;
      return z > b ? g : g / (T(1) + exp(-z));
    } else {  // elu
      return x <= T(0) ? g * a * exp(x) : g;  // as PyTorch: NaN passes g
    }
  }
};

template <UnaryOp OP, typename T>
void run(Context& ctx, const Tensor& out, const Tensor& g, const Tensor& x, double a, double b) {
  launch_elementwise<T, T, T>(ctx, "unary_backward", GradFn<OP, T>{T(a), T(b)}, out, {&g, &x});
}

}  // namespace

void CudaBackend::unary_backward(UnaryOp op, const Tensor& out, const Tensor& g, const Tensor& x, double a,
                                 double b) {
  expect_here("unary_backward", {&out, &g, &x});
  Context& c = ctx();
  dispatch_float(x.dtype(), "unary_backward", [&]<typename T>() {
    switch (op) {
      case UnaryOp::gelu: return run<UnaryOp::gelu, T>(c, out, g, x, a, b);
      case UnaryOp::gelu_tanh: return run<UnaryOp::gelu_tanh, T>(c, out, g, x, a, b);
      case UnaryOp::erf: return run<UnaryOp::erf, T>(c, out, g, x, a, b);
      case UnaryOp::silu: return run<UnaryOp::silu, T>(c, out, g, x, a, b);
      case UnaryOp::mish: return run<UnaryOp::mish, T>(c, out, g, x, a, b);
      case UnaryOp::hardswish: return run<UnaryOp::hardswish, T>(c, out, g, x, a, b);
      case UnaryOp::softplus: return run<UnaryOp::softplus, T>(c, out, g, x, a, b);
      case UnaryOp::elu: return run<UnaryOp::elu, T>(c, out, g, x, a, b);
      default: throw Error("unary_backward: op " + std::to_string(int(op)) + " is not an activation");
    }
  });
}

}  // namespace reel::cuda
