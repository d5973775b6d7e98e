// Uniform and normal fills from Philox4x32-10 (tensor/philox.h, the same code the CPU
// runs): element i of a fill is a function of (seed, offset, i) alone, so the same
// seed gives the same tensor on the CPU and the GPU.
//
// Exactness: uniforms match the CPU bit for bit (integer Philox, then lo + scale * u
// with the multiply and add rounded separately, as the CPU computes them without FMA
// contraction). Normals go through logf/cosf/sinf, whose CUDA versions may differ from
// glibc's in the last bit or two.
// Layout: contiguous out. Launch shape: one thread per Philox block (4 uniforms or 2
// normals), 256 threads, grid-stride. Floor: memory bandwidth on an H100 (ten rounds of
// integer multiplies per 16 bytes written stay below it).
#include "../tensor/philox.h"
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

__device__ __forceinline__ float mad_rn(float lo, float scale, float u) { return __fadd_rn(lo, __fmul_rn(scale, u)); }
__device__ __forceinline__ double mad_rn(double lo, double scale, double u) {
  return __dadd_rn(lo, __dmul_rn(scale, u));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    uniform_kernel(T* out, int64_t n, T lo, T scale, uint64_t seed, uint64_t offset) {
  int64_t blocks = (n + 3) / 4;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks; j += int64_t(gridDim.x) * blockDim.x) {
    philox::Block b = philox::generate(seed, offset + uint64_t(j));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int64_t i = 4 * j + k;
      if (i < n) out[i] = mad_rn(lo, scale, T(philox::to_unit(b.w[k])));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    normal_kernel(T* out, int64_t n, T mean, T std, uint64_t seed, uint64_t offset) {
  int64_t blocks = (n + 1) / 2;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks; j += int64_t(gridDim.x) * blockDim.x) {
    // elements 2j and 2j + 1 share block j, as on the CPU
    philox::NormalPair pr = philox::normal_pair(seed, offset + uint64_t(j));
    int64_t i = 2 * j;
    out[i] = mad_rn(mean, std, T(pr.even));
    if (i + 1 < n) out[i + 1] = mad_rn(mean, std, T(pr.odd));
  }
}

void expect_contiguous(const Tensor& out, const char* op) {
  if (!out.is_contiguous()) throw Error(std::string(op) + ": expected a contiguous tensor");
}

}  // namespace

void CudaBackend::fill_uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  expect_here("uniform_", {&out});
  Context& c = ctx();
  dispatch_float(out.dtype(), "uniform_", [&]<typename T>() {
    expect_contiguous(out, "uniform_");
    int64_t n = out.numel();
    if (n == 0) return;
    uniform_kernel<T><<<c.grid_for((n + 3) / 4, kThreads), kThreads, 0, c.stream>>>(
        static_cast<T*>(out.data_ptr()), n, T(low), T(high - low), seed, offset);
    check_launch("uniform_");
  });
}

void CudaBackend::fill_normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  expect_here("normal_", {&out});
  Context& c = ctx();
  dispatch_float(out.dtype(), "normal_", [&]<typename T>() {
    expect_contiguous(out, "normal_");
    int64_t n = out.numel();
    if (n == 0) return;
    normal_kernel<T><<<c.grid_for((n + 1) / 2, kThreads), kThreads, 0, c.stream>>>(
        static_cast<T*>(out.data_ptr()), n, T(mean), T(std), seed, offset);
    check_launch("normal_");
  });
}

}  // namespace reel::cuda
