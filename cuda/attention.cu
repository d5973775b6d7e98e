// Scaled dot-product attention on CUDA: the CPU's algorithm (cpu/attention.cpp) in its
// simplest GPU form, f32 and f64. A warp per row, grid-stride over rows:
//   forward:  a warp per query row walks the keys 32 at a time, lane t scoring key
//             j0 + t (a full dot over E), then the warp rescales the running output row
//             (online softmax: running max m, running sum l) and adds the 32 weighted
//             value rows, the weights passed through shared memory. Writes o and lse only.
//   backward: D_i = do_i . o_i (a warp per row); dq with a warp per query row, dk and dv
//             with a warp per key row, each recomputing p_ij = e^(s_ij - lse_i) itself:
//             no atomics, nothing of size L x S.
// Dropout factors come from the same Philox numbers as the CPU's (element (bh L + i) S + j
// of a uniform fill), so both devices drop the same entries.
// Floor: this is the straightforward kernel (scores from global memory, no tensor cores);
// it is correct and O(L) in memory, not tuned. float32 goes to the tiled kernels
// (attention_tiled.cu) unless REEL_CUDA_ATTENTION=rows; float64 and wide heads stay here.
#include <cstdlib>

#include "attention.cuh"
#include "internal/launch_geometry.h"

namespace reel::cuda {
namespace {

using attention::Args;
using attention::dropout_factor;
using attention::kAll;
using attention::masked;
constexpr int kWarps = kThreads / 32;

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(kAll, v, o));
  return v;
}
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// scale q_i . k_j + mask, -inf where masked (causal or a false boolean)
template <typename T>
__device__ T score(const Args<T>& a, int64_t bh, int64_t i, int64_t j) {
  if (a.causal && j > i) return -INFINITY;
  return masked(a, bh, i, j, a.scale * dot(a.q + (bh * a.L + i) * a.E, a.k + (bh * a.S + j) * a.E, a.E));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) forward_rows(Args<T> a) {
  __shared__ T wbuf[kWarps][32];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + w; row < a.BH * a.L; row += int64_t(gridDim.x) * kWarps) {
    const int64_t bh = row / a.L, i = row % a.L;
    T* o = a.out + row * a.Ev;
    for (int64_t e = lane; e < a.Ev; e += 32) o[e] = 0;
    T m = -INFINITY, l = 0;
    const int64_t jend = a.causal ? min(a.S, i + 1) : a.S;
    for (int64_t j0 = 0; j0 < jend; j0 += 32) {
      const int64_t j = j0 + lane;
      const T s = j < jend ? score(a, bh, i, j) : T(-INFINITY);
      const T mt = fmax(warp_max(s), m);
      if (mt == T(-INFINITY)) continue;  // every key so far masked (the same on all lanes)
      const T alpha = exp(m - mt);
      const T p = s == T(-INFINITY) ? T(0) : exp(s - mt);
      l = l * alpha + warp_sum(p);
      m = mt;
      wbuf[w][lane] = j < jend ? p * dropout_factor(a, bh, i, j) : T(0);
      __syncwarp();
      const int64_t n = min(int64_t(32), jend - j0);
      for (int64_t e = lane; e < a.Ev; e += 32) {
        T acc = o[e] * alpha;
        for (int t = 0; t < n; ++t) acc += wbuf[w][t] * a.v[(bh * a.S + j0 + t) * a.Ev + e];
        o[e] = acc;
      }
      __syncwarp();
    }
    if (l == T(0)) {
      if (lane == 0) a.lse_out[row] = -INFINITY;
      continue;
    }
    const T inv = T(1) / l;
    for (int64_t e = lane; e < a.Ev; e += 32) o[e] *= inv;
    if (lane == 0) a.lse_out[row] = m + ::log(l);
  }
}

// D_i = do_i . o_i
template <typename T>
__global__ void __launch_bounds__(kThreads) row_dots(Args<T> a, T* D) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + w; row < a.BH * a.L; row += int64_t(gridDim.x) * kWarps) {
    T s = 0;
    for (int64_t e = lane; e < a.Ev; e += 32) s += a.go[row * a.Ev + e] * a.o[row * a.Ev + e];
    s = warp_sum(s);
    if (lane == 0) D[row] = s;
  }
}

// p_ij, z_ij and ds_ij = scale p_ij (z_ij do_i . v_j - D_i) for one (i, j)
template <typename T>
__device__ void grads_of(const Args<T>& a, int64_t bh, int64_t i, int64_t j, T& pz, T& ds) {
  pz = 0;
  ds = 0;
  const T lse = a.lse[bh * a.L + i];
  if (lse == T(-INFINITY)) return;
  const T s = score(a, bh, i, j);
  if (s == T(-INFINITY)) return;
  const T p = exp(s - lse), z = dropout_factor(a, bh, i, j);
  const T dp = z == T(0) ? T(0) : z * dot(a.go + (bh * a.L + i) * a.Ev, a.v + (bh * a.S + j) * a.Ev, a.Ev);
  pz = p * z;
  ds = a.scale * p * (dp - a.D[bh * a.L + i]);
}

// dq_i = sum_j ds_ij k_j, a warp per query row
template <typename T>
__global__ void __launch_bounds__(kThreads) backward_q(Args<T> a) {
  __shared__ T dbuf[kWarps][32];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + w; row < a.BH * a.L; row += int64_t(gridDim.x) * kWarps) {
    const int64_t bh = row / a.L, i = row % a.L;
    T* gq = a.gq + row * a.E;
    for (int64_t e = lane; e < a.E; e += 32) gq[e] = 0;
    const int64_t jend = a.causal ? min(a.S, i + 1) : a.S;
    for (int64_t j0 = 0; j0 < jend; j0 += 32) {
      T pz = 0, ds = 0;
      if (j0 + lane < jend) grads_of(a, bh, i, j0 + lane, pz, ds);
      dbuf[w][lane] = ds;
      __syncwarp();
      const int64_t n = min(int64_t(32), jend - j0);
      for (int64_t e = lane; e < a.E; e += 32) {
        T acc = gq[e];
        for (int t = 0; t < n; ++t) acc += dbuf[w][t] * a.k[(bh * a.S + j0 + t) * a.E + e];
        gq[e] = acc;
      }
      __syncwarp();
    }
  }
}

// dk_j = sum_i ds_ij q_i, dv_j = sum_i z_ij p_ij do_i, a warp per key row
template <typename T>
__global__ void __launch_bounds__(kThreads) backward_kv(Args<T> a) {
  __shared__ T dbuf[kWarps][32], pbuf[kWarps][32];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + w; row < a.BH * a.S; row += int64_t(gridDim.x) * kWarps) {
    const int64_t bh = row / a.S, j = row % a.S;
    T* gk = a.gk + row * a.E;
    T* gv = a.gv + row * a.Ev;
    for (int64_t e = lane; e < a.E; e += 32) gk[e] = 0;
    for (int64_t e = lane; e < a.Ev; e += 32) gv[e] = 0;
    for (int64_t i0 = a.causal ? min(j, a.L) : 0; i0 < a.L; i0 += 32) {
      T pz = 0, ds = 0;
      if (i0 + lane < a.L) grads_of(a, bh, i0 + lane, j, pz, ds);
      dbuf[w][lane] = ds;
      pbuf[w][lane] = pz;
      __syncwarp();
      const int64_t n = min(int64_t(32), a.L - i0);
      for (int64_t e = lane; e < a.E; e += 32) {
        T acc = gk[e];
        for (int t = 0; t < n; ++t) acc += dbuf[w][t] * a.q[(bh * a.L + i0 + t) * a.E + e];
        gk[e] = acc;
      }
      for (int64_t e = lane; e < a.Ev; e += 32) {
        T acc = gv[e];
        for (int t = 0; t < n; ++t) acc += pbuf[w][t] * a.go[(bh * a.L + i0 + t) * a.Ev + e];
        gv[e] = acc;
      }
      __syncwarp();
    }
  }
}

template <typename T>
Args<T> args_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& mask_offsets,
                const AttentionParams& p) {
  Args<T> a{};
  a.q = static_cast<const T*>(q.data_ptr());
  a.k = static_cast<const T*>(k.data_ptr());
  a.v = static_cast<const T*>(v.data_ptr());
  a.BH = q.size(0);
  a.L = q.size(1);
  a.S = k.size(1);
  a.E = q.size(2);
  a.Ev = v.size(2);
  if (mask.defined()) {
    a.mask = static_cast<const char*>(mask.data_ptr());
    a.mask_offsets = static_cast<const int64_t*>(mask_offsets.data_ptr());
    a.mask_si = mask.stride(-2);
    a.mask_sj = mask.stride(-1);
    a.mask_esize = int64_t(mask.element_size());
    a.mask_bool = mask.dtype() == DType::boolean;
  }
  a.causal = p.causal;
  a.scale = T(p.scale);
  a.dropout_p = p.dropout_p;
  a.seed = p.seed;
  a.offset = p.offset;
  return a;
}

// REEL_CUDA_ATTENTION (read once): "tiles" (the default since the H200 measured them
// correct, sanitizer-clean and 7-20x faster, 2026-11-28) takes the tiled float32 kernels
// where they serve the shape, "rows" these kernels always; "vector" the tiles with 16-byte
// shared-memory reads (attention_vector.cu), not yet measured, else the tiles; "mma" the
// tensor cores in 3xTF32 (attention_mma.cu), not yet measured, else the tiles
geometry::AttentionKernel kernel_kind() {
  static const geometry::AttentionKernel kind =
      geometry::attention_kernel_from_env(std::getenv("REEL_CUDA_ATTENTION"), geometry::AttentionKernel::tiles);
  if (kind == geometry::AttentionKernel::invalid)
    throw Error(choice_message("scaled_dot_product_attention", "REEL_CUDA_ATTENTION", geometry::kAttentionKernels,
                               std::getenv("REEL_CUDA_ATTENTION")));
  return kind;
}

// the float32 paths in order of preference; false: the row kernels
bool forward_fast(Context& c, const Args<float>& a) {
  const geometry::AttentionKernel kind = kernel_kind();
  if (kind == geometry::AttentionKernel::vector && attention::forward_vector(c, a)) return true;
  if (kind == geometry::AttentionKernel::mma && attention::forward_mma(c, a)) return true;
  return kind != geometry::AttentionKernel::rows && attention::forward_tiles(c, a);
}
bool backward_fast(Context& c, const Args<float>& a) {
  const geometry::AttentionKernel kind = kernel_kind();
  if (kind == geometry::AttentionKernel::vector && attention::backward_vector(c, a)) return true;
  if (kind == geometry::AttentionKernel::mma && attention::backward_mma(c, a)) return true;
  return kind != geometry::AttentionKernel::rows && attention::backward_tiles(c, a);
}

}  // namespace

void CudaBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& mask, const Tensor& mask_offsets,
                                    const AttentionParams& p) {
  const char* op = "scaled_dot_product_attention";
  expect_here(op, {&out, &lse, &q, &k, &v, &mask, &mask_offsets});
  if (out.numel() == 0) return;
  Context& c = ctx();
  dispatch_float(q.dtype(), op, [&]<typename T>() {
    Args<T> a = args_of<T>(q, k, v, mask, mask_offsets, p);
    a.out = static_cast<T*>(out.data_ptr());
    a.lse_out = static_cast<T*>(lse.data_ptr());
    if constexpr (std::is_same_v<T, float>) {
      if (forward_fast(c, a)) return;
    }
    forward_rows<T><<<c.grid_for(a.BH * a.L, kWarps), kThreads, 0, c.stream>>>(a);
    check_launch(op);
  });
}

void CudaBackend::attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go,
                                     const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, const Tensor& mask, const Tensor& mask_offsets,
                                     const AttentionParams& p) {
  const char* op = "scaled_dot_product_attention_backward";
  expect_here(op, {&gq, &gk, &gv, &go, &q, &k, &v, &out, &lse, &mask, &mask_offsets});
  Context& c = ctx();
  dispatch_float(q.dtype(), op, [&]<typename T>() {
    Args<T> a = args_of<T>(q, k, v, mask, mask_offsets, p);
    Tensor D = scratch(c, {std::max<int64_t>(a.BH * a.L, 1)}, q.dtype());
    a.o = static_cast<const T*>(out.data_ptr());
    a.go = static_cast<const T*>(go.data_ptr());
    a.lse = static_cast<const T*>(lse.data_ptr());
    a.D = static_cast<const T*>(D.data_ptr());
    a.gq = static_cast<T*>(gq.data_ptr());
    a.gk = static_cast<T*>(gk.data_ptr());
    a.gv = static_cast<T*>(gv.data_ptr());
    if (a.BH * a.L > 0) {
      row_dots<T><<<c.grid_for(a.BH * a.L, kWarps), kThreads, 0, c.stream>>>(a, static_cast<T*>(D.data_ptr()));
      check_launch(op);
    }
    if constexpr (std::is_same_v<T, float>) {
      if (backward_fast(c, a)) return;
    }
    if (a.BH * a.L > 0) {
      backward_q<T><<<c.grid_for(a.BH * a.L, kWarps), kThreads, 0, c.stream>>>(a);
      check_launch(op);
    }
    if (a.BH * a.S > 0) {
      backward_kv<T><<<c.grid_for(a.BH * a.S, kWarps), kThreads, 0, c.stream>>>(a);
      check_launch(op);
    }
  });
}

}  // namespace reel::cuda
