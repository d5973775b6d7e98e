// Scaled dot-product attention in float32, tiled (FlashAttention-2's schedule on the
// SIMT units, exact float32: no tensor cores, no TF32). A block takes a tile of 64 query
// rows (forward, dq) or 64 keys (dk, dv) of one head and walks the other side 64 at a
// time through shared memory; its 256 threads each hold a 4 x 4 block of the 64 x 64
// scores (rows ty + 16 r, columns tx + 16 c) and 4 rows of the output tile's columns
// tx + 16 b. Nothing of size L x S is stored; dq and dk/dv come from two kernels that
// each recompute the scores, so no atomics and the sums run in a fixed order.
// Bound: compute (the 64 x 64 x head products from shared memory, two FMAs per shared
// load), written against the float32 FMA peak. Masks, causal and dropout follow the row
// kernels' rules (attention.cuh), so both paths give the same values up to rounding.
#include "attention.cuh"
#include "internal/launch_geometry.h"

namespace reel::cuda::attention {
namespace {

constexpr int kT = geometry::kAttentionTile;
constexpr int kSP = kT + 1;  // a score tile's padded row

// max and sum over the 16 lanes of a half-warp that share rows (lanes ty * 16 + tx)
__device__ __forceinline__ float half_max(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kAll, v, o));
  return v;
}
__device__ __forceinline__ float half_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
}

// rows [r0, r0 + 64) of src [rows, cols] into dst [64][H + 1], zeros past either end
template <int H>
__device__ __forceinline__ void load_tile(float* dst, const float* src, int64_t r0, int64_t rows, int64_t cols) {
  for (int idx = threadIdx.x; idx < kT * H; idx += kThreads) {
    const int r = idx / H, c = idx % H;
    dst[r * (H + 1) + c] = (r0 + r < rows && c < cols) ? src[(r0 + r) * cols + c] : 0.f;
  }
}

// acc[r][c] += sum_d x[ty + 16 r][d] y[tx + 16 c][d] over two [64][H + 1] tiles
template <int H>
__device__ __forceinline__ void tile_dots(float (&acc)[4][4], const float* x, const float* y, int ty, int tx) {
#pragma unroll 8
  for (int d = 0; d < H; ++d) {
    float xa[4], yb[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) xa[r] = x[(ty + 16 * r) * (H + 1) + d];
#pragma unroll
    for (int c = 0; c < 4; ++c) yb[c] = y[(tx + 16 * c) * (H + 1) + d];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(xa[r], yb[c], acc[r][c]);
  }
}

// acc[r][b] += sum_j w[ty + 16 r][j] y[j][tx + 16 b]: a score tile [64][65] times a row tile
template <int H>
__device__ __forceinline__ void tile_product(float (&acc)[4][H / 16], const float* w, const float* y, int ty, int tx) {
#pragma unroll 4
  for (int j = 0; j < kT; ++j) {
    float wa[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) wa[r] = w[(ty + 16 * r) * kSP + j];
#pragma unroll
    for (int b = 0; b < H / 16; ++b) {
      const float yb = y[j * (H + 1) + tx + 16 * b];
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r][b] = fmaf(wa[r], yb, acc[r][b]);
    }
  }
}

// rows of acc [64][H] into out [rows, cols] from row r0 on, inside both bounds
template <int H>
__device__ __forceinline__ void store_rows(float* out, const float (&acc)[4][H / 16], int64_t r0, int64_t rows,
                                           int64_t cols, int ty, int tx) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = r0 + ty + 16 * r;
    if (i >= rows) continue;
#pragma unroll
    for (int b = 0; b < H / 16; ++b)
      if (tx + 16 * b < cols) out[i * cols + tx + 16 * b] = acc[r][b];
  }
}

// p_ij z_ij and ds_ij = scale p_ij (z_ij do_i . v_j - D_i) from the raw q_i . k_j and do_i . v_j
__device__ __forceinline__ void grads_at(const Args<float>& a, int64_t bh, int64_t i, int64_t j, float qk, float dv,
                                         float lse, float D, float& pz, float& ds) {
  pz = 0.f;
  ds = 0.f;
  if (i >= a.L || j >= a.S || lse == -INFINITY) return;
  const float s = masked(a, bh, i, j, a.scale * qk);
  if (s == -INFINITY) return;
  const float p = expf(s - lse), z = dropout_factor(a, bh, i, j);
  pz = p * z;
  ds = a.scale * p * ((z == 0.f ? 0.f : z * dv) - D);
}

// The forward: o and lse of 64 query rows, online softmax over the key tiles
template <int H>
__global__ void __launch_bounds__(kThreads) forward_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float sm[];
  constexpr int P = H + 1, NB = H / 16;
  float *qs = sm, *ks = qs + kT * P, *vs = ks + kT * P, *ws = vs + kT * P;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  // the last query tiles first: under a causal mask they have the most keys
  const int64_t bh = blockIdx.x % a.BH, i0 = (q_tiles - 1 - int64_t(blockIdx.x) / a.BH) * kT;
  load_tile<H>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E);
  float m[4], l[4], o[4][NB];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int b = 0; b < NB; ++b) o[r][b] = 0.f;
  }
  const int64_t jend = a.causal ? min(a.S, i0 + kT) : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kT) {
    __syncthreads();  // the last tile's k, v and weights are read
    load_tile<H>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E);
    load_tile<H>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
    __syncthreads();
    float s[4][4] = {};
    tile_dots<H>(s, qs, ks, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + ty + 16 * r;
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
        ws[(ty + 16 * r) * kSP + tx + 16 * c] = p == 0.f ? 0.f : p * dropout_factor(a, bh, i, j0 + tx + 16 * c);
      }
      l[r] = l[r] * alpha + half_sum(sum);
      m[r] = mt;
#pragma unroll
      for (int b = 0; b < NB; ++b) o[r][b] *= alpha;
    }
    __syncthreads();
    tile_product<H>(o, ws, vs, ty, tx);
  }
  // a row whose every key is masked keeps o = 0 and lse = -inf, as the row kernel
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
    for (int b = 0; b < NB; ++b) o[r][b] *= inv;
    const int64_t i = i0 + ty + 16 * r;
    if (tx == 0 && i < a.L) a.lse_out[bh * a.L + i] = l[r] > 0.f ? m[r] + logf(l[r]) : -INFINITY;
  }
  store_rows<H>(a.out + bh * a.L * a.Ev, o, i0, a.L, a.Ev, ty, tx);
}

// lse_i and D_i of rows [r0, r0 + 64) into shared vectors (-inf and 0 past the end)
__device__ __forceinline__ void load_row_stats(float* lse, float* D, const Args<float>& a, int64_t bh, int64_t r0) {
  for (int t = threadIdx.x; t < kT; t += kThreads) {
    const int64_t i = r0 + t;
    lse[t] = i < a.L ? a.lse[bh * a.L + i] : -INFINITY;
    D[t] = i < a.L ? a.D[bh * a.L + i] : 0.f;
  }
}

// dq of 64 query rows: dq_i = sum_j ds_ij k_j over the key tiles
template <int H>
__global__ void __launch_bounds__(kThreads) backward_q_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float sm[];
  constexpr int P = H + 1, NB = H / 16;
  float *qs = sm, *gos = qs + kT * P, *ks = gos + kT * P, *vs = ks + kT * P, *dss = vs + kT * P;
  float *lse = dss + kT * kSP, *D = lse + kT;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bh = blockIdx.x % a.BH, i0 = (q_tiles - 1 - int64_t(blockIdx.x) / a.BH) * kT;
  load_tile<H>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E);
  load_tile<H>(gos, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev);
  load_row_stats(lse, D, a, bh, i0);
  float gq[4][NB] = {};
  const int64_t jend = a.causal ? min(a.S, i0 + kT) : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kT) {
    __syncthreads();
    load_tile<H>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E);
    load_tile<H>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
    __syncthreads();
    float qk[4][4] = {}, dv[4][4] = {};
    tile_dots<H>(qk, qs, ks, ty, tx);
    tile_dots<H>(dv, gos, vs, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int ir = ty + 16 * r;
        float pz, ds;
        grads_at(a, bh, i0 + ir, j0 + tx + 16 * c, qk[r][c], dv[r][c], lse[ir], D[ir], pz, ds);
        dss[ir * kSP + tx + 16 * c] = ds;
      }
    __syncthreads();
    tile_product<H>(gq, dss, ks, ty, tx);
  }
  store_rows<H>(a.gq + bh * a.L * a.E, gq, i0, a.L, a.E, ty, tx);
}

// dk and dv of 64 keys: dk_j = sum_i ds_ij q_i, dv_j = sum_i z_ij p_ij do_i over the query tiles
template <int H>
__global__ void __launch_bounds__(kThreads) backward_kv_kernel(Args<float> a) {
  extern __shared__ float sm[];
  constexpr int P = H + 1, NB = H / 16;
  float *ks = sm, *vs = ks + kT * P, *qs = vs + kT * P, *gos = qs + kT * P;
  float *pzt = gos + kT * P, *dst = pzt + kT * kSP, *lse = dst + kT * kSP, *D = lse + kT;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  // the first key tiles first: under a causal mask they have the most queries
  const int64_t bh = blockIdx.x % a.BH, j0 = int64_t(blockIdx.x) / a.BH * kT;
  load_tile<H>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E);
  load_tile<H>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
  float gk[4][NB] = {}, gv[4][NB] = {};
  for (int64_t i0 = a.causal ? j0 : 0; i0 < a.L; i0 += kT) {
    __syncthreads();
    load_tile<H>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E);
    load_tile<H>(gos, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev);
    load_row_stats(lse, D, a, bh, i0);
    __syncthreads();
    // transposed: rows are keys ty + 16 r, columns queries tx + 16 c
    float kq[4][4] = {}, vd[4][4] = {};
    tile_dots<H>(kq, ks, qs, ty, tx);
    tile_dots<H>(vd, vs, gos, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int jr = ty + 16 * r, ic = tx + 16 * c;
        float pz, ds;
        grads_at(a, bh, i0 + ic, j0 + jr, kq[r][c], vd[r][c], lse[ic], D[ic], pz, ds);
        pzt[jr * kSP + ic] = pz;
        dst[jr * kSP + ic] = ds;
      }
    __syncthreads();
    tile_product<H>(gv, pzt, gos, ty, tx);
    tile_product<H>(gk, dst, qs, ty, tx);
  }
  store_rows<H>(a.gk + bh * a.S * a.E, gk, j0, a.S, a.E, ty, tx);
  store_rows<H>(a.gv + bh * a.S * a.Ev, gv, j0, a.S, a.Ev, ty, tx);
}

size_t smem_optin() {
  int device = 0, bytes = 0;
  check(cudaGetDevice(&device), "scaled_dot_product_attention", "cudaGetDevice");
  check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "scaled_dot_product_attention", "cudaDeviceGetAttribute");
  return size_t(bytes);
}

geometry::AttentionTiles plan(const Args<float>& a) {
  return geometry::attention_tiles(a.BH, a.L, a.S, a.E, a.Ev, smem_optin());
}

// Launches kernel with `smem` bytes of dynamic shared memory, allowing it past 48 KiB first
template <typename Kernel, typename... A>
void launch(Context& c, Kernel kernel, int64_t blocks, size_t smem, const char* op, A... args) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), op,
        "cudaFuncSetAttribute");
  kernel<<<unsigned(blocks), kThreads, smem, c.stream>>>(args...);
  check_launch(op);
}

template <int H>
void forward_as(Context& c, const Args<float>& a, const geometry::AttentionTiles& t) {
  launch(c, forward_kernel<H>, t.forward_blocks, t.forward_smem, "scaled_dot_product_attention", a, t.q_tiles);
}

template <int H>
void backward_as(Context& c, const Args<float>& a, const geometry::AttentionTiles& t) {
  const char* op = "scaled_dot_product_attention_backward";
  launch(c, backward_q_kernel<H>, t.backward_q_blocks, t.backward_q_smem, op, a, t.q_tiles);
  launch(c, backward_kv_kernel<H>, t.backward_kv_blocks, t.backward_kv_smem, op, a);
}

}  // namespace

bool forward_tiles(Context& c, const Args<float>& a) {
  const geometry::AttentionTiles t = plan(a);
  switch (t.head) {
    case 32: forward_as<32>(c, a, t); return true;
    case 64: forward_as<64>(c, a, t); return true;
    case 128: forward_as<128>(c, a, t); return true;
    default: return false;
  }
}

bool backward_tiles(Context& c, const Args<float>& a) {
  const geometry::AttentionTiles t = plan(a);
  switch (t.head) {
    case 32: backward_as<32>(c, a, t); return true;
    case 64: backward_as<64>(c, a, t); return true;
    case 128: backward_as<128>(c, a, t); return true;
    default: return false;
  }
}

}  // namespace reel::cuda::attention
