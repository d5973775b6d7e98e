// The backward of the tensor-core attention (REEL_CUDA_ATTENTION=mma; the forward and the
// layout are attention_mma.cu's): the scalar tiles' two kernels (attention_tiled.cu) with
// every product a warp's mma.sync m16n8k8 in 3xTF32 (cuda/internal/mma_fragments.h). dq: a
// block owns R query rows, 16 a warp, and streams the keys; dk, dv: a block owns R keys, 16 a
// warp, and streams the queries, computing the transposed scores (keys as rows) so that P^T
// and dS^T are C fragments and feed dV = P^T dO and dK = dS^T Q as A operands, the streamed
// q and do tiles read as relabelled B operands. Each kernel recomputes the scores from the
// forward's lse (natural log) and D = rowsum(do * o): no atomics, sums in a fixed order.
#include "attention_mma.cuh"

namespace reel::cuda::attention {
namespace mma_tiles {
namespace {

namespace frag = reel::cuda::mma;

// dq of R query rows: dq_i = sum_j ds_ij k_j over the key tiles. Bound: tensor-core
// throughput, three products a key tile (q k^T, do v^T, ds k), 3 mma each.
template <int H, int R>
__global__ void __launch_bounds__(2 * R) backward_q_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float4 sm4[];
  constexpr int P = H + 4, NO = H / 8;
  float *qs = reinterpret_cast<float*>(sm4), *gos = qs + R * P, *ks = gos + R * P, *vs = ks + kT * P;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const geometry::AttentionBlock blk = geometry::attention_query_block(blockIdx.x, a.BH, q_tiles, R);
  const int64_t bh = blk.bh, i0 = blk.r0, iw = i0 + frag::kWarpRows * w;
  load_rows<H>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E, R);
  load_rows<H>(gos, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev, R);
  const float *qw = qs + frag::kWarpRows * w * P, *gow = gos + frag::kWarpRows * w * P;
  float lse[2], D[2];  // of the lane's rows g and g + 8
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = iw + frag::c_row(lane, 2 * h);
    lse[h] = i < a.L ? a.lse[bh * a.L + i] : -INFINITY;
    D[h] = i < a.L ? a.D[bh * a.L + i] : 0.f;
  }
  float gq[NO][4] = {};
  const int64_t jend = a.causal ? min(a.S, i0 + R) : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kT) {
    __syncthreads();
    load_rows<H>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E, kT);
    load_rows<H>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev, kT);
    __syncthreads();
    float s[kNT][4] = {}, dp[kNT][4] = {};
    frag::xyT<DeviceOps, kNT, H>(s, qw, P, ks, P, lane);
    frag::xyT<DeviceOps, kNT, H>(dp, gow, P, vs, P, lane);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float pz;
        grads_at(a, bh, iw + frag::c_row(lane, r), j0 + 8 * nt + frag::c_col(lane, r), s[nt][r], dp[nt][r],
                 lse[r / 2], D[r / 2], pz, s[nt][r]);
      }
    frag::py<DeviceOps, kNT, NO>(gq, s, ks, P, lane);
  }
  store_fragments<H>(a.gq + bh * a.L * a.E, gq, iw, a.L, a.E, lane);
}

// dk and dv of R keys: dk_j = sum_i ds_ij q_i, dv_j = sum_i z_ij p_ij do_i over the query
// tiles, each in passes of QP queries. Bound: tensor-core throughput, four products a query
// tile (k q^T, v do^T, (p z)^T do, ds^T q), 3 mma each.
template <int H, int R>
__global__ void __launch_bounds__(2 * R) backward_kv_kernel(Args<float> a) {
  extern __shared__ float4 sm4[];
  constexpr int P = H + 4, NO = H / 8, QP = geometry::attention_mma_kv_pass(H), NP = QP / frag::kN;
  float *ks = reinterpret_cast<float*>(sm4), *vs = ks + R * P, *qs = vs + R * P, *gos = qs + kT * P;
  float *lse = gos + kT * P, *D = lse + kT;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const geometry::AttentionBlock blk = geometry::attention_key_block(blockIdx.x, a.BH, R);
  const int64_t bh = blk.bh, j0 = blk.r0, jw = j0 + frag::kWarpRows * w;  // the block's, the warp's first key
  load_rows<H>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E, R);
  load_rows<H>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev, R);
  const float *kw = ks + frag::kWarpRows * w * P, *vw = vs + frag::kWarpRows * w * P;
  float gk[NO][4] = {}, gv[NO][4] = {};
  for (int64_t i0 = a.causal ? j0 : 0; i0 < a.L; i0 += kT) {
    __syncthreads();
    load_rows<H>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E, kT);
    load_rows<H>(gos, a.go + bh * a.L * a.Ev, i0, a.L, a.Ev, kT);
    for (int t = threadIdx.x; t < kT; t += blockDim.x) {
      const int64_t i = i0 + t;
      lse[t] = i < a.L ? a.lse[bh * a.L + i] : -INFINITY;
      D[t] = i < a.L ? a.D[bh * a.L + i] : 0.f;
    }
    __syncthreads();
#pragma unroll 1
    for (int q0 = 0; q0 < kT; q0 += QP) {
      // causal: every query of the pass before the warp's first key sees none of its keys
      if (a.causal && i0 + q0 + QP - 1 < jw) continue;
      // transposed: rows are the warp's keys, columns the pass's queries
      float st[NP][4] = {}, dpt[NP][4] = {};
      frag::xyT<DeviceOps, NP, H>(st, kw, P, qs + q0 * P, P, lane);
      frag::xyT<DeviceOps, NP, H>(dpt, vw, P, gos + q0 * P, P, lane);
#pragma unroll
      for (int nt = 0; nt < NP; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int ic = q0 + 8 * nt + frag::c_col(lane, r);
          grads_at(a, bh, i0 + ic, jw + frag::c_row(lane, r), st[nt][r], dpt[nt][r], lse[ic], D[ic], st[nt][r],
                   dpt[nt][r]);
        }
      frag::py<DeviceOps, NP, NO>(gv, st, gos + q0 * P, P, lane);
      frag::py<DeviceOps, NP, NO>(gk, dpt, qs + q0 * P, P, lane);
    }
  }
  store_fragments<H>(a.gk + bh * a.S * a.E, gk, jw, a.S, a.E, lane);
  store_fragments<H>(a.gv + bh * a.S * a.Ev, gv, jw, a.S, a.Ev, lane);
}

}  // namespace
}  // namespace mma_tiles

bool backward_mma(Context& c, const Args<float>& a) {
  const geometry::AttentionMmaTiles t = mma_tiles::plan(c, a);
  const char* op = "scaled_dot_product_attention_backward";
  return mma_tiles::with_plan(t, [&]<int H, int R>() {
    launch_tiles(c, mma_tiles::backward_q_kernel<H, R>, t.backward_q_blocks, t.threads(), t.backward_q_smem, op, a,
                 t.q_tiles);
    launch_tiles(c, mma_tiles::backward_kv_kernel<H, R>, t.backward_kv_blocks, t.threads(), t.backward_kv_smem, op,
                 a);
  });
}

}  // namespace reel::cuda::attention
