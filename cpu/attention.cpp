// Scaled dot-product attention on the CPU, flash-attention style (FlashAttention-2's
// loop order): the portable kernel, for f64 (gradient checks) and for f32 on CPUs without
// AVX-512; f32 on AVX-512 runs cpu/attention_flash.cpp's blocked kernel, tested against this.
//
// Forward, one task per (bh, tile of kQ query rows), on the OpenMP pool: the key/value
// planes are walked in tiles of kK rows; each query row keeps a running max m, a running
// sum l of e^(s - m) and an unnormalised output accumulator (Ev numbers), rescaled by
// e^(m_old - m_new) when the max grows ("online softmax"). Only lse = m + log l per row
// is written besides the output, so memory is O(L (Ev + 1)) per plane, never O(L S).
// Backward, one task per plane (so that the dq, dk, dv sums need no atomics): per row
// D_i = do_i . o_i, then per (query tile, key tile) the probabilities are recomputed
// from lse, p_ij = e^(s_ij - lse_i), and
//   dv_j += z_ij p_ij do_i,  ds_ij = p_ij (z_ij do_i . v_j - D_i),
//   dq_i += scale ds_ij k_j, dk_j += scale ds_ij q_i.
// The key and value tiles are transposed once per tile, so that a row's products with the
// tile (scores, do . v) are axpys along the tile; the accumulations (o, dq, dk, dv) are axpys
// along E. Every inner loop is an `omp simd` loop over contiguous memory.
// Floor: 4 L S E flops forward (2 for q k, 2 for p v) and 10 L S E backward (the
// scores again, do v, p do, ds k, ds q) for E = Ev, plus L S exponentials each way.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../tensor/parallel.h"
#include "attention_flash.h"
#include "cpu_backend.h"
#include "loops.h"
#include "philox_words.h"
#include "vmath.h"

namespace reel::cpu {
namespace {

constexpr int64_t kQ = 32;  // query rows per task (forward) and per tile (backward)
constexpr int64_t kK = 64;  // key rows per tile: k, v (and dk, dv) tiles stay in L2

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

template <typename T>
void axpy_row(T* y, T a, const T* x, int64_t n) {
#pragma omp simd
  for (int64_t e = 0; e < n; ++e) y[e] += a * x[e];
}

// s[t] = e^(s[t] - m) for t < n (-inf gives 0), returning their sum: vmath's exp for f32.
template <typename T>
T exp_row(T* s, int64_t n, T m) {
  T sum = 0;
  if constexpr (std::is_same_v<T, float>) {
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < n; ++t) sum += s[t] = exp_f32(s[t] - m);
  } else {
    for (int64_t t = 0; t < n; ++t) sum += s[t] = std::exp(s[t] - m);
  }
  return sum;
}

// rows [j0, j1) of x [*, n] transposed into xt [n, kK] (xt[e kK + j - j0] = x[j][e]), so
// that a query row's products with a whole tile are axpys along the tile (vectorised,
// no horizontal sums): out[t] = a . x[j0 + t] = sum_e a[e] xt[e][t].
template <typename T>
void transpose_tile(const T* x, int64_t n, int64_t j0, int64_t j1, T* xt) {
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t e = 0; e < n; ++e) xt[e * kK + (j - j0)] = x[j * n + e];
}
template <typename T>
void row_products(const T* a, T scale, const T* xt, int64_t n, int64_t count, T* out) {
  if (count == kK) {  // a full tile: a fixed-size accumulator the compiler keeps in registers
    T acc[kK] = {};
    for (int64_t e = 0; e < n; ++e) {
      const T ae = scale * a[e];
      const T* xe = xt + e * kK;
#pragma omp simd
      for (int64_t t = 0; t < kK; ++t) acc[t] += ae * xe[t];
    }
    std::copy(acc, acc + kK, out);
    return;
  }
  std::fill(out, out + count, T(0));
  for (int64_t e = 0; e < n; ++e) {
    const T ae = scale * a[e];
    const T* xe = xt + e * kK;
#pragma omp simd
    for (int64_t t = 0; t < count; ++t) out[t] += ae * xe[t];
  }
}

// y[0, m) += sum_t w[t] x[t m, (t + 1) m): a row's weighted sum of n rows of x. For
// m = kK the sum stays in a fixed-size accumulator the compiler keeps in registers.
template <typename T>
void accumulate_rows(T* y, const T* w, const T* x, int64_t n, int64_t m) {
  if (m == kK) {
    T acc[kK];
    std::copy(y, y + kK, acc);
    for (int64_t t = 0; t < n; ++t) {
      const T wt = w[t];
      const T* xt = x + t * kK;
#pragma omp simd
      for (int64_t e = 0; e < kK; ++e) acc[e] += wt * xt[e];
    }
    std::copy(acc, acc + kK, y);
    return;
  }
  for (int64_t t = 0; t < n; ++t)
    if (w[t] != T(0)) axpy_row(y, w[t], x + t * m, m);
}

// Everything the per-tile code reads, for one plane bh.
template <typename T>
struct Plane {
  const T *q, *k, *v;
  int64_t L, S, E, Ev;
  const void* mask;  // null: none
  bool mask_bool;
  int64_t mask_si, mask_sj;
  const AttentionParams* p;
  uint64_t drop_base;  // element index of (bh, 0, 0) in the dropout fill
};

template <typename T>
Plane<T> plane(int64_t bh, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
               const Tensor& offsets, const AttentionParams& p) {
  const int64_t L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
  Plane<T> pl{q.data<T>() + bh * L * E, k.data<T>() + bh * S * E, v.data<T>() + bh * S * Ev, L, S, E, Ev,
              nullptr, false, 0, 0, &p, uint64_t(bh * L * S)};
  if (mask.defined()) {
    pl.mask_bool = mask.dtype() == DType::boolean;
    const int64_t off = offsets.data<int64_t>()[bh];
    pl.mask = static_cast<const char*>(mask.data_ptr()) + off * int64_t(mask.element_size());
    pl.mask_si = mask.stride(-2);
    pl.mask_sj = mask.stride(-1);
  }
  return pl;
}

// The scores of row i against keys [j0, j1): s[j - j0] = scale q_i . k_j + mask (-inf where
// masked). Returns the number of keys to look at (causal rows end early).
// kt: keys [j0, j1) transposed (transpose_tile).
template <typename T>
int64_t scores(const Plane<T>& pl, int64_t i, int64_t j0, int64_t j1, const T* kt, T* s) {
  const T ninf = -std::numeric_limits<T>::infinity();
  if (pl.p->causal) j1 = std::min(j1, i + 1);
  if (j1 <= j0) return 0;
  row_products(pl.q + i * pl.E, T(pl.p->scale), kt, pl.E, j1 - j0, s);
  if (pl.mask) {
    const int64_t base = i * pl.mask_si;
    if (pl.mask_bool) {
      const bool* m = static_cast<const bool*>(pl.mask) + base;
      for (int64_t j = j0; j < j1; ++j)
        if (!m[j * pl.mask_sj]) s[j - j0] = ninf;
    } else {
      const T* m = static_cast<const T*>(pl.mask) + base;
      for (int64_t j = j0; j < j1; ++j) s[j - j0] += m[j * pl.mask_sj];
    }
  }
  return std::max<int64_t>(j1 - j0, 0);
}

// z[j - j0] = dropout factor of (i, j): 0 or 1 / (1 - p), from the Philox fill's numbers
// (element idx draws word idx % 4 of block idx / 4). The row segment's blocks come from
// philox_words in one go, and keep-or-drop is an integer compare: to_unit(w) = (w >> 8) 2^-24
// is >= p exactly when (w >> 8) >= ceil(p 2^24).
template <typename T>
void dropout_factors(const Plane<T>& pl, int64_t i, int64_t j0, int64_t n, T* z) {
  const AttentionParams& p = *pl.p;
  const T keep = T(1.0 / (1.0 - p.dropout_p));
  const uint32_t threshold = uint32_t(std::min(std::ceil(p.dropout_p * 16777216.0), 16777216.0));
  const uint64_t idx = pl.drop_base + uint64_t(i * pl.S + j0), first = idx / 4, skip = idx % 4;
  uint32_t w[4 * (kK / 4 + 1)];  // n <= kK words from a block boundary on
  philox_words(p.seed, p.offset + first, int64_t((skip + uint64_t(n) + 3) / 4), w);
  const uint32_t* word = w + skip;
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) z[t] = (word[t] >> 8) >= threshold ? keep : T(0);
}

template <typename T>
void forward_tile(const Plane<T>& pl, int64_t i0, int64_t i1, T* out, T* lse) {
  const int64_t S = pl.S, Ev = pl.Ev;
  const bool drop = pl.p->dropout_p > 0;
  const T ninf = -std::numeric_limits<T>::infinity();
  std::vector<T> m(size_t(i1 - i0), ninf), l(size_t(i1 - i0), T(0)), s(kK), z(kK), kt(size_t(pl.E * kK));
  T* acc = out + i0 * Ev;  // accumulate in place: the tile's output rows
  std::fill(acc, acc + (i1 - i0) * Ev, T(0));
  const int64_t key_end = pl.p->causal ? std::min(S, i1) : S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kK) {
    const int64_t j1 = std::min(S, j0 + kK);
    transpose_tile(pl.k, pl.E, j0, j1, kt.data());
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t n = scores(pl, i, j0, j1, kt.data(), s.data());
      if (n == 0) continue;
      T& mi = m[size_t(i - i0)];
      T mt = mi;
      for (int64_t t = 0; t < n; ++t) mt = std::max(mt, s[size_t(t)]);
      if (mt == ninf) continue;  // every key so far masked
      T* a = acc + (i - i0) * Ev;
      if (mt > mi) {
        const T alpha = std::exp(mi - mt);  // 0 on the first live tile
        l[size_t(i - i0)] *= alpha;
#pragma omp simd
        for (int64_t e = 0; e < Ev; ++e) a[e] *= alpha;
        mi = mt;
      }
      l[size_t(i - i0)] += exp_row(s.data(), n, mi);
      if (drop) dropout_factors(pl, i, j0, n, z.data());
      if (drop)
        for (int64_t t = 0; t < n; ++t) s[size_t(t)] *= z[size_t(t)];
      accumulate_rows(a, s.data(), pl.v + j0 * Ev, n, Ev);
    }
  }
  for (int64_t i = i0; i < i1; ++i) {
    const T li = l[size_t(i - i0)];
    T* a = acc + (i - i0) * Ev;
    if (li == T(0)) {  // every key masked: o = 0, lse = -inf
      lse[i] = ninf;
      continue;
    }
    const T inv = T(1) / li;
#pragma omp simd
    for (int64_t e = 0; e < Ev; ++e) a[e] *= inv;
    lse[i] = m[size_t(i - i0)] + std::log(li);
  }
}

template <typename T>
void backward_plane(const Plane<T>& pl, const T* go, const T* o, const T* lse, T* gq, T* gk, T* gv) {
  const int64_t L = pl.L, S = pl.S, E = pl.E, Ev = pl.Ev;
  const bool drop = pl.p->dropout_p > 0;
  const T scale = T(pl.p->scale), ninf = -std::numeric_limits<T>::infinity();
  std::fill(gq, gq + L * E, T(0));
  std::fill(gk, gk + S * E, T(0));
  std::fill(gv, gv + S * Ev, T(0));
  std::vector<T> D(static_cast<size_t>(L)), s(kK), z(kK), dp(kK), ds(kK), kt(size_t(E * kK)), vt(size_t(Ev * kK));
  for (int64_t i = 0; i < L; ++i) D[size_t(i)] = dot(go + i * Ev, o + i * Ev, Ev);
  for (int64_t i0 = 0; i0 < L; i0 += kQ) {
    const int64_t i1 = std::min(L, i0 + kQ);
    const int64_t key_end = pl.p->causal ? std::min(S, i1) : S;
    for (int64_t j0 = 0; j0 < key_end; j0 += kK) {
      const int64_t j1 = std::min(S, j0 + kK);
      transpose_tile(pl.k, E, j0, j1, kt.data());
      transpose_tile(pl.v, Ev, j0, j1, vt.data());
      for (int64_t i = i0; i < i1; ++i) {
        if (lse[i] == ninf) continue;  // a fully masked row: no gradient
        const int64_t n = scores(pl, i, j0, j1, kt.data(), s.data());
        if (n == 0) continue;
        row_products(go + i * Ev, T(1), vt.data(), Ev, n, dp.data());  // do_i . v_j
        if (drop) dropout_factors(pl, i, j0, n, z.data());
        const T* goi = go + i * Ev;
        const T* qi = pl.q + i * E;
        T* gqi = gq + i * E;
        exp_row(s.data(), n, lse[i]);
        for (int64_t t = 0; t < n; ++t) {
          const T pij = s[size_t(t)];
          ds[size_t(t)] = T(0);
          if (pij == T(0)) continue;
          const int64_t j = j0 + t;
          const T zij = drop ? z[size_t(t)] : T(1);
          if (zij != T(0)) axpy_row(gv + j * Ev, pij * zij, goi, Ev);
          ds[size_t(t)] = scale * pij * (zij * dp[size_t(t)] - D[size_t(i)]);
          axpy_row(gk + j * E, ds[size_t(t)], qi, E);
        }
        accumulate_rows(gqi, ds.data(), pl.k + j0 * E, n, E);  // dq_i += sum_j ds_ij k_j
      }
    }
  }
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& mask, const Tensor& mask_offsets,
                                   const AttentionParams& p) {
  if (q.dtype() == DType::f32 && vector_isa() == VectorIsa::avx512)
    return attention_flash_forward(out, lse, q, k, v, mask, mask_offsets, p);
  dispatch_float(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    const int64_t BH = q.size(0), L = q.size(1), Ev = v.size(2);
    const int64_t tiles = (L + kQ - 1) / kQ;
    T* po = out.data<T>();
    T* pl = lse.data<T>();
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (BH * tiles > 1)
    for (int64_t bh = 0; bh < BH; ++bh)
      for (int64_t t = 0; t < tiles; ++t) {
        Plane<T> pn = plane<T>(bh, q, k, v, mask, mask_offsets, p);
        forward_tile(pn, t * kQ, std::min(L, (t + 1) * kQ), po + bh * L * Ev, pl + bh * L);
      }
  });
}

void CpuBackend::attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go,
                                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, const Tensor& mask, const Tensor& mask_offsets,
                                    const AttentionParams& p) {
  if (q.dtype() == DType::f32 && vector_isa() == VectorIsa::avx512)
    return attention_flash_backward(gq, gk, gv, go, q, k, v, out, lse, mask, mask_offsets, p);
  dispatch_float(q.dtype(), "scaled_dot_product_attention_backward", [&]<typename T>() {
    const int64_t BH = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
#pragma omp parallel for schedule(dynamic, 1) if (BH > 1)
    for (int64_t bh = 0; bh < BH; ++bh) {
      Plane<T> pn = plane<T>(bh, q, k, v, mask, mask_offsets, p);
      backward_plane(pn, go.data<T>() + bh * L * Ev, out.data<T>() + bh * L * Ev, lse.data<T>() + bh * L,
                     gq.data<T>() + bh * L * E, gk.data<T>() + bh * S * E, gv.data<T>() + bh * S * Ev);
    }
  });
}

}  // namespace reel::cpu
