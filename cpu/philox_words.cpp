// Philox4x32-10 over many consecutive counters. The scalar form (tensor/philox.h) runs
// its ten rounds per block one after the other: ~7 ns a block on Zen 4, which made
// attention's dropout factors 7% of a GPT training step. On AVX-512 CPUs 16 blocks go
// through the rounds together, one per 32-bit lane: each round's 32x32->64 products are
// vpmuludq on the even and odd lanes (the high words) and vpmulld (the low words).
// Compute bound: about 14 vector operations per round for 16 blocks.
#include "philox_words.h"

#include <algorithm>

#include "../tensor/parallel.h"
#include "../tensor/philox.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace reel::cpu {
namespace {

void words_base(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w) {
  for (int64_t b = 0; b < n; ++b) {
    philox::Block r = philox::generate(seed, counter + uint64_t(b));
    std::copy(r.w, r.w + 4, w + 4 * b);
  }
}

#if defined(__x86_64__)
#define REEL_V4 __attribute__((target("arch=x86-64-v4")))
// GCC 12 reads intrinsics built on _mm512_undefined_epi32() as uninitialized once inlined
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// the high and low 32 bits of m * c in every lane (m the same in all)
REEL_V4 inline void mul_wide(__m512i c, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(c, m);                          // lanes 0, 2, ...: 64-bit products
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);    // lanes 1, 3, ...
  hi = _mm512_mask_blend_epi32(__mmask16(0xAAAA), _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mullo_epi32(c, m);
}

// blocks counter .. counter + 15 into w[0, 64), interleaved as philox_words writes them
REEL_V4 void philox16(uint64_t seed, uint64_t counter, uint32_t* w) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lo_start = _mm512_set1_epi32(int(uint32_t(counter)));
  __m512i c0 = _mm512_add_epi32(lo_start, lane);
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, lo_start);  // the low word wrapped
  __m512i c1 = _mm512_mask_add_epi32(_mm512_set1_epi32(int(uint32_t(counter >> 32))), carry,
                                     _mm512_set1_epi32(int(uint32_t(counter >> 32))), _mm512_set1_epi32(1));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)), m1 = _mm512_set1_epi32(int(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mul_wide(c0, m0, hi0, lo0);
    mul_wide(c2, m1, hi1, lo1);
    c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32(int(k0)), 0x96);  // hi1 ^ c1 ^ k0
    c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32(int(k1)), 0x96);  // hi0 ^ c3 ^ k1
    c1 = lo1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // transpose: word vectors (lane = block) into blocks of 4 words, 4 blocks per vector
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);  // blocks 4l, 4l + 1
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);  // blocks 4l + 2, 4l + 3
  const __m512i x0 = _mm512_shuffle_i32x4(u0, u1, 0x44), x1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
  const __m512i x2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), x3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
  _mm512_storeu_si512(w, _mm512_shuffle_i32x4(x0, x1, 0x88));       // blocks 0-3
  _mm512_storeu_si512(w + 16, _mm512_shuffle_i32x4(x0, x1, 0xDD));  // 4-7
  _mm512_storeu_si512(w + 32, _mm512_shuffle_i32x4(x2, x3, 0x88));  // 8-11
  _mm512_storeu_si512(w + 48, _mm512_shuffle_i32x4(x2, x3, 0xDD));  // 12-15
}

REEL_V4 void words_avx512(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w) {
  int64_t b = 0;
  for (; b + 16 <= n; b += 16) philox16(seed, counter + uint64_t(b), w + 4 * b);
  if (b < n) {
    alignas(64) uint32_t tail[64];
    philox16(seed, counter + uint64_t(b), tail);
    std::copy(tail, tail + 4 * (n - b), w + 4 * b);
  }
}
#pragma GCC diagnostic pop
#undef REEL_V4
#endif

}  // namespace

void philox_words(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w) {
#if defined(__x86_64__)
  if (vector_isa() == VectorIsa::avx512) return words_avx512(seed, counter, n, w);
#endif
  words_base(seed, counter, n, w);
}

}  // namespace reel::cpu
