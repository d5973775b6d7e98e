// Same-device copy with dtype conversion (any strides), fill, where and axpy.
//
// Layout: any strides on every operand (elementwise.cuh); copies of one dtype move raw
// 1/2/4/8-byte words, so the eight dtypes need four strided kernels, and a dense copy
// of one dtype is a cudaMemcpyAsync. A copy between two layouts that are transposes of
// each other (NHWC <-> NCHW: channels-last staging, contiguous_copy) goes through
// shared-memory tiles instead, where the strided kernel would read or write one useful
// element per 32-byte sector. Conversions follow the CPU bit for bit
// (f16/bf16 rounding to nearest even, NaN patterns included).
// Launch shape and floor: those of elementwise.cuh (memory bandwidth); the tiles 32 x 32.
#include <cstring>

#include "elementwise.cuh"

namespace reel::cuda {
namespace {

template <typename To, typename From>
struct ConvertFn {
  __device__ To operator()(From v) const { return convert<To>(v); }
};

template <typename T>
struct ConstFn {
  T value;
  __device__ T operator()() const { return value; }
};

template <typename T>
struct WhereFn {
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

template <typename T>
struct AxpyFn {
  T alpha;
  __device__ T operator()(T o, T x) const { return o + alpha * x; }
};

// dst[b, r, c] = src[b, r, c] converted, where dst is contiguous along c and src along r
// (as_transpose): a 32 x 32 tile read along r and written along c through shared memory
// (padded a column against bank conflicts), so both sides are coalesced. Memory-bound.
template <typename To, typename From>
__global__ void __launch_bounds__(kTransposeTile * kTransposeTileRows)
    transpose_kernel(To* dst, const From* src, Transpose t, int64_t col_tiles) {
  __shared__ To tile[kTransposeTile][kTransposeTile + 1];  // tile[c - c0][r - r0]
  const int64_t r0 = transpose_tile_row(blockIdx.x, col_tiles), c0 = transpose_tile_col(blockIdx.x, col_tiles);
  const int x = int(threadIdx.x);
  for (int64_t b = blockIdx.y; b < t.batch; b += gridDim.y) {
    for (int j = int(threadIdx.y); j < kTransposeTile; j += kTransposeTileRows)
      if (r0 + x < t.rows && c0 + j < t.cols)
        tile[j][x] = convert<To>(src[b * t.src_batch + (r0 + x) + (c0 + j) * t.src_col]);
    __syncthreads();
    for (int j = int(threadIdx.y); j < kTransposeTile; j += kTransposeTileRows)
      if (r0 + j < t.rows && c0 + x < t.cols) dst[b * t.dst_batch + (r0 + j) * t.dst_row + (c0 + x)] = tile[x][j];
    __syncthreads();  // the next batch refills the tile
  }
}

// The tiled copy where dst and src are transposes of each other; false where they are not
// (the caller's strided kernel copies it then).
template <typename To, typename From>
bool copy_transposed(Context& ctx, const Tensor& dst, const Tensor& src) {
  const Transpose t = as_transpose(coalesce<2>(dst.shape(), {&dst, &src}));
  const TransposeGrid g = transpose_grid(t);
  if (g.blocks == 0) return false;
  const dim3 grid(unsigned(g.blocks), unsigned(g.batches)), block(kTransposeTile, kTransposeTileRows);
  transpose_kernel<To, From><<<grid, block, 0, ctx.stream>>>(static_cast<To*>(dst.data_ptr()),
                                                             static_cast<const From*>(src.data_ptr()), t, g.col_tiles);
  check_launch("copy");
  return true;
}

template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;

// Copies and fills that need no conversion move raw words of the element's size.
template <typename Fn>
void dispatch_size(size_t size, Fn&& fn) {
  switch (size) {
    case 1: fn.template operator()<uint8_t>(); return;
    case 2: fn.template operator()<uint16_t>(); return;
    case 4: fn.template operator()<uint32_t>(); return;
    default: fn.template operator()<uint64_t>(); return;
  }
}

// The bytes of `value` as an element of dtype t, converted as the CPU converts.
uint64_t host_bits(DType t, double value) {
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (t) {
    case DType::f32: put(float(value)); break;
    case DType::f64: put(value); break;
    case DType::f16: put(Half(float(value)).bits); break;
    case DType::bf16: put(BFloat16(float(value)).bits); break;
    case DType::i32: put(int32_t(value)); break;
    case DType::i64: put(int64_t(value)); break;
    case DType::u8: put(uint8_t(value)); break;
    case DType::boolean: put(uint8_t(value != 0)); break;
  }
  return bits;
}

}  // namespace

void CudaBackend::copy_same_device(const Tensor& dst, const Tensor& src) {
  Context& c = ctx();
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype()) {
    if (dst.is_contiguous() && src.is_contiguous()) {
      check(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), size_t(dst.numel()) * dst.element_size(),
                            cudaMemcpyDeviceToDevice, c.stream),
            "copy", "cudaMemcpyAsync (device to device)");
      return;
    }
    dispatch_size(dst.element_size(), [&]<typename W>() {
      if (!copy_transposed<W, W>(c, dst, src)) launch_elementwise<W, W>(c, "copy", ConvertFn<W, W>{}, dst, {&src});
    });
    return;
  }
  dispatch_all(dst.dtype(), "copy", [&]<typename To>() {
    dispatch_all(src.dtype(), "copy", [&]<typename From>() {
      if constexpr (!std::is_same_v<To, From>) {
        if constexpr (is_float_v<To> && is_float_v<From>)  // the float conversions (staging halves)
          if (copy_transposed<To, From>(c, dst, src)) return;
        launch_elementwise<To, From>(c, "copy", ConvertFn<To, From>{}, dst, {&src});
      }
    });
  });
}

void CudaBackend::fill(const Tensor& out, double value) {
  expect_here("fill", {&out});
  Context& c = ctx();
  if (out.numel() == 0) return;
  uint64_t bits = host_bits(out.dtype(), value);
  if (bits == 0 && out.is_contiguous()) {  // zeros: the copy engine's memset
    check(cudaMemsetAsync(out.data_ptr(), 0, size_t(out.numel()) * out.element_size(), c.stream), "fill",
          "cudaMemsetAsync");
    return;
  }
  dispatch_size(out.element_size(), [&]<typename W>() {
    W w;
    std::memcpy(&w, &bits, sizeof(W));
    launch_elementwise<W>(c, "fill", ConstFn<W>{w}, out, {});
  });
}

void CudaBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  expect_here("where", {&out, &cond, &a, &b});
  Context& c = ctx();
  dispatch(out.dtype(), "where", [&]<typename T>() {
    launch_elementwise<T, bool, T, T>(c, "where", WhereFn<T>{}, out, {&cond, &a, &b});
  });
}

void CudaBackend::axpy(const Tensor& out, const Tensor& x, double alpha) {
  expect_here("axpy", {&out, &x});
  Context& c = ctx();
  dispatch_float(out.dtype(), "axpy", [&]<typename T>() {
    launch_elementwise<T, T, T>(c, "axpy", AxpyFn<T>{T(alpha)}, out, {&out, &x});
  });
}

}  // namespace reel::cuda
