// Same-device copy with dtype conversion (any strides), fill, where and axpy.
//
// Layout: any strides on every operand (elementwise.cuh); copies of one dtype move raw
// 1/2/4/8-byte words, so the eight dtypes need four strided kernels, and a dense copy
// of one dtype is a cudaMemcpyAsync. Conversions follow the CPU bit for bit
// (f16/bf16 rounding to nearest even, NaN patterns included).
// Launch shape and floor: those of elementwise.cuh (memory bandwidth).
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
      launch_elementwise<W, W>(c, "copy", ConvertFn<W, W>{}, dst, {&src});
    });
    return;
  }
  dispatch_all(dst.dtype(), "copy", [&]<typename To>() {
    dispatch_all(src.dtype(), "copy", [&]<typename From>() {
      if constexpr (!std::is_same_v<To, From>) launch_elementwise<To, From>(c, "copy", ConvertFn<To, From>{}, dst, {&src});
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
