// Philox4x32-10 counter-based random numbers, the same on the host and on CUDA:
// the same seed gives the same tensor on every device. Element i of a fill draws
// from block (offset + i / 4) for uniforms and (offset + i / 2) for normals.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define REEL_HD __host__ __device__ __forceinline__
#else
#define REEL_HD inline
#endif

namespace reel::philox {

struct Block {
  uint32_t w[4];
};

REEL_HD Block generate(uint64_t seed, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Block{{c0, c1, c2, c3}};
}

// uniform in [0, 1) with 24 random bits (exactly representable in float)
REEL_HD float to_unit(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }


// Box-Muller on one block: the normals of elements 2k and 2k + 1 (r cos, r sin)
struct NormalPair {
  float even, odd;
};
REEL_HD NormalPair normal_pair(uint64_t seed, uint64_t block) {
  Block b = generate(seed, block);
  float u1 = (float(b.w[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]: log is finite
  float u2 = to_unit(b.w[1]);
  float r = sqrtf(-2.0f * logf(u1));
  float theta = 6.283185307179586f * u2;
  return {r * cosf(theta), r * sinf(theta)};
}

// blocks a fill of n elements consumes
REEL_HD uint64_t uniform_blocks(uint64_t n) { return (n + 3) / 4; }
REEL_HD uint64_t normal_blocks(uint64_t n) { return (n + 1) / 2; }

}  // namespace reel::philox
