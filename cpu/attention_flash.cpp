// Scaled dot-product attention in f32 on AVX-512: FlashAttention-2's blocking with the
// block products on a register-tiled micro-kernel, the way PyTorch 2's CPU flash attention
// runs them on small GEMMs (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp).
//
// Forward: one task per (plane bh, block of kFq query rows), heaviest (causal: last) first,
// on the OpenMP pool. Per block of kFk keys: S = Q K^T (micro-kernel), then per row scale,
// mask, the running max m and sum l ("online softmax", the output rows rescaled by
// e^(m_old - m_new) when m grows), P = e^(S - m) (dropped out), O += P V (micro-kernel).
// Only lse = m + log l per row is kept besides the output: O(L) memory, never O(L S).
// Backward: one task per plane (the dk, dv, dq sums need no atomics). Per key block j
// (kBk keys) and query block i (kBq rows) at or below the diagonal: P = e^(S - lse)
// recomputed, dP = dO V^T, dV_j += (z P)^T dO_i, dS = scale P (z dP - D), D_i = do_i . o_i,
// dK_j += dS^T Q_i, dQ_i += dS K_j. Causal blocks above the diagonal are skipped.
// K (times the scale) and V are packed transposed once per plane in 64-key panels ([S / 64][E][64]): their
// products with a row block read contiguous 16 KB panels (the plain transpose's rows,
// S floats apart, would all fall into the same few L1 sets at S = 4096).
// Floor: compute. 4 L S E flops forward (2 q k, 2 p v) and 10 L S E backward for E = Ev
// (the scores recomputed), halved by a causal mask, plus L S exponentials each way. The
// micro-kernel (6 x 64 tile, 24 accumulators) runs at oneDNN's sgemm rate in L1 (~150 GF/s a
// core on the Xeon model 207 VMs, AVX-512, no AMX). Measured there, one thread, CPU time,
// medians of 3 rounds interleaved with PyTorch 2.15 on a loaded machine, causal [6, T, 64]:
// T = 4096 forward 126 ms, backward 247 ms (PyTorch's flash kernel 124 / 348); T = 1024 8.2 /
// 17.4 ms (11.1 / 27.9). At T = 4096 that is ~0.7 (forward) and ~0.87 (backward) of peak.
#include "attention_flash.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "cpu_backend.h"
#include "philox_words.h"
#include "vmath_avx512.h"

#define REEL_V4 __attribute__((target("arch=x86-64-v4")))
#define REEL_V4_INLINE [[gnu::always_inline]] inline __attribute__((target("arch=x86-64-v4")))

// GCC 12 reads intrinsics built on _mm512_undefined_ps() as uninitialized once inlined
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace reel::cpu {
namespace {

constexpr int64_t kFq = 64;   // forward: query rows per task
constexpr int64_t kFk = 256;  // forward: keys per block (the score block, 64 KB, stays in L2)
constexpr int64_t kBq = 64;   // backward: query rows per block
constexpr int64_t kBk = 64;   // backward: keys per block
constexpr int64_t kPanel = 64;  // columns per micro-kernel panel, and per packed K^T / V^T panel
constexpr int64_t kKc = 64;     // the inner dim per pass over a panel's row tiles
constexpr int64_t kMR = 6;      // rows per micro-tile: 6 x 4 accumulators + 4 B vectors + 1 broadcast

const float kNegInf = -std::numeric_limits<float>::infinity();

// ---- the micro-kernel

// c[MR x 16 NV] (row stride ldc) = (acc ? c : 0) + a b over K: a element (i, k) at
// a[i sai + k sak] (broadcast, so any layout), b row k at b + k ldb (16 NV floats, the last
// vector cut to `tail`). Compute bound: MR NV FMAs per MR + NV loads.
template <int MR, int NV>
REEL_V4_INLINE void tile(int64_t K, const float* a, int64_t sai, int64_t sak, const float* b, int64_t ldb, float* c,
                         int64_t ldc, __mmask16 tail, bool acc) {
  __m512 r[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      r[i][v] = acc ? _mm512_maskz_loadu_ps(v == NV - 1 ? tail : __mmask16(0xFFFF), c + i * ldc + 16 * v)
                    : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? tail : __mmask16(0xFFFF), b + k * ldb + 16 * v);
    const float* ak = a + k * sak;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ak[i * sai]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) r[i][v] = _mm512_fmadd_ps(av, bv[v], r[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(c + i * ldc + 16 * v, v == NV - 1 ? tail : __mmask16(0xFFFF), r[i][v]);
}

template <int MR>
REEL_V4_INLINE void tile_nv(int nv, int64_t K, const float* a, int64_t sai, int64_t sak, const float* b, int64_t ldb,
                            float* c, int64_t ldc, __mmask16 tail, bool acc) {
  switch (nv) {
    case 1: tile<MR, 1>(K, a, sai, sak, b, ldb, c, ldc, tail, acc); break;
    case 2: tile<MR, 2>(K, a, sai, sak, b, ldb, c, ldc, tail, acc); break;
    case 3: tile<MR, 3>(K, a, sai, sak, b, ldb, c, ldc, tail, acc); break;
    default: tile<MR, 4>(K, a, sai, sak, b, ldb, c, ldc, tail, acc); break;
  }
}

// The operand b of a product: row k of column panel p (kPanel columns) at
// data + p panel + k ld. A row-major [K, N] matrix is {data, ld = N, panel = kPanel}; a
// panel-packed one ([N / kPanel][K][kPanel]) is {data, kPanel, K kPanel}.
struct PanelsB {
  const float* data;
  int64_t ld, panel;
};

// c [M, N] (row stride ldc) = (acc ? c : 0) + a [M, K] b [K, N], a element (i, k) at
// a[i sai + k sak] (row-major: sai = lda, sak = 1; transposed: sai = 1, sak = lda). K is cut
// in kKc steps, so that the rows of b a panel's row tiles share stay in L1 (16 KB).
REEL_V4 void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t sai, int64_t sak, PanelsB b, float* c,
                  int64_t ldc, bool acc) {
  for (int64_t j = 0, p = 0; j < N; j += kPanel, ++p) {
    const int64_t w = std::min(kPanel, N - j);
    const int nv = int((w + 15) / 16);
    const __mmask16 tail = __mmask16((1u << (w - 16 * (nv - 1))) - 1u);
    float* cp = c + j;
    for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kKc) {
      const int64_t kc = std::min(kKc, K - k0);
      const bool add = acc || k0 > 0;
      const float* bp = b.data + p * b.panel + k0 * b.ld;
      const float* ak = a + k0 * sak;
      int64_t i = 0;
      for (; i + kMR <= M; i += kMR) tile_nv<kMR>(nv, kc, ak + i * sai, sai, sak, bp, b.ld, cp + i * ldc, ldc, tail, add);
      const float* ai = ak + i * sai;
      float* ci = cp + i * ldc;
      switch (M - i) {
        case 1: tile_nv<1>(nv, kc, ai, sai, sak, bp, b.ld, ci, ldc, tail, add); break;
        case 2: tile_nv<2>(nv, kc, ai, sai, sak, bp, b.ld, ci, ldc, tail, add); break;
        case 3: tile_nv<3>(nv, kc, ai, sai, sak, bp, b.ld, ci, ldc, tail, add); break;
        case 4: tile_nv<4>(nv, kc, ai, sai, sak, bp, b.ld, ci, ldc, tail, add); break;
        case 5: tile_nv<5>(nv, kc, ai, sai, sak, bp, b.ld, ci, ldc, tail, add); break;
        default: break;
      }
    }
  }
}

// a r[16] x 16 tile transposed in registers (unpack 32-bit, shuffle 64-bit, then 128-bit lanes
// twice): out[e] = column e of the rows
REEL_V4_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {
    u[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
    u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
  for (int k = 0; k < 2; ++k)
    for (int c = 0; c < 4; ++c) {
      t[8 * k + c] = _mm512_shuffle_f32x4(u[8 * k + c], u[8 * k + 4 + c], 0x88);
      t[8 * k + 4 + c] = _mm512_shuffle_f32x4(u[8 * k + c], u[8 * k + 4 + c], 0xDD);
    }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
  }
}

// a x [S, n] (row-major) into panels [ceil(S / kPanel)][n][kPanel]: xt[p][e][t] = a x[p kPanel + t][e],
// zero past row S. 16 x 16 tiles through registers (a scalar scatter of the stores cost 7% of
// a GPT-sized attention call), the edges element by element.
REEL_V4 void pack_transposed(const float* x, int64_t S, int64_t n, float* xt, float a = 1) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t p = 0; p * kPanel < S; ++p) {
    float* dst = xt + p * n * kPanel;
    const int64_t rows = std::min(kPanel, S - p * kPanel);
    const float* src = x + p * kPanel * n;
    int64_t t0 = 0;
    for (; t0 + 16 <= rows; t0 += 16) {
      int64_t e0 = 0;
      for (; e0 + 16 <= n; e0 += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_mul_ps(av, _mm512_loadu_ps(src + (t0 + i) * n + e0));
        transpose16(r);
        for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + (e0 + i) * kPanel + t0, r[i]);
      }
      for (int64_t t = t0; t < t0 + 16; ++t)
        for (int64_t e = e0; e < n; ++e) dst[e * kPanel + t] = a * src[t * n + e];
    }
    for (int64_t t = t0; t < rows; ++t)
      for (int64_t e = 0; e < n; ++e) dst[e * kPanel + t] = a * src[t * n + e];
    for (int64_t t = rows; t < kPanel; ++t)
      for (int64_t e = 0; e < n; ++e) dst[e * kPanel + t] = 0;
  }
}
int64_t packed_size(int64_t S, int64_t n) { return (S + kPanel - 1) / kPanel * kPanel * n; }

// ---- rows of a score block

// Everything the row code reads for one plane.
struct Plane {
  const float *q, *k, *v;
  const float *kt, *vt;  // packed transposed (pack_transposed); vt only in backward
  int64_t L, S, E, Ev;
  const void* mask;  // null: none
  bool mask_bool;
  int64_t mask_si, mask_sj;
  const AttentionParams* p;
  uint64_t drop_base;  // element index of (bh, 0, 0) in the dropout fill
};

Plane plane_of(int64_t bh, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
               const Tensor& offsets, const AttentionParams& p) {
  const int64_t L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
  Plane pl{q.data<float>() + bh * L * E, k.data<float>() + bh * S * E, v.data<float>() + bh * S * Ev, nullptr,
           nullptr, L, S, E, Ev, nullptr, false, 0, 0, &p, uint64_t(bh * L * S)};
  if (mask.defined()) {
    pl.mask_bool = mask.dtype() == DType::boolean;
    pl.mask = static_cast<const char*>(mask.data_ptr()) + offsets.data<int64_t>()[bh] * int64_t(mask.element_size());
    pl.mask_si = mask.stride(-2);
    pl.mask_sj = mask.stride(-1);
  }
  return pl;
}

REEL_V4_INLINE __mmask16 first(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// Row i's scaled products s[0, n) with keys j0 + t (the scale is in the packed keys): the
// mask added (-inf where masked). Returns the live count: keys from it on are after the
// query (causal) and not touched.
REEL_V4 int64_t score_row(const Plane& pl, int64_t i, int64_t j0, int64_t n, float* s) {
  const int64_t live = pl.p->causal ? std::clamp<int64_t>(i + 1 - j0, 0, n) : n;
  if (pl.mask) {
    const int64_t base = i * pl.mask_si + j0 * pl.mask_sj;
    if (pl.mask_bool) {
      const bool* m = static_cast<const bool*>(pl.mask) + base;
      for (int64_t t = 0; t < live; ++t)
        if (!m[t * pl.mask_sj]) s[t] = kNegInf;
    } else {
      const float* m = static_cast<const float*>(pl.mask) + base;
      for (int64_t t = 0; t < live; ++t) s[t] += m[t * pl.mask_sj];
    }
  }
  return live;
}

REEL_V4 float row_max(const float* s, int64_t n) {
  __m512 mx = _mm512_set1_ps(kNegInf);
  for (int64_t t = 0; t < n; t += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, first(n - t), s + t));
  return _mm512_reduce_max_ps(mx);
}

// s[t] = e^(s[t] - m) for t < live, 0 for live <= t < n; returns the sum
REEL_V4 float exp_row(float* s, int64_t live, int64_t n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  int64_t t = 0;
  for (; t < live; t += 16) {
    const __mmask16 k = first(live - t);
    const __m512 e = _mm512_maskz_mov_ps(k, avx512::exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), mv)));
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(s + t, first(n - t), e);  // zeros past live
  }
  for (; t < n; t += 16) _mm512_mask_storeu_ps(s + t, first(n - t), _mm512_setzero_ps());
  return _mm512_reduce_add_ps(sum);
}

// z[t] = dropout factor of (i, j0 + t), t < n: 0 or 1 / (1 - p), from the Philox fill's
// words (element idx: word idx % 4 of block idx / 4); keep when (w >> 8) >= ceil(p 2^24),
// the same test as the fill's to_unit(w) >= p (cpu/attention.cpp).
void dropout_factors(const Plane& pl, int64_t i, int64_t j0, int64_t n, float* z) {
  const AttentionParams& p = *pl.p;
  const float keep = float(1.0 / (1.0 - p.dropout_p));
  const uint32_t threshold = uint32_t(std::min(std::ceil(p.dropout_p * 16777216.0), 16777216.0));
  const uint64_t idx = pl.drop_base + uint64_t(i * pl.S + j0), skip = idx % 4;
  uint32_t w[4 * (kFk / 4 + 1)];  // n <= kFk words from a block boundary on
  philox_words(p.seed, p.offset + idx / 4, int64_t((skip + uint64_t(n) + 3) / 4), w);
  const uint32_t* word = w + skip;
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) z[t] = (word[t] >> 8) >= threshold ? keep : 0.0f;
}

REEL_V4 void scale_row(float* x, int64_t n, float a) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 m = first(n - t);
    _mm512_mask_storeu_ps(x + t, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, x + t)));
  }
}

// ---- forward

// Output rows [i0, i1) of plane pl (out, lse: the plane's), the score block in s [kFq, kFk].
REEL_V4 void forward_block(const Plane& pl, int64_t i0, int64_t i1, float* out, float* lse, float* s, float* z) {
  const int64_t rows = i1 - i0, E = pl.E, Ev = pl.Ev;
  const bool drop = pl.p->dropout_p > 0;
  float m[kFq], l[kFq];
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);
  float* o = out + i0 * Ev;  // written by the first block's product, accumulated after
  const int64_t key_end = pl.p->causal ? std::min(pl.S, i1) : pl.S;
  if (key_end == 0) std::fill(o, o + rows * Ev, 0.0f);
  for (int64_t j0 = 0; j0 < key_end; j0 += kFk) {
    const int64_t n = std::min(kFk, key_end - j0);
    gemm(rows, n, E, pl.q + i0 * E, E, 1, {pl.kt + j0 / kPanel * E * kPanel, kPanel, E * kPanel}, s, kFk, false);
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s + r * kFk;
      const int64_t live = score_row(pl, i0 + r, j0, n, sr);
      const float mt = row_max(sr, live);
      if (mt == kNegInf) {  // every key so far masked: the row adds nothing
        std::fill(sr, sr + n, 0.0f);
        continue;
      }
      if (mt > m[r]) {
        const float alpha = std::exp(m[r] - mt);  // 0 on the first live block
        l[r] *= alpha;
        if (j0 > 0) scale_row(o + r * Ev, Ev, alpha);
        m[r] = mt;
      }
      l[r] += exp_row(sr, live, n, m[r]);
      if (drop) {
        dropout_factors(pl, i0 + r, j0, live, z);
        for (int64_t t = 0; t < live; ++t) sr[t] *= z[t];
      }
    }
    gemm(rows, Ev, n, s, kFk, 1, {pl.v + j0 * Ev, Ev, kPanel}, o, Ev, j0 > 0);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (l[r] == 0.0f) {  // every key masked: o = 0 (never accumulated), lse = -inf
      lse[i0 + r] = kNegInf;
      continue;
    }
    scale_row(o + r * Ev, Ev, 1.0f / l[r]);
    lse[i0 + r] = m[r] + std::log(l[r]);
  }
}

// ---- backward

// dq, dk, dv of one plane (go, o, lse, gq, gk, gv: the plane's).
REEL_V4 void backward_plane(const Plane& pl, const float* go, const float* o, const float* lse, float* gq, float* gk,
                            float* gv) {
  const int64_t L = pl.L, S = pl.S, E = pl.E, Ev = pl.Ev;
  const bool drop = pl.p->dropout_p > 0;
  const float scale = float(pl.p->scale);
  // dq, dk, dv are written by their first product, not zeroed first (dq's is at key block 0,
  // which every query block sees); only what no product reaches is zeroed
  if (S == 0) std::fill(gq, gq + L * E, 0.0f);
  std::unique_ptr<float[]> scratch(new float[size_t(L + 3 * kBq * kBk + kBk)]);
  float *D = scratch.get(), *P = D + L, *dP = P + kBq * kBk, *PZ = dP + kBq * kBk, *z = PZ + kBq * kBk;
  for (int64_t i = 0; i < L; ++i) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t e = 0; e < Ev; e += 16) {
      const __mmask16 m = first(Ev - e);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, go + i * Ev + e), _mm512_maskz_loadu_ps(m, o + i * Ev + e), acc);
    }
    D[i] = _mm512_reduce_add_ps(acc);
  }
  for (int64_t j0 = 0; j0 < S; j0 += kBk) {
    const int64_t n = std::min(kBk, S - j0);
    const int64_t first_row = pl.p->causal ? j0 / kBq * kBq : 0;  // rows before j0 see none of these keys
    const PanelsB kt{pl.kt + j0 / kPanel * E * kPanel, kPanel, E * kPanel};
    const PanelsB vt{pl.vt + j0 / kPanel * Ev * kPanel, kPanel, Ev * kPanel};
    if (first_row >= L) {  // keys after every query (causal, S > L): no gradient
      std::fill(gk + j0 * E, gk + (j0 + n) * E, 0.0f);
      std::fill(gv + j0 * Ev, gv + (j0 + n) * Ev, 0.0f);
    }
    for (int64_t i0 = first_row; i0 < L; i0 += kBq) {
      const int64_t rows = std::min(kBq, L - i0);
      gemm(rows, n, E, pl.q + i0 * E, E, 1, kt, P, kBk, false);         // S = Q_i K_j^T
      gemm(rows, n, Ev, go + i0 * Ev, Ev, 1, vt, dP, kBk, false);       // dP = dO_i V_j^T
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float* pr = P + r * kBk;
        float* dr = dP + r * kBk;
        int64_t live = score_row(pl, i, j0, n, pr);
        if (Ev == 0 || lse[i] == kNegInf) live = 0;  // no output (lse never written), or every key masked
        exp_row(pr, live, n, lse[i]);
        const __m512 Di = _mm512_set1_ps(D[i]), sc = _mm512_set1_ps(scale);
        if (drop) {
          dropout_factors(pl, i, j0, n, z);
          float* pz = PZ + r * kBk;
          for (int64_t t = 0; t < n; t += 16) {
            const __mmask16 m = first(n - t);
            const __m512 p = _mm512_maskz_loadu_ps(m, pr + t), zt = _mm512_maskz_loadu_ps(m, z + t);
            const __m512 dp = _mm512_maskz_loadu_ps(m, dr + t);
            _mm512_mask_storeu_ps(pz + t, m, _mm512_mul_ps(p, zt));
            _mm512_mask_storeu_ps(dr + t, m, _mm512_mul_ps(_mm512_mul_ps(sc, p), _mm512_fmsub_ps(zt, dp, Di)));
          }
        } else {
          for (int64_t t = 0; t < n; t += 16) {
            const __mmask16 m = first(n - t);
            const __m512 p = _mm512_maskz_loadu_ps(m, pr + t), dp = _mm512_maskz_loadu_ps(m, dr + t);
            _mm512_mask_storeu_ps(dr + t, m, _mm512_mul_ps(_mm512_mul_ps(sc, p), _mm512_sub_ps(dp, Di)));
          }
        }
      }
      const float* pz = drop ? PZ : P;
      const bool first_q = i0 == first_row;
      gemm(n, Ev, rows, pz, 1, kBk, {go + i0 * Ev, Ev, kPanel}, gv + j0 * Ev, Ev, !first_q);  // dV_j += (z P)^T dO_i
      gemm(n, E, rows, dP, 1, kBk, {pl.q + i0 * E, E, kPanel}, gk + j0 * E, E, !first_q);     // dK_j += dS^T Q_i
      gemm(rows, E, n, dP, kBk, 1, {pl.k + j0 * E, E, kPanel}, gq + i0 * E, E, j0 > 0);      // dQ_i += dS K_j
    }
  }
}

}  // namespace

void attention_flash_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p) {
  const int64_t BH = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
  const int64_t blocks = (L + kFq - 1) / kFq, per_plane = packed_size(S, E);
  // scratch from the caching allocator: a fresh mmap of a few MB per call spent 5% of a GPT
  // step zeroing pages
  Tensor packed = empty({BH, per_plane});
  float* kt = packed.data<float>();
  const float* pk = k.data<float>();
#pragma omp parallel for schedule(static) if (BH > 1)
  for (int64_t bh = 0; bh < BH; ++bh) pack_transposed(pk + bh * S * E, S, E, kt + bh * per_plane, float(p.scale));
  float* po = out.data<float>();
  float* pl = lse.data<float>();
#pragma omp parallel if (BH * blocks > 1)
  {
    std::unique_ptr<float[]> s(new float[size_t(kFq * kFk)]), z(new float[size_t(kFk)]);
    // the last query blocks first: under a causal mask they see the most keys
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < BH * blocks; ++task) {
      const int64_t bh = task % BH, b = blocks - 1 - task / BH;
      Plane pn = plane_of(bh, q, k, v, mask, mask_offsets, p);
      pn.kt = kt + bh * per_plane;
      forward_block(pn, b * kFq, std::min(L, (b + 1) * kFq), po + bh * L * Ev, pl + bh * L, s.get(), z.get());
    }
  }
}

void attention_flash_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                              const Tensor& mask, const Tensor& mask_offsets, const AttentionParams& p) {
  const int64_t BH = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
  const int64_t nk = packed_size(S, E), nv = packed_size(S, Ev), threads = std::min<int64_t>(BH, omp_get_max_threads());
  Tensor packed = empty({threads, nk + nv});  // each thread's K^T and V^T
#pragma omp parallel num_threads(int(threads)) if (threads > 1)
  {
    float* kt = packed.data<float>() + omp_get_thread_num() * (nk + nv);
    float* vt = kt + nk;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; ++bh) {
      Plane pn = plane_of(bh, q, k, v, mask, mask_offsets, p);
      pack_transposed(pn.k, S, E, kt, float(p.scale));
      pack_transposed(pn.v, S, Ev, vt);
      pn.kt = kt;
      pn.vt = vt;
      backward_plane(pn, go.data<float>() + bh * L * Ev, out.data<float>() + bh * L * Ev, lse.data<float>() + bh * L,
                     gq.data<float>() + bh * L * E, gk.data<float>() + bh * S * E, gv.data<float>() + bh * S * Ev);
    }
  }
}

}  // namespace reel::cpu

#pragma GCC diagnostic pop
