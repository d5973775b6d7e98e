// Scaled dot-product attention in float32, tiled (FlashAttention-2's schedule on the
// SIMT units, exact float32: no tensor cores, no TF32). A block takes R (32 or 64) query
// rows (forward, dq) or R keys (dk, dv) of one head and walks the other side 64 at a
// time through shared memory; its 4 R threads each hold a 4 x 4 block of the R x 64
// scores (rows ty + R/4 r, columns tx + 16 c) and 4 rows of the output tile's columns
// tx + 16 b. Nothing of size L x S is stored; dq and dk/dv come from two kernels that
// each recompute the scores, so no atomics and the sums run in a fixed order.
// Bound: compute (the 64 x 64 x head products from shared memory, two FMAs per shared
// load), written against the float32 FMA peak. Masks, causal and dropout follow the row
// kernels' rules (attention.cuh), so both paths give the same values up to rounding.
#include <cstdlib>
#include <string>

#include "attention.cuh"
#include "internal/launch_geometry.h"

namespace reel::cuda::attention {
namespace {

constexpr int kT = geometry::kAttentionTile;  // the streamed side's rows
constexpr int kSP = kT + 1;                   // a score tile's padded row

// rows [r0, r0 + N) of src [rows, cols] into dst [N][H + 1], zeros past either end, by
// the block's 4 R threads
template <int H, int N, int R>
__device__ __forceinline__ void load_tile(float* dst, const float* src, int64_t r0, int64_t rows, int64_t cols) {
  for (int idx = threadIdx.x; idx < N * H; idx += 4 * R) {
    const int r = idx / H, c = idx % H;
    dst[r * (H + 1) + c] = (r0 + r < rows && c < cols) ? src[(r0 + r) * cols + c] : 0.f;
  }
}

// acc[r][c] += sum_d x[ty + R/4 r][d] y[tx + 16 c][d]: the block's R-row tile x against a
// streamed 64-row tile y, both [.][H + 1]
template <int H, int R>
__device__ __forceinline__ void tile_dots(float (&acc)[4][4], const float* x, const float* y, int ty, int tx) {
#pragma unroll 8
  for (int d = 0; d < H; ++d) {
    float xa[4], yb[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) xa[r] = x[(ty + R / 4 * r) * (H + 1) + d];
#pragma unroll
    for (int c = 0; c < 4; ++c) yb[c] = y[(tx + 16 * c) * (H + 1) + d];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(xa[r], yb[c], acc[r][c]);
  }
}

// acc[r][b] += sum_j w[ty + R/4 r][j] y[j][tx + 16 b]: a score tile [R][65] times a streamed
// row tile [64][H + 1]
template <int H, int R>
__device__ __forceinline__ void tile_product(float (&acc)[4][H / 16], const float* w, const float* y, int ty, int tx) {
#pragma unroll 4
  for (int j = 0; j < kT; ++j) {
    float wa[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) wa[r] = w[(ty + R / 4 * r) * kSP + j];
#pragma unroll
    for (int b = 0; b < H / 16; ++b) {
      const float yb = y[j * (H + 1) + tx + 16 * b];
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r][b] = fmaf(wa[r], yb, acc[r][b]);
    }
  }
}

// the block's rows of acc [R][H] into out [rows, cols] from row r0 on, inside both bounds
template <int H, int R>
__device__ __forceinline__ void store_rows(float* out, const float (&acc)[4][H / 16], int64_t r0, int64_t rows,
                                           int64_t cols, int ty, int tx) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = r0 + ty + R / 4 * r;
    if (i >= rows) continue;
#pragma unroll
    for (int b = 0; b < H / 16; ++b)
      if (tx + 16 * b < cols) out[i * cols + tx + 16 * b] = acc[r][b];
  }
}

// The forward: o and lse of R query rows, online softmax over the key tiles
template <int H, int R>
__global__ void __launch_bounds__(4 * R) forward_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float sm[];
  constexpr int P = H + 1, NB = H / 16;
  float *qs = sm, *ks = qs + R * P, *vs = ks + kT * P, *ws = vs + kT * P;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  // the last query tiles first: under a causal mask they have the most keys
  const int64_t bh = blockIdx.x % a.BH, i0 = (q_tiles - 1 - int64_t(blockIdx.x) / a.BH) * R;
  load_tile<H, R, R>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E);
  float m[4], l[4], o[4][NB];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int b = 0; b < NB; ++b) o[r][b] = 0.f;
  }
  const int64_t jend = a.causal ? min(a.S, i0 + R) : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kT) {
    __syncthreads();  // the last tile's k, v and weights are read
    load_tile<H, kT, R>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E);
    load_tile<H, kT, R>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
    __syncthreads();
    float s[4][4] = {};
    tile_dots<H, R>(s, qs, ks, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + ty + R / 4 * r;
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t j = j0 + tx + 16 * c;
        s[r][c] = (i < a.L && j < a.S) ? masked(a, bh, i, j, a.scale * s[r][c]) : -INFINITY;
        mx = fmaxf(mx, s[r][c]);
      }
      const float mt = fmaxf(m[r], half_max(mx));
      const float alpha = m[r] == -INFINITY ? 0.f : expf(m[r] - mt);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = s[r][c] == -INFINITY ? 0.f : expf(s[r][c] - mt);
        sum += p;
        ws[(ty + R / 4 * r) * kSP + tx + 16 * c] = p == 0.f ? 0.f : p * dropout_factor(a, bh, i, j0 + tx + 16 * c);
      }
      l[r] = l[r] * alpha + half_sum(sum);
      m[r] = mt;
#pragma unroll
      for (int b = 0; b < NB; ++b) o[r][b] *= alpha;
    }
    __syncthreads();
    tile_product<H, R>(o, ws, vs, ty, tx);
  }
  // a row whose every key is masked keeps o = 0 and lse = -inf, as the row kernel
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
    for (int b = 0; b < NB; ++b) o[r][b] *= inv;
    const int64_t i = i0 + ty + R / 4 * r;
    if (tx == 0 && i < a.L) a.lse_out[bh * a.L + i] = l[r] > 0.f ? m[r] + logf(l[r]) : -INFINITY;
  }
  store_rows<H, R>(a.out + bh * a.L * a.Ev, o, i0, a.L, a.Ev, ty, tx);
}

// dq of R query rows: dq_i = sum_j ds_ij k_j over the key tiles
template <int H, int R>
__global__ void __launch_bounds__(4 * R) backward_q_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float sm[];
  constexpr int P = H + 1, NB = H / 16;
  float *qs = sm, *gos = qs + R * P, *ks = gos + R * P, *vs = ks + kT * P, *dss = vs + kT * P;
  float *lse = dss + R * kSP, *D = lse + kT;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bh = blockIdx.x % a.BH, i0 = (q_tiles - 1 - int64_t(blockIdx.x) / a.BH) * R;
  load_tile<H, R, R>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E);
  load_tile<H, R, R>(gos, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev);
  load_row_stats<R>(lse, D, a, bh, i0, R);
  float gq[4][NB] = {};
  const int64_t jend = a.causal ? min(a.S, i0 + R) : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kT) {
    __syncthreads();
    load_tile<H, kT, R>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E);
    load_tile<H, kT, R>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
    __syncthreads();
    float qk[4][4] = {}, dv[4][4] = {};
    tile_dots<H, R>(qk, qs, ks, ty, tx);
    tile_dots<H, R>(dv, gos, vs, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int ir = ty + R / 4 * r;
        float pz, ds;
        grads_at(a, bh, i0 + ir, j0 + tx + 16 * c, qk[r][c], dv[r][c], lse[ir], D[ir], pz, ds);
        dss[ir * kSP + tx + 16 * c] = ds;
      }
    __syncthreads();
    tile_product<H, R>(gq, dss, ks, ty, tx);
  }
  store_rows<H, R>(a.gq + bh * a.L * a.E, gq, i0, a.L, a.E, ty, tx);
}

// dk and dv of R keys: dk_j = sum_i ds_ij q_i, dv_j = sum_i z_ij p_ij do_i over the query tiles
template <int H, int R>
__global__ void __launch_bounds__(4 * R) backward_kv_kernel(Args<float> a) {
  extern __shared__ float sm[];
  constexpr int P = H + 1, NB = H / 16;
  float *ks = sm, *vs = ks + R * P, *qs = vs + R * P, *gos = qs + kT * P;
  float *pzt = gos + kT * P, *dst = pzt + R * kSP, *lse = dst + R * kSP, *D = lse + kT;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  // the first key tiles first: under a causal mask they have the most queries
  const int64_t bh = blockIdx.x % a.BH, j0 = int64_t(blockIdx.x) / a.BH * R;
  load_tile<H, R, R>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E);
  load_tile<H, R, R>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
  float gk[4][NB] = {}, gv[4][NB] = {};
  for (int64_t i0 = a.causal ? j0 : 0; i0 < a.L; i0 += kT) {
    __syncthreads();
    load_tile<H, kT, R>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E);
    load_tile<H, kT, R>(gos, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev);
    load_row_stats<R>(lse, D, a, bh, i0, kT);
    __syncthreads();
    // transposed: rows are keys ty + R/4 r, columns queries tx + 16 c
    float kq[4][4] = {}, vd[4][4] = {};
    tile_dots<H, R>(kq, ks, qs, ty, tx);
    tile_dots<H, R>(vd, vs, gos, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int jr = ty + R / 4 * r, ic = tx + 16 * c;
        float pz, ds;
        grads_at(a, bh, i0 + ic, j0 + jr, kq[r][c], vd[r][c], lse[ic], D[ic], pz, ds);
        pzt[jr * kSP + ic] = pz;
        dst[jr * kSP + ic] = ds;
      }
    __syncthreads();
    tile_product<H, R>(gv, pzt, gos, ty, tx);
    tile_product<H, R>(gk, dst, qs, ty, tx);
  }
  store_rows<H, R>(a.gk + bh * a.S * a.E, gk, j0, a.S, a.E, ty, tx);
  store_rows<H, R>(a.gv + bh * a.S * a.Ev, gv, j0, a.S, a.Ev, ty, tx);
}

geometry::AttentionTiles plan(Context& c, const Args<float>& a) {
  return geometry::attention_tiles(a.BH, a.L, a.S, a.E, a.Ev, c.smem_optin, c.sm_count, rows_from_env());
}

}  // namespace

// to measure one against the other (scripts/gpu-run.sh); unset, the geometry chooses
int rows_from_env() {
  static const int rows = [] {
    const char* v = std::getenv("REEL_CUDA_ATTENTION_ROWS");
    if (!v || !*v) return 0;
    const std::string s(v);
    if (s == "32" || s == "64") return std::stoi(s);
    throw Error("scaled_dot_product_attention: REEL_CUDA_ATTENTION_ROWS must be 32 or 64, got \"" + s + "\"");
  }();
  return rows;
}

bool forward_tiles(Context& c, const Args<float>& a) {
  const geometry::AttentionTiles t = plan(c, a);
  return with_tiles<32, 64, 128>(t, [&]<int H, int R>() {
    launch_tiles(c, forward_kernel<H, R>, t.forward_blocks, t.threads(), t.forward_smem, "scaled_dot_product_attention",
                 a, t.q_tiles);
  });
}

bool backward_tiles(Context& c, const Args<float>& a) {
  const geometry::AttentionTiles t = plan(c, a);
  const char* op = "scaled_dot_product_attention_backward";
  return with_tiles<32, 64, 128>(t, [&]<int H, int R>() {
    launch_tiles(c, backward_q_kernel<H, R>, t.backward_q_blocks, t.threads(), t.backward_q_smem, op, a, t.q_tiles);
    launch_tiles(c, backward_kv_kernel<H, R>, t.backward_kv_blocks, t.threads(), t.backward_kv_smem, op, a);
  });
}

}  // namespace reel::cuda::attention
