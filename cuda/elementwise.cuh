// The elementwise machinery every .cu file of the backend shares: dtype dispatch,
// dtype conversion as the CPU does it, and one launcher for out[i] = f(in0[i], ...).
//
// Layout: operands of one shape, any strides (stride 0 for broadcast dims), offsets in
// elements. Dims are put in the order of the output's strides and merged where contiguous
// with each other in every operand (internal/elementwise_geometry.h), so a transpose stays
// 2-D and a contiguous tensor, or channels-last operands of a channels-last output, 1-D.
// Launch shape: 256 threads, a grid-stride loop, the grid capped at two waves of the GPU.
// Two kernels per functor:
//   - contiguous: every operand dense and 16-byte aligned; each thread moves 16 bytes of
//     the widest operand per load (float4 for f32), the tail element by element;
//   - strided: an offset calculator turns the flat index into per-operand offsets with
//     32-bit magic-number division (a few instructions per dim instead of a 64-bit
//     divide); tensors of 2^31 elements or more are launched in pieces.
// Floor: memory bandwidth. Each operand is read once and the output written once.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "internal/backend.h"
#include "internal/elementwise_geometry.h"
#include "internal/launch_geometry.h"

namespace reel::cuda {

constexpr int kThreads = geometry::kBlockThreads;

// ---- dtype dispatch (host): fn.template operator()<T>() with T the device type of t
template <typename Fn>
void dispatch(DType t, const char* op, Fn&& fn) {  // the dtypes the CPU computes in
  switch (t) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    case DType::i32: fn.template operator()<int32_t>(); return;
    case DType::i64: fn.template operator()<int64_t>(); return;
    case DType::u8: fn.template operator()<uint8_t>(); return;
    case DType::boolean: fn.template operator()<bool>(); return;
    default:
      throw Error(std::string(op) + ": " + dtype_name(t) +
                  " is a storage-only dtype, as on the CPU; convert with .to(DType::f32) to compute");
  }
}
template <typename Fn>
void dispatch_all(DType t, const char* op, Fn&& fn) {  // plus the storage-only halves
  switch (t) {
    case DType::f16: fn.template operator()<__half>(); return;
    case DType::bf16: fn.template operator()<__nv_bfloat16>(); return;
    default: dispatch(t, op, fn);
  }
}
template <typename Fn>
void dispatch_float(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    default: throw Error(std::string(op) + ": expected f32 or f64, got " + dtype_name(t));
  }
}

// ---- conversions, bit for bit as tensor/dtype.h and cpu/backend.cpp do them
template <typename T> constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

__device__ __forceinline__ float half_to_float(__half h) { return __half2float(h); }
__device__ __forceinline__ float half_to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
template <typename H>
__device__ __forceinline__ H float_to_half(float f);
template <>
__device__ __forceinline__ __half float_to_half<__half>(float f) {
  if (f != f) {  // NaN: the CPU keeps the sign and sets the quiet bit
    unsigned short sign = (unsigned short)((__float_as_uint(f) >> 16) & 0x8000u);
    return __ushort_as_half((unsigned short)(sign | 0x7e00u));
  }
  return __float2half_rn(f);
}
template <>
__device__ __forceinline__ __nv_bfloat16 float_to_half<__nv_bfloat16>(float f) {
  if (f != f) return __ushort_as_bfloat16((unsigned short)0x7fc0u);  // the CPU's one NaN
  return __float2bfloat16_rn(f);
}

template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (is_half_v<From>) return convert<To>(half_to_float(v));
  else if constexpr (is_half_v<To>) return float_to_half<To>(float(v));
  else if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else return To(v);
}

// ---- 32-bit division by a runtime constant: q = (umulhi(n, m) + n) >> s, for n < 2^31
struct Divmod {
  uint32_t d = 1, m = 0, s = 0;
  Divmod() = default;
  explicit Divmod(uint32_t divisor) : d(divisor) {
    while (s < 32 && (uint64_t(1) << s) < divisor) ++s;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

// ---- geometry (internal/elementwise_geometry.h) of tensors
template <int N>
Geometry<N> coalesce(const Dims& shape, const std::array<const Tensor*, N>& ts) {
  std::array<const Dims*, N> strides;
  for (int k = 0; k < N; ++k) strides[size_t(k)] = &ts[size_t(k)]->strides();
  return coalesce<N>(shape, strides);
}

// The strided kernel's view of a piece of a geometry: divisors and strides.
template <int N>
struct OffsetCalc {
  int ndim;
  Divmod div[kMaxDims];
  int64_t strides[N][kMaxDims];
  __device__ __forceinline__ void offsets(uint32_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      uint32_t q = div[d].div(i);
      uint32_t idx = i - q * div[d].d;
      i = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += int64_t(idx) * strides[k][d];
    }
  }
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename... T>
constexpr int vec_width() {
  size_t widest = 1;
  ((widest = sizeof(T) > widest ? sizeof(T) : widest), ...);
  return int(16 / widest);
}

template <int VEC, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kThreads) contiguous_kernel(int64_t n, F f, Out* out, const In*... in) {
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t nvec = n / VEC;
  for (int64_t v = first; v < nvec; v += stride) {
    auto body = [&](const Vec<In, VEC>&... x) {
      Vec<Out, VEC> o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = f(x.v[j]...);
      reinterpret_cast<Vec<Out, VEC>*>(out)[v] = o;
    };
    body(reinterpret_cast<const Vec<In, VEC>*>(in)[v]...);
  }
  for (int64_t i = nvec * VEC + first; i < n; i += stride) out[i] = f(in[i]...);
}

template <typename F, typename Out, typename... In, size_t... I>
__device__ __forceinline__ void apply_at(F& f, char* const* base, const int64_t* off, std::index_sequence<I...>) {
  reinterpret_cast<Out*>(base[0])[off[0]] = f(reinterpret_cast<const In*>(base[I + 1])[off[I + 1]]...);
}

template <typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kThreads)
    strided_kernel(uint32_t n, F f, OffsetCalc<1 + sizeof...(In)> calc, std::array<char*, 1 + sizeof...(In)> base) {
  constexpr int N = 1 + sizeof...(In);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int64_t off[N];
    calc.offsets(i, off);
    apply_at<F, Out, In...>(f, base.data(), off, std::index_sequence_for<In...>{});
  }
}

// Calls launch(calc, n, bases) for pieces of g below 2^31 elements (one piece unless the
// tensor is huge; split_pieces); `sizes` are the operands' element sizes.
template <int N, typename Launch>
void for_each_piece(const Geometry<N>& g, std::array<char*, N> base, const std::array<size_t, N>& sizes,
                    Launch&& launch) {
  split_pieces<N>(g, {}, [&](const Geometry<N>& p, const std::array<int64_t, N>& first) {
    int64_t n = 1;
    OffsetCalc<N> calc;
    calc.ndim = p.ndim;
    for (int d = 0; d < p.ndim; ++d) {
      n *= p.shape[d];
      calc.div[d] = Divmod(uint32_t(p.shape[d]));
      for (int k = 0; k < N; ++k) calc.strides[k][d] = p.strides[k][d];
    }
    std::array<char*, N> b = base;
    for (int k = 0; k < N; ++k) b[size_t(k)] += first[size_t(k)] * int64_t(sizes[size_t(k)]);
    launch(calc, uint32_t(n), b);
  });
}

// out[i] = f(ins[0][i], ...) over out's shape; inputs already broadcast to it (stride 0).
// Out and In are the device element types of the operands.
template <typename Out, typename... In, typename F>
void launch_elementwise(Context& ctx, const char* op, F f, const Tensor& out,
                        const std::array<const Tensor*, sizeof...(In)>& ins) {
  constexpr int N = 1 + sizeof...(In);
  int64_t n = out.numel();
  if (n == 0) return;
  std::array<const Tensor*, N> all;
  all[0] = &out;
  for (int k = 1; k < N; ++k) all[k] = ins[k - 1];
  Geometry<N> g = coalesce<N>(out.shape(), all);
  std::array<char*, N> base;
  for (int k = 0; k < N; ++k) base[k] = static_cast<char*>(all[k]->data_ptr());

  constexpr int VEC = vec_width<Out, In...>();
  bool dense = g.ndim <= 1;
  for (int k = 0; k < N && dense; ++k) dense = g.ndim == 0 || g.strides[k][0] == 1;
  constexpr size_t align[N] = {sizeof(Out) * VEC, sizeof(In) * VEC...};
  for (int k = 0; k < N && dense; ++k) dense = uintptr_t(base[k]) % align[k] == 0;
  if (dense) {
    unsigned grid = ctx.grid_for((n + VEC - 1) / VEC, kThreads);
    [&]<size_t... I>(std::index_sequence<I...>) {
      contiguous_kernel<VEC, F, Out, In...><<<grid, kThreads, 0, ctx.stream>>>(
          n, f, reinterpret_cast<Out*>(base[0]), reinterpret_cast<const In*>(base[I + 1])...);
    }(std::index_sequence_for<In...>{});
    check_launch(op);
    return;
  }
  if (g.ndim == 0) {  // one element with odd alignment
    g.ndim = 1;
    g.shape[0] = 1;
    for (int k = 0; k < N; ++k) g.strides[k][0] = 1;
  }
  for_each_piece<N>(g, base, {sizeof(Out), sizeof(In)...}, [&](const OffsetCalc<N>& calc, uint32_t m, auto b) {
    strided_kernel<F, Out, In...><<<ctx.grid_for(m, kThreads), kThreads, 0, ctx.stream>>>(m, f, calc, b);
    check_launch(op);
  });
}

}  // namespace reel::cuda
