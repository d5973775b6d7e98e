// Philox4x32-10 words many blocks at a time, for the CPU's random fills and attention's
// dropout (internal to cpu/). The same numbers as tensor/philox.h's generate().
#pragma once
#include <algorithm>
#include <cstdint>

namespace reel::cpu {

// w[4 b + k] = word k of philox::generate(seed, counter + b), for b in [0, n)
void philox_words(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w);

// The words of an n-element uniform draw at offset (element i: word i % 4 of block
// offset + i / 4), chunk by chunk on the OpenMP pool when n >= grain: f(i0, m, w) for
// elements [i0, i0 + m), w[k] element i0 + k's word. Chunks of 256 blocks, whose words
// philox_words makes 16 blocks per step on AVX-512.
template <typename F>
void for_uniform_words(uint64_t seed, uint64_t offset, int64_t n, int64_t grain, F f) {
  constexpr int64_t kChunk = 256;
  const int64_t blocks = (n + 3) / 4, chunks = (blocks + kChunk - 1) / kChunk;
#if defined(_OPENMP)  // (the header is also read by tests built without OpenMP)
#pragma omp parallel for schedule(static) if (n >= grain)
#endif
  for (int64_t c = 0; c < chunks; ++c) {
    uint32_t w[4 * kChunk];
    const int64_t b0 = c * kChunk, nb = std::min(kChunk, blocks - b0);
    philox_words(seed, offset + uint64_t(b0), nb, w);
    f(4 * b0, std::min(4 * nb, n - 4 * b0), static_cast<const uint32_t*>(w));
  }
}

}  // namespace reel::cpu
