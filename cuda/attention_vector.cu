// Scaled dot-product attention in float32, the tiles of attention_tiled.cu with every
// shared-memory read 16 bytes wide (REEL_CUDA_ATTENTION=vector; not the default until a GPU
// has measured it). The same blocks, grid, rules and sums in the same order per thread;
// what changes is the layout: the score products read both operands transposed
// ([head][rows + 4]), so a thread's 4 rows and 4 columns come in two float4 loads a step of
// the head dim (three shared-memory wavefronts for 16 FMAs, where the scalar tiles take
// eight); the weighted sums read the weights row-major [rows][68] and the streamed tile
// row-major [64][head + 4], four keys a float4. A thread owns rows 4 ty..4 ty + 3, score
// columns 4 tx..4 tx + 3, head columns 64 g + 4 tx..+3.
// Bound: compute (the tiles' FMAs), written against the float32 FMA peak; the scalar
// tiles measured a quarter of it on an H200, held by their shared-memory loads.
#include "attention.cuh"
#include "internal/launch_geometry.h"

namespace reel::cuda::attention {
namespace {

constexpr int kT = geometry::kAttentionTile;
constexpr int kTP = kT + 4;  // a streamed transposed tile's or the weights' padded row

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}
// head column of a thread's b-th output value
__device__ __forceinline__ int col(int b, int tx) { return 64 * (b / 4) + 4 * tx + b % 4; }

// rows [r0, r0 + N) of src [rows, cols] transposed into dst [H][N + 4]: a thread takes one
// column and 4 consecutive rows (one float4 store; lanes on consecutive columns read
// consecutive addresses)
template <int H, int N, int R>
__device__ __forceinline__ void load_t(float* dst, const float* src, int64_t r0, int64_t rows, int64_t cols) {
  for (int idx = threadIdx.x; idx < H * (N / 4); idx += 4 * R) {
    const int c = idx % H, k = idx / H;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = r0 + 4 * k + i;
      v[i] = (r < rows && c < cols) ? src[r * cols + c] : 0.f;
    }
    st4(dst + c * (N + 4) + 4 * k, v[0], v[1], v[2], v[3]);
  }
}

// rows [r0, r0 + 64) of src [rows, cols] row-major into dst [64][H + 4]
template <int H, int R>
__device__ __forceinline__ void load_n(float* dst, const float* src, int64_t r0, int64_t rows, int64_t cols) {
  for (int idx = threadIdx.x; idx < kT * H; idx += 4 * R) {
    const int r = idx / H, c = idx % H;
    dst[r * (H + 4) + c] = (r0 + r < rows && c < cols) ? src[(r0 + r) * cols + c] : 0.f;
  }
}

// acc[r][c] += sum_d xt[d][4 ty + r] yt[d][4 tx + c]: own tile xt [H][R + 4], streamed yt [H][68]
template <int H, int R>
__device__ __forceinline__ void dots(float (&acc)[4][4], const float* xt, const float* yt, int ty, int tx) {
#pragma unroll 8
  for (int d = 0; d < H; ++d) {
    const float4 xa = ld4(xt + d * (R + 4) + 4 * ty), yb = ld4(yt + d * kTP + 4 * tx);
    const float x[4] = {xa.x, xa.y, xa.z, xa.w}, y[4] = {yb.x, yb.y, yb.z, yb.w};
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(x[r], y[c], acc[r][c]);
  }
}

// acc[r][b] += sum_j w[4 ty + r][j] y[j][col(b)]: weights [R][68], streamed y [64][H + 4]
template <int H, int R>
__device__ __forceinline__ void weighted(float (&acc)[4][H / 16], const float* w, const float* y, int ty, int tx) {
#pragma unroll 2
  for (int j = 0; j < kT; j += 4) {
    float wv[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float4 t = ld4(w + (4 * ty + r) * kTP + j);
      wv[r][0] = t.x, wv[r][1] = t.y, wv[r][2] = t.z, wv[r][3] = t.w;
    }
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int g = 0; g < H / 64; ++g) {
        const float4 t = ld4(y + (j + jj) * (H + 4) + 64 * g + 4 * tx);
        const float yv[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[r][4 * g + q] = fmaf(wv[r][jj], yv[q], acc[r][4 * g + q]);
      }
  }
}

template <int H>
__device__ __forceinline__ void store_rows(float* out, const float (&acc)[4][H / 16], int64_t r0, int64_t rows,
                                           int64_t cols, int ty, int tx) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = r0 + 4 * ty + r;
    if (i >= rows) continue;
#pragma unroll
    for (int b = 0; b < H / 16; ++b)
      if (col(b, tx) < cols) out[i * cols + col(b, tx)] = acc[r][b];
  }
}

template <int H, int R>
__global__ void __launch_bounds__(4 * R) forward_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float4 sm4[];
  constexpr int NB = H / 16;
  float *qt = reinterpret_cast<float*>(sm4), *kt = qt + H * (R + 4), *vn = kt + H * kTP, *w = vn + kT * (H + 4);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bh = blockIdx.x % a.BH, i0 = (q_tiles - 1 - int64_t(blockIdx.x) / a.BH) * R;
  load_t<H, R, R>(qt, a.q + bh * a.L * a.E, i0, a.L, a.E);
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
    __syncthreads();
    load_t<H, kT, R>(kt, a.k + bh * a.S * a.E, j0, a.S, a.E);
    load_n<H, R>(vn, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
    __syncthreads();
    float s[4][4] = {};
    dots<H, R>(s, qt, kt, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + 4 * ty + r;
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t j = j0 + 4 * tx + c;
        s[r][c] = (i < a.L && j < a.S) ? masked(a, bh, i, j, a.scale * s[r][c]) : -INFINITY;
        mx = fmaxf(mx, s[r][c]);
      }
      const float mt = fmaxf(m[r], half_max(mx));
      const float alpha = m[r] == -INFINITY ? 0.f : expf(m[r] - mt);
      float sum = 0.f, p[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        p[c] = s[r][c] == -INFINITY ? 0.f : expf(s[r][c] - mt);
        sum += p[c];
        if (p[c] != 0.f) p[c] *= dropout_factor(a, bh, i, j0 + 4 * tx + c);
      }
      st4(w + (4 * ty + r) * kTP + 4 * tx, p[0], p[1], p[2], p[3]);
      l[r] = l[r] * alpha + half_sum(sum);
      m[r] = mt;
#pragma unroll
      for (int b = 0; b < NB; ++b) o[r][b] *= alpha;
    }
    __syncthreads();
    weighted<H, R>(o, w, vn, ty, tx);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
    for (int b = 0; b < NB; ++b) o[r][b] *= inv;
    const int64_t i = i0 + 4 * ty + r;
    if (tx == 0 && i < a.L) a.lse_out[bh * a.L + i] = l[r] > 0.f ? m[r] + logf(l[r]) : -INFINITY;
  }
  store_rows<H>(a.out + bh * a.L * a.Ev, o, i0, a.L, a.Ev, ty, tx);
}

template <int H, int R>
__global__ void __launch_bounds__(4 * R) backward_q_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float4 sm4[];
  constexpr int NB = H / 16;
  float *qt = reinterpret_cast<float*>(sm4), *got = qt + H * (R + 4), *kt = got + H * (R + 4), *vt = kt + H * kTP;
  float *kn = vt + H * kTP, *ds = kn + kT * (H + 4), *lse = ds + R * kTP, *D = lse + kT;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bh = blockIdx.x % a.BH, i0 = (q_tiles - 1 - int64_t(blockIdx.x) / a.BH) * R;
  load_t<H, R, R>(qt, a.q + bh * a.L * a.E, i0, a.L, a.E);
  load_t<H, R, R>(got, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev);
  load_row_stats<R>(lse, D, a, bh, i0, R);
  float gq[4][NB] = {};
  const int64_t jend = a.causal ? min(a.S, i0 + R) : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kT) {
    __syncthreads();
    load_t<H, kT, R>(kt, a.k + bh * a.S * a.E, j0, a.S, a.E);
    load_t<H, kT, R>(vt, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
    load_n<H, R>(kn, a.k + bh * a.S * a.E, j0, a.S, a.E);
    __syncthreads();
    float qk[4][4] = {}, dv[4][4] = {};
    dots<H, R>(qk, qt, kt, ty, tx);
    dots<H, R>(dv, got, vt, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int ir = 4 * ty + r;
      float pz, g[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) grads_at(a, bh, i0 + ir, j0 + 4 * tx + c, qk[r][c], dv[r][c], lse[ir], D[ir], pz, g[c]);
      st4(ds + ir * kTP + 4 * tx, g[0], g[1], g[2], g[3]);
    }
    __syncthreads();
    weighted<H, R>(gq, ds, kn, ty, tx);
  }
  store_rows<H>(a.gq + bh * a.L * a.E, gq, i0, a.L, a.E, ty, tx);
}

template <int H, int R>
__global__ void __launch_bounds__(4 * R) backward_kv_kernel(Args<float> a) {
  extern __shared__ float4 sm4[];
  constexpr int NB = H / 16;
  float *kt = reinterpret_cast<float*>(sm4), *vt = kt + H * (R + 4), *qt = vt + H * (R + 4), *got = qt + H * kTP;
  float *qn = got + H * kTP, *gon = qn + kT * (H + 4), *pzw = gon + kT * (H + 4), *dsw = pzw + R * kTP;
  float *lse = dsw + R * kTP, *D = lse + kT;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bh = blockIdx.x % a.BH, j0 = int64_t(blockIdx.x) / a.BH * R;
  load_t<H, R, R>(kt, a.k + bh * a.S * a.E, j0, a.S, a.E);
  load_t<H, R, R>(vt, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev);
  float gk[4][NB] = {}, gv[4][NB] = {};
  for (int64_t i0 = a.causal ? j0 : 0; i0 < a.L; i0 += kT) {
    __syncthreads();
    load_t<H, kT, R>(qt, a.q + bh * a.L * a.E, i0, a.L, a.E);
    load_t<H, kT, R>(got, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev);
    load_n<H, R>(qn, a.q + bh * a.L * a.E, i0, a.L, a.E);
    load_n<H, R>(gon, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev);
    load_row_stats<R>(lse, D, a, bh, i0, kT);
    __syncthreads();
    // transposed: rows are keys 4 ty + r, columns queries 4 tx + c
    float kq[4][4] = {}, vd[4][4] = {};
    dots<H, R>(kq, kt, qt, ty, tx);
    dots<H, R>(vd, vt, got, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int jr = 4 * ty + r;
      float pz[4], g[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int ic = 4 * tx + c;
        grads_at(a, bh, i0 + ic, j0 + jr, kq[r][c], vd[r][c], lse[ic], D[ic], pz[c], g[c]);
      }
      st4(pzw + jr * kTP + 4 * tx, pz[0], pz[1], pz[2], pz[3]);
      st4(dsw + jr * kTP + 4 * tx, g[0], g[1], g[2], g[3]);
    }
    __syncthreads();
    weighted<H, R>(gv, pzw, gon, ty, tx);
    weighted<H, R>(gk, dsw, qn, ty, tx);
  }
  store_rows<H>(a.gk + bh * a.S * a.E, gk, j0, a.S, a.E, ty, tx);
  store_rows<H>(a.gv + bh * a.S * a.Ev, gv, j0, a.S, a.Ev, ty, tx);
}

geometry::AttentionTiles plan(Context& c, const Args<float>& a) {
  return geometry::attention_vector_tiles(a.BH, a.L, a.S, a.E, a.Ev, c.smem_optin, c.sm_count, rows_from_env());
}

}  // namespace

bool forward_vector(Context& c, const Args<float>& a) {
  const geometry::AttentionTiles t = plan(c, a);
  return with_tiles<64, 128>(t, [&]<int H, int R>() {
    launch_tiles(c, forward_kernel<H, R>, t.forward_blocks, t.threads(), t.forward_smem, "scaled_dot_product_attention",
                 a, t.q_tiles);
  });
}

bool backward_vector(Context& c, const Args<float>& a) {
  const geometry::AttentionTiles t = plan(c, a);
  const char* op = "scaled_dot_product_attention_backward";
  return with_tiles<64, 128>(t, [&]<int H, int R>() {
    launch_tiles(c, backward_q_kernel<H, R>, t.backward_q_blocks, t.threads(), t.backward_q_smem, op, a, t.q_tiles);
    launch_tiles(c, backward_kv_kernel<H, R>, t.backward_kv_blocks, t.threads(), t.backward_kv_smem, op, a);
  });
}

}  // namespace reel::cuda::attention
