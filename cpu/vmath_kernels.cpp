// The activations' vector kernels. The baseline path: each loop calls one of
// cpu/vmath.h's f32 functions per element under `omp simd`, so the compiler emits it as
// straight-line code at the width of the build's ISA (AVX2 with x86-64-v3). On x86 CPUs
// with AVX-512 the forward and backward kernels are cpu/vmath_avx512.h's intrinsic forms
// instead (the same functions, accuracy contract and special cases, some by other
// formulas; picked at run time by reel::vector_isa()): 1.5-3x fewer cycles per element
// than the compiler's v4 code of the scalar forms (vscalef, rcp14, getmant, tables in
// registers). Floor: memory bandwidth (8 bytes per element forward, 12 backward); on the
// 2-core Xeon of bench/RESULTS.md every forward and backward here is within 1.25x of it,
// the gelu_tanh pair (31 vector operations per 16 elements) the furthest. Large outputs
// are streamed (cpu/stream_store.h).
#include "vmath_kernels.h"

#include <algorithm>
#include <atomic>

#include "../tensor/parallel.h"
#include "stream_store.h"
#include "vmath.h"
#include "vmath_avx512.h"

namespace reel::cpu {
namespace {

template <typename F>
[[gnu::always_inline]] inline void loop1(float* o, const float* x, int64_t n, bool stream, F f) {
  if (stream) return stream_map_f32(o, n, [&](int64_t i) { return f(x[i]); }, x);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
}
template <typename F>
[[gnu::always_inline]] inline void loop2(float* o, const float* g, const float* x, int64_t n, bool stream, F f) {
  if (stream) return stream_map_f32(o, n, [&](int64_t i) { return g[i] * f(x[i]); }, g, x);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] * f(x[i]);
}

[[gnu::always_inline]] inline void forward_body(UnaryOp op, float* o, const float* x, int64_t n, float a, float b, bool stream) {
  switch (op) {
    case UnaryOp::exp: return loop1(o, x, n, stream, [](float v) { return exp_any_f32(v); });
    case UnaryOp::log: return loop1(o, x, n, stream, [](float v) { return log_any_f32(v); });
    case UnaryOp::tanh: return loop1(o, x, n, stream, [](float v) { return tanh_f32(v); });
    case UnaryOp::sigmoid: return loop1(o, x, n, stream, [](float v) { return sigmoid_f32(v); });
    case UnaryOp::gelu: return loop1(o, x, n, stream, [](float v) { return gelu_f32(v); });
    case UnaryOp::gelu_tanh: return loop1(o, x, n, stream, [](float v) { return gelu_tanh_f32(v); });
    case UnaryOp::erf: return loop1(o, x, n, stream, [](float v) { return erf_f32(v); });
    case UnaryOp::softplus: return loop1(o, x, n, stream, [a, b](float v) { return softplus_f32(v, a, b); });
    case UnaryOp::silu: return loop1(o, x, n, stream, [](float v) { return silu_f32(v); });
    default: return;
  }
}

[[gnu::always_inline]] inline void backward_body(UnaryOp op, float* o, const float* g, const float* x, int64_t n,
                                                 float a, float b, bool stream) {
  switch (op) {
    case UnaryOp::gelu: return loop2(o, g, x, n, stream, [](float v) { return gelu_grad_f32(v); });
    case UnaryOp::gelu_tanh: return loop2(o, g, x, n, stream, [](float v) { return gelu_tanh_grad_f32(v); });
    case UnaryOp::erf:
      return loop2(o, g, x, n, stream, [](float v) { return 1.1283791670955126f * exp_neg_square_f32(v, 1.0f); });
    case UnaryOp::softplus: return loop2(o, g, x, n, stream, [a, b](float v) { return softplus_grad_f32(v, a, b); });
    case UnaryOp::silu: return loop2(o, g, x, n, stream, [](float v) { return silu_grad_f32(v); });
    default: return;
  }
}

#if defined(__x86_64__)
#define REEL_VMATH_AVX512 1
#define REEL_V4 __attribute__((target("arch=x86-64-v4")))
// Both false alarms of GCC 12 here: the lambdas below return __m512 but are always
// inlined (no ABI crossing), and intrinsics built on _mm512_undefined_ps() (getmant,
// roundscale, cvtps_pd) read as "maybe uninitialized" once inlined at -O3.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// o[i] = f(x[i]) (g == nullptr) or g[i] f(x[i]), 16 lanes at a time; the tail through
// masked loads and stores; streamed from o's first 64-byte boundary on when `stream`.
// The inputs are prefetched 2 KiB ahead: with 20-50 operations per vector the hardware
// prefetchers alone left these loops waiting on memory (2-core Xeon, 4M floats, gelu_tanh
// forward 0.94 -> 0.82 ms, tanh 0.65 -> 0.62).
template <typename F>
[[gnu::always_inline]] inline REEL_V4 void map16(float* o, const float* g, const float* x, int64_t n, bool stream, F f) {
  auto at = [&](int64_t i) REEL_V4 {
    prefetch_ahead(x, i);
    if (g) prefetch_ahead(g, i);
    __m512 y = f(_mm512_loadu_ps(x + i));
    return g ? _mm512_mul_ps(_mm512_loadu_ps(g + i), y) : y;
  };
  auto part = [&](int64_t i, int64_t m) REEL_V4 {
    const __mmask16 k = __mmask16((1u << m) - 1);
    __m512 y = f(_mm512_maskz_loadu_ps(k, x + i));
    if (g) y = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + i), y);
    _mm512_mask_storeu_ps(o + i, k, y);
  };
  int64_t i = 0;
  if (stream) {
    const int64_t head = std::min<int64_t>(n, int64_t((64 - (reinterpret_cast<uintptr_t>(o) & 63)) & 63) / 4);
    if (head) part(0, head);
    for (i = head; i + 16 <= n; i += 16) _mm512_stream_ps(o + i, at(i));
    _mm_sfence();
  } else {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, at(i));
  }
  if (i < n) part(i, n - i);
}

REEL_V4 void forward_avx512(UnaryOp op, float* o, const float* x, int64_t n, float beta, float threshold, bool stream) {
  namespace v = avx512;
  switch (op) {
    case UnaryOp::exp: return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 { return v::exp(t); });
    case UnaryOp::log: return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 { return v::log(t); });
    case UnaryOp::tanh: return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 { return v::tanh(t); });
    case UnaryOp::sigmoid: return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 { return v::sigmoid(t); });
    case UnaryOp::silu:
      return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 { return _mm512_mul_ps(t, v::sigmoid(t)); });
    case UnaryOp::erf: return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 { return v::erf(t); });
    case UnaryOp::gelu:
      return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 {
        return _mm512_mul_ps(t, v::phi_common(t));
      });
    case UnaryOp::gelu_tanh:  // x sigmoid(2u)
      return map16(o, nullptr, x, n, stream, [](__m512 t) REEL_V4 {
        v::GeluTanhParts p = v::gelu_tanh_parts(t);
        return _mm512_mul_ps(t, _mm512_mask_mul_ps(p.s, v::sign_set(t), p.s, p.e));
      });
    case UnaryOp::softplus: {  // PyTorch's rule: x where beta x > threshold, ln(1 + e^(beta x)) / beta below
      const __m512 b = v::splat(beta), th = v::splat(threshold);
      if (beta == 1.0f)
        return map16(o, nullptr, x, n, stream,
                     [th](__m512 t) REEL_V4 { return _mm512_mask_blend_ps(v::greater(t, th), v::softplus_unit(t), t); });
      return map16(o, nullptr, x, n, stream, [b, th](__m512 t) REEL_V4 {
        __m512 z = _mm512_mul_ps(t, b);
        return _mm512_mask_blend_ps(v::greater(z, th), _mm512_div_ps(v::softplus_unit(z), b), t);
      });
    }
    default: return;
  }
}

REEL_V4 void backward_avx512(UnaryOp op, float* o, const float* g, const float* x, int64_t n, float beta,
                             float threshold, bool stream) {
  namespace v = avx512;
  switch (op) {
    case UnaryOp::gelu:  // Phi(x) + x phi(x)
      return map16(o, g, x, n, stream, [](__m512 t) REEL_V4 {
        __m512 pdf;
        __m512 p = v::phi(t, &pdf);
        return _mm512_fmadd_ps(_mm512_mul_ps(t, pdf), v::splat(0.39894228040143268f), p);
      });
    case UnaryOp::gelu_tanh:  // sigma + x sigma (1 - sigma) 2u', sigma = sigmoid(2u); sigma (1 - sigma) = e s^2
      return map16(o, g, x, n, stream, [](__m512 t) REEL_V4 {
        v::GeluTanhParts p = v::gelu_tanh_parts(t);
        __m512 sigma = _mm512_mask_mul_ps(p.s, v::sign_set(t), p.s, p.e);
        __m512 du2 = _mm512_fmadd_ps(p.a2, v::splat(1.5957691216057308f * 3.0f * 0.044715f), v::splat(1.5957691216057308f));
        __m512 x_var = _mm512_mul_ps(t, _mm512_mul_ps(_mm512_mul_ps(p.s, p.s), p.e));
        return _mm512_fmadd_ps(x_var, du2, sigma);
      });
    case UnaryOp::erf:
      return map16(o, g, x, n, stream, [](__m512 t) REEL_V4 {
        return _mm512_mul_ps(v::splat(1.1283791670955126f), v::exp_neg_square(_mm512_min_ps(v::splat(10.5f), v::abs(t)), 1.0f));
      });
    case UnaryOp::softplus: {  // sigmoid(beta x), 1 above the threshold
      const __m512 b = v::splat(beta), th = v::splat(threshold);
      return map16(o, g, x, n, stream, [b, th](__m512 t) REEL_V4 {
        __m512 z = _mm512_mul_ps(t, b);
        return _mm512_mask_blend_ps(v::greater(z, th), v::sigmoid(z), v::splat(1.0f));
      });
    }
    case UnaryOp::silu:  // s (1 + x (1 - s))
      return map16(o, g, x, n, stream, [](__m512 t) REEL_V4 {
        __m512 rest;
        __m512 s = v::sigmoid(t, &rest);
        return _mm512_fmadd_ps(_mm512_mul_ps(t, s), rest, s);
      });
    default: return;
  }
}
#pragma GCC diagnostic pop
#undef REEL_V4
#endif
void forward_base(UnaryOp op, float* o, const float* x, int64_t n, float a, float b, bool stream) {
  forward_body(op, o, x, n, a, b, stream);
}
void backward_base(UnaryOp op, float* o, const float* g, const float* x, int64_t n, float a, float b,
                   bool stream) {
  backward_body(op, o, g, x, n, a, b, stream);
}

}  // namespace

bool has_vector_kernel(UnaryOp op, bool backward) {
  switch (op) {
    case UnaryOp::exp: case UnaryOp::log: case UnaryOp::tanh: case UnaryOp::sigmoid: return !backward;
    case UnaryOp::gelu: case UnaryOp::gelu_tanh: case UnaryOp::erf: case UnaryOp::softplus: case UnaryOp::silu:
      return true;
    default: return false;
  }
}

void vector_unary(UnaryOp op, float* out, const float* x, int64_t n, float a, float b, bool stream) {
#ifdef REEL_VMATH_AVX512
  if (vector_isa() == VectorIsa::avx512) return forward_avx512(op, out, x, n, a, b, stream);
#endif
  forward_base(op, out, x, n, a, b, stream);
}

void vector_unary_backward(UnaryOp op, float* out, const float* g, const float* x, int64_t n, float a, float b,
                           bool stream) {
#ifdef REEL_VMATH_AVX512
  if (vector_isa() == VectorIsa::avx512) return backward_avx512(op, out, g, x, n, a, b, stream);
#endif
  backward_base(op, out, g, x, n, a, b, stream);
}

// ---- the ISA choice (declared in tensor/parallel.h)
namespace {
VectorIsa widest_isa() {
#ifdef REEL_VMATH_AVX512
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return VectorIsa::avx512;
#endif
  return VectorIsa::baseline;
}
std::atomic<VectorIsa> g_isa{widest_isa()};
}  // namespace

}  // namespace reel::cpu

namespace reel {
void set_vector_isa(VectorIsa isa) {
  cpu::g_isa.store(isa == VectorIsa::avx512 ? cpu::widest_isa() : VectorIsa::baseline, std::memory_order_relaxed);
}
VectorIsa vector_isa() { return cpu::g_isa.load(std::memory_order_relaxed); }
}  // namespace reel
