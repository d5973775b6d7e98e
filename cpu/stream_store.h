// Streaming (non-temporal) stores for large elementwise outputs. A normal store first
// reads its cache line (read-for-ownership), so a memory-bound y = f(x) moves 12 bytes per
// f32 element, not 8; streaming stores skip that read and leave the cache to the inputs.
// Worth it only for outputs that would not stay in cache for the next op anyway: see
// kStreamingStoreBytes. Internal to cpu/.
#pragma once
#include <cstdint>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../tensor/tensor.h"

namespace reel::cpu {

// Half of a typical server L3 (32 MiB on the Zen 4 and Xeon machines measured in
// bench/RESULTS.md): an output this large evicts most of itself before a consumer runs,
// while activations of the benchmarked networks (at most a few MiB each) stay below it
// and keep the cache-resident handoff to the next op.
inline constexpr int64_t kStreamingStoreBytes = int64_t(16) << 20;

inline bool streaming_output(const Tensor& out) {
  return out.dtype() == DType::f32 && out.numel() * 4 >= kStreamingStoreBytes;
}

// The same, for an output written over inputs it may share memory with (`a += b`, `x *= s`,
// relu_): an output that aliases an input is in the cache already, line by line, as the
// loop reads it, so a plain store costs no read for ownership, while a streaming store
// evicts the line it just read and forces the next pass to fetch it from memory again:
// W6's in-place a += b (10M floats) ran at half the speed of a fresh d = b * c this way.
template <typename... In>
bool streaming_output(const Tensor& out, const In&... inputs) {
  return streaming_output(out) && ((out.storage().get() != inputs.storage().get()) && ...);
}

// Prefetches, into L1, the cache lines of p[i + 512 ..] that 16 elements span (one for f32,
// two for 8-byte types): compute-heavy elementwise loops outrun what the hardware
// prefetchers fetch ahead (cpu/vmath_kernels.cpp's map16). An address, not an access: past
// the end it neither faults nor counts as a read.
template <typename T>
[[gnu::always_inline]] inline void prefetch_ahead(const T* p, int64_t i) {
#if defined(__x86_64__)
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + uintptr_t(i + 512) * sizeof(T);
  for (size_t b = 0; b < 16 * sizeof(T); b += 64) _mm_prefetch(reinterpret_cast<const char*>(at + b), _MM_HINT_T0);
#else
  (void)p, (void)i;
#endif
}

// o[i] = f(i) for i in [0, n): 16 results at a time through a register-sized buffer
// (store-forwarded, vectorised), streamed out at once, the inputs `ins` prefetched ahead.
// A larger L1 block written then copied out cost ~15% of a memory-bound map on 2 Zen 4
// cores (2-thread g * y at 4M: 0.72-0.83 ms against 0.63 streaming straight from the
// registers).
template <typename F, typename... In>
[[gnu::always_inline]] inline void stream_map_f32(float* o, int64_t n, F f, const In*... ins) {
#if defined(__AVX__)
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(o + i) & 31u); ++i) o[i] = f(i);
  for (; i + 16 <= n; i += 16) {
    (prefetch_ahead(ins, i), ...);
    alignas(32) float buf[16];
    const int64_t base = i;
#pragma omp simd
    for (int64_t j = 0; j < 16; ++j) buf[j] = f(base + j);
    _mm256_stream_ps(o + i, _mm256_load_ps(buf));
    _mm256_stream_ps(o + i + 8, _mm256_load_ps(buf + 8));
  }
  for (; i < n; ++i) o[i] = f(i);
  _mm_sfence();  // streaming stores are weakly ordered: complete them before the result is published
#else
  ((void)ins, ...);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = f(i);
#endif
}

}  // namespace reel::cpu
