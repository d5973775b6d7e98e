// Scaled dot-product attention in float32 on the tensor cores (REEL_CUDA_ATTENTION=mma; not
// the default until a GPU has measured it): FlashAttention-2's schedule, as the scalar tiles
// (attention_tiled.cu) run it, with every product a warp's mma.sync m16n8k8 in 3xTF32
// (cuda/internal/mma_fragments.h: each operand split into two TF32 parts, three products, so
// the results are float32's up to rounding, not bit-equal to the tiles'). A block of R / 16
// warps owns R (32 or 64) query rows of one head, 16 a warp, and streams the keys 64 at a
// time through shared memory (q, k, v row-major [r][head + 4]); a warp holds its 16 x 64
// scores and its 16 x head output as C fragments, does the online softmax on them with quad
// shuffles and feeds the probabilities to P V as A operands without a shuffle (the relabelled
// keys). Masks, causal and dropout follow attention.cuh's rules, element by element, as the
// tiles do. The backward (dq, then dk and dv, the same recomputation as the tiles) is
// attention_mma_backward.cu. Written for the SIMT tiles' limit: they reach a quarter of the
// float32 FMA peak, held by shared-memory loads per FMA, where a TF32 mma does 1024 products
// for 6 shared loads a lane.
#include "attention_mma.cuh"

namespace reel::cuda::attention {
namespace mma_tiles {
namespace {

namespace frag = reel::cuda::mma;

// The forward: o and lse of R query rows, online softmax over the key tiles. Bound:
// tensor-core throughput (3 mma a product, 2 x 16 x 64 x head multiply-adds a warp a key tile)
// against the shared-memory loads of k and v fragments (2 a lane an mma triple).
template <int H, int R>
__global__ void __launch_bounds__(2 * R) forward_kernel(Args<float> a, int64_t q_tiles) {
  extern __shared__ float4 sm4[];
  constexpr int P = H + 4, NO = H / 8;
  float *qs = reinterpret_cast<float*>(sm4), *ks = qs + R * P, *vs = ks + kT * P;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const geometry::AttentionBlock blk = geometry::attention_query_block(blockIdx.x, a.BH, q_tiles, R);
  const int64_t bh = blk.bh, i0 = blk.r0, iw = i0 + frag::kWarpRows * w;  // the block's, the warp's first row
  load_rows<H>(qs, a.q + bh * a.L * a.E, i0, a.L, a.E, R);
  const float* qw = qs + frag::kWarpRows * w * P;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[NO][4] = {};
  const int64_t jend = a.causal ? min(a.S, i0 + R) : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kT) {
    __syncthreads();  // the last tile's k and v are read
    load_rows<H>(ks, a.k + bh * a.S * a.E, j0, a.S, a.E, kT);
    load_rows<H>(vs, a.v + bh * a.S * a.Ev, j0, a.S, a.Ev, kT);
    __syncthreads();
    float s[kNT][4] = {};
    frag::xyT<DeviceOps, kNT, H>(s, qw, P, ks, P, lane);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t i = iw + frag::c_row(lane, r), j = j0 + 8 * nt + frag::c_col(lane, r);
        s[nt][r] = (i < a.L && j < a.S) ? masked(a, bh, i, j, a.scale * s[nt][r]) : -INFINITY;
      }
    frag::online_softmax<DeviceOps>(s, m, l, o);
    if (a.dropout_p > 0)  // the sums above are before dropout, as the tiles' and the rows'
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          if (s[nt][r] != 0.f)
            s[nt][r] *= dropout_factor(a, bh, iw + frag::c_row(lane, r), j0 + 8 * nt + frag::c_col(lane, r));
    frag::py<DeviceOps, kNT, NO>(o, s, vs, P, lane);
  }
  // a row whose every key is masked keeps o = 0 and lse = -inf, as the row kernel
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
#pragma unroll
    for (int nt = 0; nt < NO; ++nt) o[nt][2 * h] *= inv, o[nt][2 * h + 1] *= inv;
    const int64_t i = iw + frag::c_row(lane, 2 * h);
    if (frag::in_group(lane) == 0 && i < a.L) a.lse_out[bh * a.L + i] = l[h] > 0.f ? m[h] + logf(l[h]) : -INFINITY;
  }
  store_fragments<H>(a.out + bh * a.L * a.Ev, o, iw, a.L, a.Ev, lane);
}

}  // namespace
}  // namespace mma_tiles

bool forward_mma(Context& c, const Args<float>& a) {
  const geometry::AttentionMmaTiles t = mma_tiles::plan(c, a);
  return mma_tiles::with_plan(t, [&]<int H, int R>() {
    launch_tiles(c, mma_tiles::forward_kernel<H, R>, t.forward_blocks, t.threads(), t.forward_smem,
                 "scaled_dot_product_attention", a, t.q_tiles);
  });
}

}  // namespace reel::cuda::attention
