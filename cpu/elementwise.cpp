// Elementwise kernels: one strided loop per op, vectorised when contiguous.
// Memory-bound: each reads its inputs and writes its output once.
#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "cpu_backend.h"
#include "loops.h"

namespace reel::cpu {
namespace {

template <typename T>
void unary_typed(UnaryOp op, const Tensor& out, const Tensor& x, double da, double db) {
  const T a = T(da), b = T(db);
  constexpr bool fp = std::is_floating_point_v<T>;
  auto cmp = [&](auto f) { map1<bool, T>(out, x, f); };
  switch (op) {
    case UnaryOp::neg: return map1<T, T>(out, x, [](T v) { return T(-v); });
    case UnaryOp::abs: return map1<T, T>(out, x, [](T v) { return v < T(0) ? T(-v) : v; });
    case UnaryOp::sign: return map1<T, T>(out, x, [](T v) { return T((T(0) < v) - (v < T(0))); });
    case UnaryOp::square: return map1<T, T>(out, x, [](T v) { return T(v * v); });
    case UnaryOp::relu: return map1<T, T>(out, x, [](T v) { return v > T(0) || v != v ? v : T(0); });  // NaN stays
    case UnaryOp::add_scalar: return map1<T, T>(out, x, [a](T v) { return T(v + a); });
    case UnaryOp::mul_scalar: return map1<T, T>(out, x, [a](T v) { return T(v * a); });
    case UnaryOp::rsub_scalar: return map1<T, T>(out, x, [a](T v) { return T(a - v); });
    case UnaryOp::clamp: return map1<T, T>(out, x, [a, b](T v) { return v < a ? a : (v > b ? b : v); });
    case UnaryOp::eq_scalar: return cmp([da](T v) { return double(v) == da; });
    case UnaryOp::ne_scalar: return cmp([da](T v) { return double(v) != da; });
    case UnaryOp::lt_scalar: return cmp([da](T v) { return double(v) < da; });
    case UnaryOp::le_scalar: return cmp([da](T v) { return double(v) <= da; });
    case UnaryOp::gt_scalar: return cmp([da](T v) { return double(v) > da; });
    case UnaryOp::ge_scalar: return cmp([da](T v) { return double(v) >= da; });
    case UnaryOp::logical_not: return cmp([](T v) { return !(v != T(0)); });
    default: break;
  }
  if constexpr (fp) {
    switch (op) {
      case UnaryOp::exp: return map1<T, T>(out, x, [](T v) { return std::exp(v); });
      case UnaryOp::log: return map1<T, T>(out, x, [](T v) { return std::log(v); });
      case UnaryOp::sqrt: return map1<T, T>(out, x, [](T v) { return std::sqrt(v); });
      case UnaryOp::rsqrt: return map1<T, T>(out, x, [](T v) { return T(1) / std::sqrt(v); });
      case UnaryOp::reciprocal: return map1<T, T>(out, x, [](T v) { return T(1) / v; });
      case UnaryOp::sin: return map1<T, T>(out, x, [](T v) { return std::sin(v); });
      case UnaryOp::cos: return map1<T, T>(out, x, [](T v) { return std::cos(v); });
      case UnaryOp::log1p: return map1<T, T>(out, x, [](T v) { return std::log1p(v); });
      case UnaryOp::sigmoid: return map1<T, T>(out, x, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
      case UnaryOp::tanh: return map1<T, T>(out, x, [](T v) { return std::tanh(v); });
      case UnaryOp::rdiv_scalar: return map1<T, T>(out, x, [a](T v) { return a / v; });
      case UnaryOp::pow_scalar:
        if (da == 2.0) return map1<T, T>(out, x, [](T v) { return v * v; });
        return map1<T, T>(out, x, [a](T v) { return std::pow(v, a); });
      case UnaryOp::rpow_scalar: return map1<T, T>(out, x, [a](T v) { return std::pow(a, v); });
      case UnaryOp::leaky_relu: return map1<T, T>(out, x, [a](T v) { return v > T(0) ? v : a * v; });
      default: break;
    }
  }
  throw Error(fmt::format("unary op {}: not defined for dtype {}", int(op), dtype_name(x.dtype())));
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  constexpr bool fp = std::is_floating_point_v<T>;
  auto cmp = [&](auto f) { map2<bool, T>(out, a, b, f); };
  switch (op) {
    case BinaryOp::add: return map2<T, T>(out, a, b, [](T x, T y) { return T(x + y); });
    case BinaryOp::sub: return map2<T, T>(out, a, b, [](T x, T y) { return T(x - y); });
    case BinaryOp::mul: return map2<T, T>(out, a, b, [](T x, T y) { return T(x * y); });
    case BinaryOp::add_relu:
      return map2<T, T>(out, a, b, [](T x, T y) {
        T s = T(x + y);
        return s > T(0) || s != s ? s : T(0);  // NaN stays, as relu
      });
    case BinaryOp::maximum:
      return map2<T, T>(out, a, b, [](T x, T y) { return (x != x || x > y) ? x : y; });  // NaN propagates
    case BinaryOp::minimum:
      return map2<T, T>(out, a, b, [](T x, T y) { return (x != x || x < y) ? x : y; });
    case BinaryOp::eq: return cmp([](T x, T y) { return x == y; });
    case BinaryOp::ne: return cmp([](T x, T y) { return x != y; });
    case BinaryOp::lt: return cmp([](T x, T y) { return x < y; });
    case BinaryOp::le: return cmp([](T x, T y) { return x <= y; });
    case BinaryOp::gt: return cmp([](T x, T y) { return x > y; });
    case BinaryOp::ge: return cmp([](T x, T y) { return x >= y; });
    case BinaryOp::logical_and: return cmp([](T x, T y) { return (x != T(0)) && (y != T(0)); });
    case BinaryOp::logical_or: return cmp([](T x, T y) { return (x != T(0)) || (y != T(0)); });
    default: break;
  }
  if constexpr (fp) {
    switch (op) {
      case BinaryOp::div: return map2<T, T>(out, a, b, [](T x, T y) { return x / y; });
      case BinaryOp::pow: return map2<T, T>(out, a, b, [](T x, T y) { return std::pow(x, y); });
      case BinaryOp::relu_backward: return map2<T, T>(out, a, b, [](T g, T x) { return x <= T(0) ? T(0) : g; });  // NaN passes g
      case BinaryOp::sigmoid_backward: return map2<T, T>(out, a, b, [](T g, T y) { return g * y * (T(1) - y); });
      case BinaryOp::tanh_backward: return map2<T, T>(out, a, b, [](T g, T y) { return g * (T(1) - y * y); });
      default: break;
    }
  }
  throw Error(fmt::format("binary op {}: not defined for dtype {}", int(op), dtype_name(a.dtype())));
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  if (activation_unary(op, out, x, a, b)) return;  // cpu/activation.cpp
  dispatch(x.dtype(), "unary", [&]<typename T>() { unary_typed<T>(op, out, x, a, b); });
}

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch(a.dtype(), "binary", [&]<typename T>() { binary_typed<T>(op, out, a, b); });
}

void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch(out.dtype(), "where", [&]<typename T>() {
    for_each_row<T, const bool, const T, const T>(out.shape(), {&out, &cond, &a, &b}, [](auto p, auto st, int64_t n) {
      T* o = std::get<0>(p);
      const bool* c = std::get<1>(p);
      const T* x = std::get<2>(p);
      const T* y = std::get<3>(p);
      // both sides read, then a select: `c ? x[i] : y[i]` is a masked load GCC leaves scalar
      for (int64_t i = 0; i < n; ++i) {
        const T xv = x[i * st[2]], yv = y[i * st[3]];
        o[i * st[0]] = c[i * st[1]] ? xv : yv;
      }
    });
  });
}

}  // namespace reel::cpu
