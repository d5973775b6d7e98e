// C [M, N] f32 = A [M, K] B [K, N] bf16 for a short K (at most 256): the weight
// gradients of a batch, g^T x, where K is the batch and C is as large as the weight.
// Written against the f32 output's store bandwidth: C is made 32 rows by ~2048 columns
// at a time in an L2-resident strip and streamed out row by row, non-temporal. oneDNN
// 2.6's brgemm walks C in 32-column blocks down all M rows, and those short strided
// writes ran at half the speed of a memset here (W8's [1024, 128] x [128, 25000]: 53 ms
// of one core's time against 14 ms this way, the products bit for bit the same: both
// accumulate each 32-wide slice of K in one AMX TDPBF16PS).
#include "amx_matmul.h"

#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "isa.h"

namespace reel::cpu {
namespace {

// LDTILECFG's 64-byte operand (palette 1): tiles 0-3 accumulate C, 4-5 hold A, 6-7 B.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Linux hands AMX's 8 KB of tile state to a process that asks (arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA); oneDNN asks too, this does not rely on it.
bool amx_permitted() {
  static const bool ok = [] {
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}

// Scratch that lives with the thread (OpenMP's pool is persistent): no page faults or
// allocator calls per product.
struct Scratch {
  std::unique_ptr<char, decltype(&std::free)> p{nullptr, &std::free};
  size_t size = 0;
  template <typename T>
  T* get(size_t bytes) {
    if (bytes > size) {
      p.reset(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      size = p ? bytes : 0;
    }
    return reinterpret_cast<T*>(p.get());
  }
};

// A's tiles mt in [mt0, mt1): tile (mt, ks) at (mt KS + ks) 512 holds rows 16 mt.. and
// columns 32 ks.. of A, row-major, zero-padded past M and K.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_a(uint16_t* pack, const uint16_t* a, int64_t sam,
                                                                   int64_t sak, int64_t M, int64_t K, int64_t KS,
                                                                   int64_t mt0, int64_t mt1) {
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(16));
  for (int64_t mt = mt0; mt < mt1; ++mt)
    for (int64_t ks = 0; ks < KS; ++ks) {
      uint16_t* t = pack + (mt * KS + ks) * 512;
      int64_t m0 = mt * 16, k0 = ks * 32;
      bool whole = m0 + 16 <= M && k0 + 32 <= K;
      if (whole && sam == 1) {  // column-major (g^T): pairs of k rows, interleaved and scattered down the tile
        for (int p = 0; p < 16; ++p) {
          const uint16_t* g = a + (k0 + 2 * p) * sak + m0;
          __m512i lo = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
          __m512i hi = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + sak)));
          _mm512_i32scatter_epi32(reinterpret_cast<int*>(t) + p, rows, _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xffff, hi, 16)), 4);
        }
      } else if (whole && sak == 1) {
        for (int r = 0; r < 16; ++r) _mm512_store_si512(t + r * 32, _mm512_loadu_si512(a + (m0 + r) * sam + k0));
      } else {
        for (int r = 0; r < 16; ++r)
          for (int c = 0; c < 32; ++c) {
            int64_t m = m0 + r, k = k0 + c;
            t[r * 32 + c] = m < M && k < K ? a[m * sam + k * sak] : uint16_t(0);
          }
      }
    }
}

// B's columns [n0, n0 + n) (n <= 32) in AMX's pair-interleaved form: tile (ks, j) at
// (2 ks + j) 512, row r holding k = 32 ks + 2r and 2r + 1 of 16 columns side by side.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_b(uint16_t* t, const uint16_t* b, int64_t sbk,
                                                                   int64_t K, int64_t KS, int64_t n0, int64_t n) {
  for (int64_t ks = 0; ks < KS; ++ks)
    for (int j = 0; j < 2; ++j) {
      uint16_t* tile = t + (2 * ks + j) * 512;
      int64_t cn = std::clamp<int64_t>(n - 16 * j, 0, 16);
      __mmask16 mask = __mmask16((1u << cn) - 1u);
      const uint16_t* col = b + n0 + 16 * j;
      for (int r = 0; r < 16; ++r) {
        int64_t k = ks * 32 + 2 * r;
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        if (cn > 0 && k < K) lo = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(mask, col + k * sbk));
        if (cn > 0 && k + 1 < K) hi = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(mask, col + (k + 1) * sbk));
        _mm512_store_si512(tile + r * 32, _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xffff, hi, 16)));
      }
    }
}

// rows x cols of the strip (row stride w) to c (row stride ldc): non-temporal stores
// for the whole 64-byte lines, plain ones at the ends
__attribute__((target("avx512f"))) void stream_rows(float* c, int64_t ldc, const float* s, int64_t w, int64_t rows,
                                                    int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = c + r * ldc;
    const float* x = s + r * w;
    int64_t j = 0;
    for (; j < cols && (reinterpret_cast<uintptr_t>(d + j) & 63u); ++j) d[j] = x[j];
    for (; j + 16 <= cols; j += 16) _mm512_stream_ps(d + j, _mm512_loadu_ps(x + j));
    for (; j < cols; ++j) d[j] = x[j];
  }
}

// One thread's share: column chunks [c0, c1) of width w, row strips [s0, s1) of 32.
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl"))) void run_share(
    float* c, int64_t ldc, const uint16_t* apack, const uint16_t* b, int64_t sbk, int64_t M, int64_t N, int64_t K,
    int64_t KS, int64_t w, int64_t c0, int64_t c1, int64_t s0, int64_t s1, uint16_t* bpack, float* strip) {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  _tile_loadconfig(&cfg);
  for (int64_t ch = c0; ch < c1; ++ch) {
    int64_t n0 = ch * w, nw = std::min(w, N - n0);
    if (nw <= 0) continue;
    int64_t blocks = (nw + 31) / 32;
    for (int64_t nb = 0; nb < blocks; ++nb)
      pack_b(bpack + nb * KS * 1024, b, sbk, K, KS, n0 + nb * 32, std::min<int64_t>(32, nw - nb * 32));
    for (int64_t s = s0; s < s1; ++s) {
      int64_t m0 = s * 32;
      const uint16_t* a0 = apack + (m0 / 16) * KS * 512;
      const uint16_t* a1 = a0 + KS * 512;
      for (int64_t nb = 0; nb < blocks; ++nb) {
        const uint16_t* bt = bpack + nb * KS * 1024;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t ks = 0; ks < KS; ++ks) {
          _tile_loadd(4, a0 + ks * 512, 64);
          _tile_loadd(5, a1 + ks * 512, 64);
          _tile_loadd(6, bt + ks * 1024, 64);
          _tile_loadd(7, bt + ks * 1024 + 512, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        float* sp = strip + nb * 32;
        _tile_stored(0, sp, w * 4);
        _tile_stored(1, sp + 16, w * 4);
        _tile_stored(2, sp + 16 * w, w * 4);
        _tile_stored(3, sp + 16 * w + 16, w * 4);
      }
      stream_rows(c + m0 * ldc + n0, ldc, strip, w, std::min<int64_t>(32, M - m0), nw);
    }
  }
  _mm_sfence();  // the streamed stores are weakly ordered: done before the result is read
  _tile_release();
}

}  // namespace

bool amx_short_k_matmul(float* c, int64_t ldc, const uint16_t* a, int64_t sam, int64_t sak, const uint16_t* b,
                        int64_t sbk, int64_t M, int64_t N, int64_t K) {
  if (K > kAmxShortK || K < 1 || !amx_available() || !amx_permitted()) return false;
  const int64_t KS = (K + 31) / 32, MT = (M + 31) / 32 * 2, strips = (M + 31) / 32;
  const int nt = omp_get_max_threads();
  // ~2048-column chunks, a multiple of the threads, when C is wide; else one chunk and
  // the rows shared out
  int64_t chunks = (N + 2047) / 2048;
  const bool split_n = chunks >= nt;
  chunks = split_n ? (chunks + nt - 1) / nt * nt : 1;
  const int64_t w = ((N + chunks - 1) / chunks + 31) / 32 * 32;
  thread_local Scratch a_scratch;
  uint16_t* apack = a_scratch.get<uint16_t>(size_t(MT * KS) * 1024);
  if (!apack) return false;
  bool ok = true;
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), n = omp_get_num_threads();
    pack_a(apack, a, sam, sak, M, K, KS, MT * t / n, MT * (t + 1) / n);
    thread_local Scratch b_scratch, strip_scratch;
    uint16_t* bpack = b_scratch.get<uint16_t>(size_t(KS * (w / 32)) * 2048);
    float* strip = strip_scratch.get<float>(size_t(32 * w) * 4);
#pragma omp barrier
    if (!bpack || !strip) {
#pragma omp atomic write
      ok = false;
    } else if (split_n) {
      run_share(c, ldc, apack, b, sbk, M, N, K, KS, w, chunks * t / n, chunks * (t + 1) / n, 0, strips, bpack, strip);
    } else {
      run_share(c, ldc, apack, b, sbk, M, N, K, KS, w, 0, 1, strips * t / n, strips * (t + 1) / n, bpack, strip);
    }
  }
  return ok;
}

}  // namespace reel::cpu
