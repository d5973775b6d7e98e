// Plain planes <-> channel blocks, fused with relu's forward or backward (channel_blocks.h).
// Memory-bound: 8 bytes per element forward, 12 backward; the AVX-512 path spends 4
// shuffles per 16 elements on the transpose, far below the loads and stores it replaces.
#include "channel_blocks.h"

#include <bit>
#include <cstring>

#include "../tensor/parallel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace reel::cpu {
namespace {

// relu's keep-mask as cpu/norm.cpp has it: v > 0, or NaN
bool relu_keeps(float v) { return !(v <= 0.0f); }

#if defined(__x86_64__)
#define REEL_V4 __attribute__((target("arch=x86-64-v4")))
// GCC 12's false alarms, as in cpu/vmath_kernels.cpp: always-inlined helpers taking
// __m512, and intrinsics built on _mm512_undefined_ps() read as "maybe uninitialized"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// r[j][i] <- r[i][j] for 16 rows of 16 floats: pairs of rows interleaved by floats, then
// by float pairs, then 128-bit lanes gathered from four rows at a time
REEL_V4 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];  // u[4g + k]: lane L holds column 4L + k of rows 4g..4g+3
  for (int g = 0; g < 4; ++g) {
    __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
    __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int k = 0; k < 4; ++k) {
    __m512 v01 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44), w01 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
    __m512 v23 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE), w23 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
    r[k] = _mm512_shuffle_f32x4(v01, w01, 0x88);
    r[4 + k] = _mm512_shuffle_f32x4(v01, w01, 0xDD);
    r[8 + k] = _mm512_shuffle_f32x4(v23, w23, 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(v23, w23, 0xDD);
  }
}

REEL_V4 inline __m512 relu_keep(__m512 v, __m512 z) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
}

// 16 steps of s at a time; returns where the scalar tail starts
REEL_V4 int64_t write16_avx512(float* out, const float* const* plane, const float* scale, const float* shift,
                               int64_t S) {
  int64_t s = 0;
  for (; s + 16 <= S; s += 16) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) {
      __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(plane[i] + s), _mm512_set1_ps(scale[i]), _mm512_set1_ps(shift[i]));
      r[i] = relu_keep(v, v);
    }
    transpose16(r);
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(out + (s + j) * 16, r[j]);
  }
  return s;
}

REEL_V4 int64_t read16_avx512(float* const* plane, const float* g, const float* z, int64_t S) {
  int64_t s = 0;
  for (; s + 16 <= S; s += 16) {
    __m512 r[16];
    for (int j = 0; j < 16; ++j)
      r[j] = relu_keep(_mm512_loadu_ps(g + (s + j) * 16), _mm512_loadu_ps(z + (s + j) * 16));
    transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(plane[i] + s, r[i]);
  }
  return s;
}
#pragma GCC diagnostic pop
#undef REEL_V4
#endif

bool fast16(int64_t B) {
#if defined(__x86_64__)
  return B == 16 && vector_isa() == VectorIsa::avx512;
#else
  (void)B;
  return false;
#endif
}

}  // namespace

void write_blocked_scale_shift_relu(float* out, const float* const* plane, const float* scale, const float* shift,
                                    int64_t S, int64_t B) {
  int64_t s = 0;
#if defined(__x86_64__)
  if (fast16(B)) s = write16_avx512(out, plane, scale, shift, S);
#endif
  for (; s < S; ++s)
    for (int64_t i = 0; i < B; ++i) {
      float v = plane[i][s] * scale[i] + shift[i];
      out[s * B + i] = relu_keeps(v) ? v : 0.0f;
    }
}

void read_blocked_relu_grad(float* const* plane, const float* g, const float* z, int64_t S, int64_t B) {
  int64_t s = 0;
#if defined(__x86_64__)
  if (fast16(B)) s = read16_avx512(plane, g, z, S);
#endif
  for (; s < S; ++s)
    for (int64_t i = 0; i < B; ++i) plane[i][s] = relu_keeps(z[s * B + i]) ? g[s * B + i] : 0.0f;
}

}  // namespace reel::cpu
