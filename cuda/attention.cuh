// What scaled_dot_product_attention's CUDA kernels share (cuda/attention.cu: the row
// kernels, any float type; cuda/attention_tiled.cu: the float32 tiles; attention_vector.cu,
// attention_mma*.cu: their variants): the arguments,
// the score's mask rules and the dropout factors. Internal to cuda/.
#pragma once
#include <cmath>

#include "../tensor/philox.h"
#include "elementwise.cuh"
#include "internal/launch_geometry.h"

namespace reel::cuda::attention {

constexpr unsigned kAll = 0xffffffffu;

template <typename T>
struct Args {
  const T *q, *k, *v, *o, *go, *lse, *D;
  T *out, *lse_out, *gq, *gk, *gv;
  int64_t BH, L, S, E, Ev;
  const char* mask;  // null: none
  const int64_t* mask_offsets;
  int64_t mask_si, mask_sj, mask_esize;
  bool mask_bool, causal;
  T scale;
  double dropout_p;
  uint64_t seed, offset;
};

// s, the scaled q_i . k_j, with the mask applied: -inf where causal hides key j from
// query i or a boolean mask is false, plus an additive mask's value
template <typename T>
__device__ __forceinline__ T masked(const Args<T>& a, int64_t bh, int64_t i, int64_t j, T s) {
  if (a.causal && j > i) return T(-INFINITY);
  if (a.mask) {
    const char* m = a.mask + (a.mask_offsets[bh] + i * a.mask_si + j * a.mask_sj) * a.mask_esize;
    if (a.mask_bool) s = *reinterpret_cast<const bool*>(m) ? s : T(-INFINITY);
    else s += *reinterpret_cast<const T*>(m);
  }
  return s;
}

// Dropout's factor for weight (i, j): element (bh L + i) S + j of the CPU's uniform fill,
// so that both devices drop the same entries
template <typename T>
__device__ __forceinline__ T dropout_factor(const Args<T>& a, int64_t bh, int64_t i, int64_t j) {
  if (a.dropout_p <= 0) return T(1);
  uint64_t idx = uint64_t((bh * a.L + i) * a.S + j);
  philox::Block b = philox::generate(a.seed, a.offset + idx / 4);
  return double(philox::to_unit(b.w[idx % 4])) >= a.dropout_p ? T(1.0 / (1.0 - a.dropout_p)) : T(0);
}

// ---- shared by the tiled kernels (attention_tiled.cu, attention_vector.cu), whose
// threads hold 4 rows each and share them with the 15 other lanes of their half-warp

// max and sum over the 16 lanes of a half-warp that share rows (lanes ty * 16 + tx)
__device__ __forceinline__ float half_max(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kAll, v, o));
  return v;
}
__device__ __forceinline__ float half_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
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

// lse_i and D_i of rows [r0, r0 + n) into shared vectors (-inf and 0 past the end), by a
// block of 4 R threads
template <int R>
__device__ __forceinline__ void load_row_stats(float* lse, float* D, const Args<float>& a, int64_t bh, int64_t r0,
                                               int n) {
  for (int t = threadIdx.x; t < n; t += 4 * R) {
    const int64_t i = r0 + t;
    lse[t] = i < a.L ? a.lse[bh * a.L + i] : -INFINITY;
    D[t] = i < a.L ? a.D[bh * a.L + i] : 0.f;
  }
}

// Launches kernel with `smem` bytes of dynamic shared memory, allowing it past 48 KiB first
template <typename Kernel, typename... A>
void launch_tiles(Context& c, Kernel kernel, int64_t blocks, int threads, size_t smem, const char* op, A... args) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), op,
        "cudaFuncSetAttribute");
  kernel<<<unsigned(blocks), threads, smem, c.stream>>>(args...);
  check_launch(op);
}

// Calls fn.template operator()<H, R>() for the plan's head bucket H (one of Heads: the
// ones a kernel family is instantiated for) and its rows a block R; false when the plan's
// head is none of them (then the row kernels run).
template <int... Heads, typename Fn>
bool with_tiles(const geometry::AttentionTiles& t, Fn&& fn) {
  auto one = [&]<int H>() {
    if (t.head != H) return false;
    t.rows == 32 ? fn.template operator()<H, 32>() : fn.template operator()<H, 64>();
    return true;
  };
  return (one.template operator()<Heads>() || ...);
}

// The tiled float32 kernels: false when they do not serve the shape (then the row
// kernels run). backward_tiles needs a.D (do_i . o_i) already written.
bool forward_tiles(Context& c, const Args<float>& a);
bool backward_tiles(Context& c, const Args<float>& a);
// The same with 16-byte shared-memory reads (attention_vector.cu, REEL_CUDA_ATTENTION=vector).
bool forward_vector(Context& c, const Args<float>& a);
bool backward_vector(Context& c, const Args<float>& a);
// On the tensor cores in 3xTF32 (attention_mma.cu, attention_mma_backward.cu, REEL_CUDA_ATTENTION=mma).
bool forward_mma(Context& c, const Args<float>& a);
bool backward_mma(Context& c, const Args<float>& a);
// REEL_CUDA_ATTENTION_ROWS (read once): 32 or 64 rows a block whatever the shape; 0 unset.
int rows_from_env();

}  // namespace reel::cuda::attention
