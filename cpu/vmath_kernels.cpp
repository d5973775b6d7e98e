// The activations' vector kernels: each loop calls one of cpu/vmath.h's f32 functions
// per element under `omp simd`, so the compiler emits it as straight-line vector code at
// the width of the ISA it compiles for. The same loops are compiled twice from one body:
// for the build's baseline ISA and, on x86, inside functions targeting x86-64-v4 (16-lane
// AVX-512), picked at run time (reel::vector_isa()). Floor: memory bandwidth for
// exp/tanh/sigmoid (8 bytes per element forward, 12 backward); gelu and erf spend about
// 40 flops per element on two polynomials, an exp and a division, and sit near it on 2 cores.
// Large outputs are written with streaming stores (cpu/stream_store.h).
#include "vmath_kernels.h"

#include <atomic>

#include "../tensor/parallel.h"
#include "stream_store.h"
#include "vmath.h"

namespace reel::cpu {
namespace {

template <typename F>
[[gnu::always_inline]] inline void loop1(float* o, const float* x, int64_t n, bool stream, F f) {
  if (stream) return stream_map_f32(o, n, [&](int64_t i) { return f(x[i]); });
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
}
template <typename F>
[[gnu::always_inline]] inline void loop2(float* o, const float* g, const float* x, int64_t n, bool stream, F f) {
  if (stream) return stream_map_f32(o, n, [&](int64_t i) { return g[i] * f(x[i]); });
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
__attribute__((target("arch=x86-64-v4"))) void forward_avx512(UnaryOp op, float* o, const float* x, int64_t n,
                                                               float a, float b, bool stream) {
  forward_body(op, o, x, n, a, b, stream);
}
__attribute__((target("arch=x86-64-v4"))) void backward_avx512(UnaryOp op, float* o, const float* g, const float* x,
                                                                int64_t n, float a, float b, bool stream) {
  backward_body(op, o, g, x, n, a, b, stream);
}
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
