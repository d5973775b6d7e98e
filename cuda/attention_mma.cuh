// What the tensor-core attention kernels share (cuda/attention_mma.cu: the forward;
// cuda/attention_mma_backward.cu: dq and dk, dv; REEL_CUDA_ATTENTION=mma): the PTX behind
// mma_fragments.h's warp operations, the shared-memory tile loads and the plan. Internal to cuda/.
#pragma once
#include <cstdint>

#include "attention.cuh"
#include "internal/launch_geometry.h"
#include "internal/mma_fragments.h"

namespace reel::cuda::attention::mma_tiles {

constexpr int kT = geometry::kAttentionTile;  // the streamed side's rows
constexpr int kNT = kT / reel::cuda::mma::kN;  // a streamed tile's 8-column fragments

// The warp operations of mma_fragments.h on the tensor cores. The host pass compiles them
// too (the templates are __host__ __device__) but never calls them.
struct DeviceOps {
  // x = big + small, both TF32 (float32 bit patterns, cvt.rna: nearest, ties away)
  static __host__ __device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(big) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(small) : "f"(x - __uint_as_float(big)));
#else
    (void)x;
    big = small = 0;
#endif
  }
  // d += a b, one m16n8k8 of the warp (every lane calls it, converged)
  static __host__ __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
#endif
  }
  static __host__ __device__ __forceinline__ float shfl_xor(float v, int m) {
#if defined(__CUDA_ARCH__)
    return __shfl_xor_sync(kAll, v, m);
#else
    (void)m;
    return v;
#endif
  }
};

// rows [r0, r0 + n) of src [rows, cols] into dst [n][H + 4], zeros past either end, by the
// block's threads; 16-byte loads where src's rows are (every row of a contiguous [rows, cols]
// with cols % 4 == 0 and a 16-byte aligned start)
template <int H>
__device__ __forceinline__ void load_rows(float* dst, const float* src, int64_t r0, int64_t rows, int64_t cols,
                                          int n) {
  constexpr int P = H + 4;
  if (cols % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    for (int idx = threadIdx.x; idx < n * (H / 4); idx += blockDim.x) {
      const int r = idx / (H / 4), c = 4 * (idx % (H / 4));
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r0 + r < rows && c < cols) v = *reinterpret_cast<const float4*>(src + (r0 + r) * cols + c);
      *reinterpret_cast<float4*>(dst + r * P + c) = v;
    }
    return;
  }
  for (int idx = threadIdx.x; idx < n * H; idx += blockDim.x) {
    const int r = idx / H, c = idx % H;
    dst[r * P + c] = (r0 + r < rows && c < cols) ? src[(r0 + r) * cols + c] : 0.f;
  }
}

// the warp's C fragments acc (16 rows from r0, H columns) into out [rows, cols], inside both bounds
template <int H>
__device__ __forceinline__ void store_fragments(float* out, const float (&acc)[H / 8][4], int64_t r0, int64_t rows,
                                                int64_t cols, int lane) {
#pragma unroll
  for (int nt = 0; nt < H / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = r0 + reel::cuda::mma::c_row(lane, r);
      const int c = 8 * nt + reel::cuda::mma::c_col(lane, r);
      if (i < rows && c < cols) out[i * cols + c] = acc[nt][r];
    }
}

inline geometry::AttentionMmaTiles plan(Context& c, const Args<float>& a) {
  return geometry::attention_mma_tiles(a.BH, a.L, a.S, a.E, a.Ev, c.smem_optin, c.sm_count, c.cc_major,
                                       rows_from_env());
}

// Calls fn.template operator()<H, R>() for the plan's head H (64 or 128) and rows R (32 or 64);
// false when the plan serves nothing (then the scalar tiles run)
template <typename Fn>
bool with_plan(const geometry::AttentionMmaTiles& t, Fn&& fn) {
  auto rows = [&]<int H>() { t.rows == 32 ? fn.template operator()<H, 32>() : fn.template operator()<H, 64>(); };
  if (t.head == 64) rows.template operator()<64>();
  else if (t.head == 128) rows.template operator()<128>();
  else return false;
  return true;
}

}  // namespace reel::cuda::attention::mma_tiles
