// Sorting rows and running sums/products along one dim.
//
// sort: x [R, n] contiguous. The keys are copied with every NaN made the positive
// quiet NaN and -0 made +0 (radix sorts order bit patterns: a negative NaN would
// come first, and -0 before +0, where PyTorch's comparison keeps their order), the
// positions 0..n-1 of each row beside them; cub::DeviceSegmentedRadixSort sorts the
// pairs per row (stable, as the CPU's sort), and a last kernel writes the first k
// columns: values read from x at the sorted positions (so -0 stays -0), and the positions.
// Floor: a radix sort is a few passes over the keys per 8 bits, memory-bound.
//
// cumulative: one thread per line along `dim` (the other dims' combinations), each
// walking its line in order, so the result is deterministic and matches the CPU's
// order of additions. Lines are read with a stride; the floor is memory bandwidth
// when there are many lines, and one thread's latency when there are few.
#include <cub/device/device_segmented_radix_sort.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <limits>

#include "elementwise.cuh"
#include "internal/allocator.h"

namespace reel::cuda {
namespace {

struct RowOffset {
  int64_t len;
  __host__ __device__ int64_t operator()(int64_t r) const { return r * len; }
};

// The key type a radix sort orders like T (bool sorts as its byte).
template <typename T> struct KeyOf { using type = T; };
template <> struct KeyOf<bool> { using type = uint8_t; };

template <typename T, typename K>
__global__ void __launch_bounds__(kThreads) prepare_keys(int64_t total, int64_t n, const T* x, K* keys, int64_t* pos) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    K v = K(x[i]);
    if constexpr (std::is_floating_point_v<K>) {
      if (v != v) v = std::numeric_limits<K>::quiet_NaN();
      else if (v == K(0)) v = K(0);
    }
    keys[i] = v;
    pos[i] = i % n;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) take_first(int64_t total, int64_t n, int64_t k, const T* x,
                                                       const int64_t* sorted_pos, T* values, int64_t* indices) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / k, j = i % k;
    int64_t p = sorted_pos[r * n + j];
    values[i] = x[r * n + p];
    indices[i] = p;
  }
}

template <typename T>
void sort_typed(Context& ctx, const Tensor& values, const Tensor& indices, const Tensor& x, bool descending) {
  using K = typename KeyOf<T>::type;
  const int64_t rows = x.size(0), n = x.size(1), k = values.size(1), total = rows * n;
  if (total == 0 || k == 0) return;
  if (total > std::numeric_limits<int>::max())
    throw Error("sort: " + std::to_string(total) + " elements are more than one CUDA sort takes (2^31 - 1)");
  DeviceBuffer keys_in(ctx, size_t(total) * sizeof(K)), keys_out(ctx, size_t(total) * sizeof(K));
  DeviceBuffer pos_in(ctx, size_t(total) * sizeof(int64_t)), pos_out(ctx, size_t(total) * sizeof(int64_t));
  prepare_keys<T, K><<<ctx.grid_for(total, kThreads), kThreads, 0, ctx.stream>>>(
      total, n, static_cast<const T*>(x.data_ptr()), keys_in.as<K>(), pos_in.as<int64_t>());
  check_launch("sort");
  auto begins = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowOffset{n});
  auto ends = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(1), RowOffset{n});
  auto sort = [&](void* temp, size_t& bytes) {
    if (descending)
      return cub::DeviceSegmentedRadixSort::SortPairsDescending(
          temp, bytes, keys_in.as<K>(), keys_out.as<K>(), pos_in.as<int64_t>(), pos_out.as<int64_t>(), int(total),
          int(rows), begins, ends, 0, int(sizeof(K) * 8), ctx.stream);
    return cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, keys_in.as<K>(), keys_out.as<K>(),
                                                    pos_in.as<int64_t>(), pos_out.as<int64_t>(), int(total),
                                                    int(rows), begins, ends, 0, int(sizeof(K) * 8), ctx.stream);
  };
  size_t bytes = 0;
  check(sort(nullptr, bytes), "sort", "cub::DeviceSegmentedRadixSort");
  DeviceBuffer temp(ctx, std::max<size_t>(bytes, 1));
  check(sort(temp.get(), bytes), "sort", "cub::DeviceSegmentedRadixSort");
  take_first<T><<<ctx.grid_for(rows * k, kThreads), kThreads, 0, ctx.stream>>>(
      rows * k, n, k, static_cast<const T*>(x.data_ptr()), pos_out.as<int64_t>(), static_cast<T*>(values.data_ptr()),
      static_cast<int64_t*>(indices.data_ptr()));
  check_launch("sort");
}

// The dims other than the scanned one, with both tensors' strides.
struct Lines {
  int nd = 0;
  int64_t shape[kMaxDims];
  int64_t xs[kMaxDims], os[kMaxDims];
};

template <typename T, bool Sum>
__global__ void __launch_bounds__(kThreads) scan_lines(int64_t lines, Lines g, int64_t n, int64_t xstep,
                                                       int64_t ostep, bool reverse, const T* x, T* out) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < lines; l += int64_t(gridDim.x) * blockDim.x) {
    int64_t xo = 0, oo = 0, rest = l;
    for (int d = g.nd - 1; d >= 0; --d) {
      int64_t i = rest % g.shape[d];
      rest /= g.shape[d];
      xo += i * g.xs[d];
      oo += i * g.os[d];
    }
    Acc acc = Sum ? Acc(0) : Acc(1);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = reverse ? n - 1 - j : j;
      if constexpr (Sum) acc += Acc(x[xo + i * xstep]);
      else acc *= Acc(x[xo + i * xstep]);
      out[oo + i * ostep] = T(acc);
    }
  }
}

}  // namespace

void CudaBackend::sort(const Tensor& values, const Tensor& indices, const Tensor& x, bool descending) {
  expect_here("sort", {&values, &indices, &x});
  Context& c = ctx();
  dispatch(x.dtype(), "sort", [&]<typename T>() { sort_typed<T>(c, values, indices, x, descending); });
}

void CudaBackend::cumulative(ScanOp op, const Tensor& out, const Tensor& x, int dim, bool reverse) {
  expect_here("cumulative", {&out, &x});
  Context& c = ctx();
  Lines g;
  int64_t lines = 1;
  for (int d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    g.shape[g.nd] = x.size(d);
    g.xs[g.nd] = x.strides()[d];
    g.os[g.nd] = out.strides()[d];
    ++g.nd;
    lines *= x.size(d);
  }
  const int64_t n = x.size(dim);
  if (lines == 0 || n == 0) return;
  dispatch(x.dtype(), "cumulative", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("cumulative: bool tensors cannot be summed");
    } else {
      const T* xp = static_cast<const T*>(x.data_ptr());
      T* op_ = static_cast<T*>(out.data_ptr());
      unsigned grid = c.grid_for(lines, kThreads);
      if (op == ScanOp::sum)
        scan_lines<T, true><<<grid, kThreads, 0, c.stream>>>(lines, g, n, x.strides()[dim], out.strides()[dim],
                                                              reverse, xp, op_);
      else
        scan_lines<T, false><<<grid, kThreads, 0, c.stream>>>(lines, g, n, x.strides()[dim], out.strides()[dim],
                                                               reverse, xp, op_);
      check_launch("cumulative");
    }
  });
}

}  // namespace reel::cuda
