// The activations (gelu exact and tanh, erf, silu, mish, hardswish, softplus, elu) and
// the f32 transcendentals that have vector kernels (exp, log, tanh, sigmoid), forward
// and backward. Contiguous f32 runs the kernels of cpu/vmath_kernels.cpp (AVX2 or
// AVX-512), split over the OpenMP pool; strided f32 calls the same scalar functions
// element by element; f64 uses libm's formulas (gradient checks want its accuracy).
// Memory-bound where the math is cheap enough: read x (and g), write out, once.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cpu_backend.h"
#include "loops.h"
#include "vmath.h"
#include "vmath_kernels.h"

namespace reel::cpu {
namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;

// f(x; a, b) element by element: the f32 functions of vmath.h (what the vector kernels
// compute) for float, libm for double. The formulas are PyTorch 1.13's.
template <typename T>
T act(UnaryOp op, T x, T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    switch (op) {
      case UnaryOp::exp: return exp_any_f32(x);
      case UnaryOp::log: return log_any_f32(x);
      case UnaryOp::tanh: return tanh_f32(x);
      case UnaryOp::sigmoid: return sigmoid_f32(x);
      case UnaryOp::gelu: return gelu_f32(x);
      case UnaryOp::gelu_tanh: return gelu_tanh_f32(x);
      case UnaryOp::erf: return erf_f32(x);
      case UnaryOp::softplus: return softplus_f32(x, a, b);
      case UnaryOp::silu: return silu_f32(x);
      default: break;
    }
  } else {
    switch (op) {
      case UnaryOp::exp: return std::exp(x);
      case UnaryOp::log: return std::log(x);
      case UnaryOp::tanh: return std::tanh(x);
      case UnaryOp::sigmoid: return T(1) / (T(1) + std::exp(-x));
      case UnaryOp::gelu: return T(0.5) * x * std::erfc(-x * T(kSqrt1_2));
      case UnaryOp::gelu_tanh:  // x (1 + tanh u) / 2 as x sigmoid(2u): no cancellation far left
        return x / (T(1) + std::exp(-T(2 * 0.7978845608028654) * (x + T(0.044715) * x * x * x)));
      case UnaryOp::erf: return std::erf(x);
      case UnaryOp::softplus: return x * a > b ? x : std::log1p(std::exp(x * a)) / a;
      case UnaryOp::silu: return x / (T(1) + std::exp(-x));
      default: break;
    }
  }
  switch (op) {  // scalar in both precisions: not among the vector kernels
    case UnaryOp::mish: return x * std::tanh(std::log1p(std::exp(x)));
    case UnaryOp::hardswish: return x * std::min(std::max(x + T(3), T(0)), T(6)) / T(6);
    case UnaryOp::elu: return x > T(0) ? x : a * std::expm1(x);
    default: return x;
  }
}

// f'(x; a, b)
template <typename T>
T act_grad(UnaryOp op, T x, T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    switch (op) {
      case UnaryOp::gelu: return gelu_grad_f32(x);
      case UnaryOp::gelu_tanh: return gelu_tanh_grad_f32(x);
      case UnaryOp::erf: return 1.1283791670955126f * exp_neg_square_f32(x, 1.0f);
      case UnaryOp::softplus: return softplus_grad_f32(x, a, b);
      case UnaryOp::silu: return silu_grad_f32(x);
      default: break;
    }
  } else {
    switch (op) {
      case UnaryOp::gelu: return T(0.5) * std::erfc(-x * T(kSqrt1_2)) + x * T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
      case UnaryOp::gelu_tanh: {  // s + 2 x s (1 - s) u', s = sigmoid(2u) = (1 + tanh u) / 2
        const T k = T(0.7978845608028654), c = T(0.044715);
        T u2 = T(2) * k * (x + c * x * x * x);
        T s = T(1) / (T(1) + std::exp(-u2)), rest = T(1) / (T(1) + std::exp(u2));
        return s + T(2) * x * s * rest * k * (T(1) + T(3) * c * x * x);
      }
      case UnaryOp::erf: return T(1.1283791670955126) * std::exp(-x * x);
      case UnaryOp::softplus: {
        T z = x * a;
        return z > b ? T(1) : T(1) / (T(1) + std::exp(-z));
      }
      case UnaryOp::silu: {
        T s = T(1) / (T(1) + std::exp(-x));
        return s * (T(1) + x * (T(1) - s));
      }
      default: break;
    }
  }
  switch (op) {
    case UnaryOp::mish: {  // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x)
      T t = std::tanh(std::log1p(std::exp(x)));
      return t + x * (T(1) / (T(1) + std::exp(-x))) * (T(1) - t * t);
    }
    // PyTorch's ends as its scalar and CUDA kernels have them: 1.5 at 3 (its vectorised
    // CPU body has 1 there, so PyTorch's own answer depends on where the element lands)
    case UnaryOp::hardswish: return x < T(-3) ? T(0) : (x <= T(3) ? x / T(3) + T(0.5) : T(1));
    case UnaryOp::elu: return x <= T(0) ? a * std::exp(x) : T(1);  // PyTorch's test: NaN passes g
    default: return T(0);
  }
}

bool owns(UnaryOp op) {
  switch (op) {
    case UnaryOp::gelu: case UnaryOp::gelu_tanh: case UnaryOp::erf: case UnaryOp::silu: case UnaryOp::mish:
    case UnaryOp::hardswish: case UnaryOp::softplus: case UnaryOp::elu:
      return true;
    default: return false;
  }
}

}  // namespace

bool activation_unary(UnaryOp op, const Tensor& out, const Tensor& x, double da, double db) {
  bool f32 = x.dtype() == DType::f32;
  if (!owns(op) && !(f32 && has_vector_kernel(op, false))) return false;
  if (f32 && has_vector_kernel(op, false)) {
    const float a = float(da), b = float(db);
    const bool stream = streaming_output(out, x);
    for_each_row<float, const float>(out.shape(), {&out, &x}, [&](auto p, auto st, int64_t n) {
      float* o = std::get<0>(p);
      const float* v = std::get<1>(p);
      if (st[0] == 1 && st[1] == 1) return vector_unary(op, o, v, n, a, b, stream);
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = act<float>(op, v[i * st[1]], a, b);
    });
    return true;
  }
  dispatch_float(x.dtype(), "unary", [&]<typename T>() {
    map1<T, T>(out, x, [op, a = T(da), b = T(db)](T v) { return act<T>(op, v, a, b); });
  });
  return true;
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& out, const Tensor& g, const Tensor& x, double da,
                                double db) {
  if (!owns(op)) throw Error(fmt::format("unary_backward: op {} is not an activation", int(op)));
  if (x.dtype() == DType::f32 && has_vector_kernel(op, true)) {
    const float a = float(da), b = float(db);
    const bool stream = streaming_output(out, g, x);
    for_each_row<float, const float, const float>(out.shape(), {&out, &g, &x}, [&](auto p, auto st, int64_t n) {
      float* o = std::get<0>(p);
      const float* gv = std::get<1>(p);
      const float* v = std::get<2>(p);
      if (st[0] == 1 && st[1] == 1 && st[2] == 1) return vector_unary_backward(op, o, gv, v, n, a, b, stream);
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = gv[i * st[1]] * act_grad<float>(op, v[i * st[2]], a, b);
    });
    return;
  }
  dispatch_float(x.dtype(), "unary_backward", [&]<typename T>() {
    map2<T, T>(out, g, x, [op, a = T(da), b = T(db)](T gv, T v) { return gv * act_grad<T>(op, v, a, b); });
  });
}

}  // namespace reel::cpu
