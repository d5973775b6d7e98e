// Streaming (non-temporal) stores for large elementwise outputs. A normal store first
// reads its cache line (read-for-ownership), so a memory-bound y = f(x) moves 12 bytes per
// f32 element, not 8; streaming stores skip that read and leave the cache to the inputs.
// Worth it only for outputs that would not stay in cache for the next op anyway: see
// kStreamingStoreBytes. Internal to cpu/.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
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

// dst[0, n) = src[0, n), streaming where dst is 32-byte aligned (the head and tail: normal stores)
[[gnu::always_inline]] inline void stream_copy_f32(float* dst, const float* src, int64_t n) {
#if defined(__AVX__)
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31u); ++i) dst[i] = src[i];
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::memcpy(dst, src, size_t(n) * sizeof(float));
#endif
}

// o[i] = f(i) for i in [0, n): a block at a time into an L1-resident buffer (the
// vectorised loop), then streamed out
template <typename F>
[[gnu::always_inline]] inline void stream_map_f32(float* o, int64_t n, F f) {
  constexpr int64_t kBlock = 1024;
  alignas(64) float buf[kBlock];
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t m = std::min(kBlock, n - s);
    const int64_t base = s;
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) buf[i] = f(base + i);
    stream_copy_f32(o + s, buf, m);
  }
#if defined(__x86_64__)
  _mm_sfence();  // streaming stores are weakly ordered: complete them before the result is published
#endif
}

}  // namespace reel::cpu
