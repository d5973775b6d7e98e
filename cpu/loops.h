// Strided elementwise loops over up to four operands: dims are coalesced first, a
// fully contiguous case becomes one flat (vectorisable) loop, large loops run on
// the OpenMP pool that oneDNN also uses. Internal to cpu/.
#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <span>
#include <cstdint>
#include <type_traits>

#include "../tensor/backend.h"
#include "stream_store.h"

namespace reel::cpu {

// Below this many elements a loop stays on one thread: a parallel region costs ~1 µs.
inline constexpr int64_t kParallelGrain = 32768;

template <size_t N>
struct Geometry {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];  // elements
};

// Merges dims that are contiguous with each other in every operand. A first operand
// (the output) laid out densely in another order than its dims' (channels-last) has its
// dims visited in its memory order, so the rows run along its contiguous dim; the order
// of visits is free, as every element is written once.
template <size_t N>
Geometry<N> coalesce(const Dims& shape, const std::array<const Tensor*, N>& ts) {
  Geometry<N> g;
  std::array<int, kMaxDims> order;
  for (int d = 0; d < shape.size(); ++d) order[size_t(d)] = d;
  const Dims& s0 = ts[0]->strides();
  if (!ts[0]->is_contiguous() && dense_strides(shape, s0))
    std::stable_sort(order.begin(), order.begin() + shape.size(), [&](int a, int b) { return s0[a] > s0[b]; });
  for (int d : std::span(order.data(), size_t(shape.size()))) {
    if (shape[d] == 1) continue;
    if (g.ndim > 0) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k)
        merge = merge && g.strides[k][g.ndim - 1] == ts[k]->strides()[d] * shape[d];
      if (merge) {
        g.shape[g.ndim - 1] *= shape[d];
        for (size_t k = 0; k < N; ++k) g.strides[k][g.ndim - 1] = ts[k]->strides()[d];
        continue;
      }
    }
    g.shape[g.ndim] = shape[d];
    for (size_t k = 0; k < N; ++k) g.strides[k][g.ndim] = ts[k]->strides()[d];
    ++g.ndim;
  }
  return g;
}

// Calls body(ptrs, inner_strides, count) over rows of the innermost dim; ptrs are
// typed base pointers advanced to each row. Parallel over rows for large tensors.
template <typename... T, typename Body>
void for_each_row(const Dims& shape, std::array<const Tensor*, sizeof...(T)> ts, Body body) {
  constexpr size_t N = sizeof...(T);
  Geometry<N> g = coalesce<N>(shape, ts);
  std::array<char*, N> base;
  std::array<int64_t, N> esize;
  for (size_t k = 0; k < N; ++k) {
    base[k] = static_cast<char*>(ts[k]->data_ptr());
    esize[k] = int64_t(ts[k]->element_size());
  }
  if (g.ndim == 0) {  // one element
    g.ndim = 1;
    g.shape[0] = 1;
    for (size_t k = 0; k < N; ++k) g.strides[k][0] = 1;
  }
  int inner = g.ndim - 1;
  int64_t count = g.shape[inner];
  int64_t rows = 1;
  for (int d = 0; d < inner; ++d) rows *= g.shape[d];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = g.strides[k][inner];
  auto run_row = [&](int64_t r) {
    std::array<int64_t, N> off{};
    int64_t rem = r;
    for (int d = inner - 1; d >= 0; --d) {
      int64_t i = rem % g.shape[d];
      rem /= g.shape[d];
      for (size_t k = 0; k < N; ++k) off[k] += i * g.strides[k][d];
    }
    std::array<char*, N> p;
    for (size_t k = 0; k < N; ++k) p[k] = base[k] + off[k] * esize[k];
    [&]<size_t... I>(std::index_sequence<I...>) {
      body(std::tuple<T*...>{reinterpret_cast<T*>(p[I])...}, inner_stride, count);
    }(std::make_index_sequence<N>{});
  };
  if (rows * count >= kParallelGrain && rows > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) run_row(r);
  } else if (rows == 1 && count >= kParallelGrain) {
    // one long row: split it into chunks
    int64_t chunks = omp_get_max_threads();
    int64_t step = (count + chunks - 1) / chunks;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t lo = c * step, hi = std::min(count, lo + step);
      if (lo >= hi) continue;
      [&]<size_t... I>(std::index_sequence<I...>) {
        body(std::tuple<T*...>{reinterpret_cast<T*>(base[I]) + lo * inner_stride[I]...}, inner_stride, hi - lo);
      }(std::make_index_sequence<N>{});
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) run_row(r);
  }
}

// out[i] = f(x[i]) with Out and In element types.
template <typename Out, typename In, typename F>
void map1(const Tensor& out, const Tensor& x, F f) {
  const bool stream = streaming_output(out, x);
  for_each_row<Out, const In>(out.shape(), {&out, &x}, [&](auto p, auto st, int64_t n) {
    Out* o = std::get<0>(p);
    const In* a = std::get<1>(p);
    if (st[0] == 1 && st[1] == 1) {
      if constexpr (std::is_same_v<Out, float>)
        if (stream) return stream_map_f32(o, n, [&](int64_t i) { return f(a[i]); }, a);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(a[i * st[1]]);
    }
  });
}

// out[i] = f(a[i], b[i]). Either operand may be broadcast along the row (stride 0:
// a bias, or a backward rule's incoming gradient expanded from a sum or a mean);
// both cases keep a vectorised loop.
template <typename Out, typename In, typename F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const bool stream = streaming_output(out, a, b);
  for_each_row<Out, const In, const In>(out.shape(), {&out, &a, &b}, [&](auto p, auto st, int64_t n) {
    Out* o = std::get<0>(p);
    const In* x = std::get<1>(p);
    const In* y = std::get<2>(p);
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      if constexpr (std::is_same_v<Out, float>)
        if (stream) return stream_map_f32(o, n, [&](int64_t i) { return f(x[i], y[i]); }, x, y);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const In yv = y[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const In xv = x[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(x[i * st[1]], y[i * st[2]]);
    }
  });
}

// Calls fn.template operator()<T>() with T the C++ type of dtype `t` (f32, f64, i32, i64, u8, bool).
template <typename Fn>
void dispatch(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    case DType::i32: fn.template operator()<int32_t>(); return;
    case DType::i64: fn.template operator()<int64_t>(); return;
    case DType::u8: fn.template operator()<uint8_t>(); return;
    case DType::boolean: fn.template operator()<bool>(); return;
    default:
      throw Error(std::string(op) + ": " + dtype_name(t) +
                  " is a storage-only dtype on the CPU; convert with .to(DType::f32) to compute");
  }
}

template <typename Fn>
void dispatch_float(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    default:
      throw Error(std::string(op) + ": expected f32 or f64, got " + dtype_name(t));
  }
}

}  // namespace reel::cpu
