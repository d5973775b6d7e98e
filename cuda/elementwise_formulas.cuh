// The formulas of the unary and binary elementwise ops, one functor per op: the CPU's
// (cpu/elementwise.cpp) in the element type T. unary.cu and binary.cu run them in every
// dtype; half_elementwise.cu runs the f32 ones between a widening and one rounding, so that
// its f16/bf16 results are those of the staged path (f32 twins through the same functors)
// bit for bit: one definition, not a copy that could drift.
#pragma once
#include "elementwise.cuh"

namespace reel::cuda {

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

// The x*x form of pow(x, 2) that the CPU takes, so both agree exactly.
template <typename T>
struct SquareFn {
  __device__ __forceinline__ T operator()(T v) const { return v * v; }
};

template <BinaryOp OP, typename T>
struct BinaryFn {
  __device__ __forceinline__ auto operator()(T x, T y) const {
    if constexpr (OP == BinaryOp::add) return T(x + y);
    else if constexpr (OP == BinaryOp::sub) return T(x - y);
    else if constexpr (OP == BinaryOp::mul) return T(x * y);
    else if constexpr (OP == BinaryOp::add_relu) return (x + y > T(0) || x + y != x + y) ? T(x + y) : T(0);  // NaN stays
    else if constexpr (OP == BinaryOp::maximum) return (x != x || x > y) ? x : y;  // NaN propagates
    else if constexpr (OP == BinaryOp::minimum) return (x != x || x < y) ? x : y;
    else if constexpr (OP == BinaryOp::eq) return x == y;
    else if constexpr (OP == BinaryOp::ne) return x != y;
    else if constexpr (OP == BinaryOp::lt) return x < y;
    else if constexpr (OP == BinaryOp::le) return x <= y;
    else if constexpr (OP == BinaryOp::gt) return x > y;
    else if constexpr (OP == BinaryOp::ge) return x >= y;
    else if constexpr (OP == BinaryOp::logical_and) return (x != T(0)) && (y != T(0));
    else if constexpr (OP == BinaryOp::logical_or) return (x != T(0)) || (y != T(0));
    else if constexpr (OP == BinaryOp::div) return T(x / y);
    else if constexpr (OP == BinaryOp::pow) return T(pow(x, y));
    else if constexpr (OP == BinaryOp::relu_backward) return y <= T(0) ? T(0) : x;  // NaN passes g
    else if constexpr (OP == BinaryOp::sigmoid_backward) return T(x * y * (T(1) - y));
    else return T(x * (T(1) - y * y));  // tanh_backward
  }
};

}  // namespace reel::cuda
