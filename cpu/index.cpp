// Indexing kernels along one dim of a strided tensor: index_select, index_add,
// gather, scatter_add, scatter. All are memory-bound gathers/scatters. The accumulating ones
// (index_add, scatter_add) parallelise only over destinations that no two threads
// share and walk the indexed dim sequentially, so repeated indices add up without atomics.
#include <omp.h>

#include <algorithm>

#include "cpu_backend.h"
#include "loops.h"

namespace reel::cpu {
namespace {

// A set of dims walked in row-major order with the element strides of K operands;
// dims contiguous with each other in every operand are merged.
template <size_t K>
struct Walk {
  int nd = 0;
  int64_t shape[kMaxDims];
  int64_t st[K][kMaxDims];
  int64_t count = 1;

  void add(int64_t n, const std::array<int64_t, K>& s) {
    if (n == 1) return;
    count *= n;
    if (nd > 0) {
      bool merge = true;
      for (size_t k = 0; k < K; ++k) merge = merge && st[k][nd - 1] == s[k] * n;
      if (merge) {
        shape[nd - 1] *= n;
        for (size_t k = 0; k < K; ++k) st[k][nd - 1] = s[k];
        return;
      }
    }
    shape[nd] = n;
    for (size_t k = 0; k < K; ++k) st[k][nd] = s[k];
    ++nd;
  }
  // the innermost run: its length and each operand's stride along it
  int64_t inner() const { return nd ? shape[nd - 1] : 1; }
  int64_t inner_stride(size_t k) const { return nd ? st[k][nd - 1] : 0; }
  int64_t lines() const { return count / inner(); }
  // element offsets of the first element of line `l`
  std::array<int64_t, K> line_offsets(int64_t l) const {
    std::array<int64_t, K> off{};
    for (int d = nd - 2; d >= 0; --d) {
      int64_t i = l % shape[d];
      l /= shape[d];
      for (size_t k = 0; k < K; ++k) off[k] += i * st[k][d];
    }
    return off;
  }
  // element offsets of element `e` (row-major over all dims)
  std::array<int64_t, K> offsets(int64_t e) const {
    std::array<int64_t, K> off = line_offsets(e / inner());
    for (size_t k = 0; k < K; ++k) off[k] += (e % inner()) * inner_stride(k);
    return off;
  }
};

// Runs body(item) for item in [0, items), on the pool when the work is large enough.
template <typename Body>
void parallel_items(int64_t items, int64_t work, Body body) {
  if (work >= kParallelGrain && items > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < items; ++i) body(i);
  } else {
    for (int64_t i = 0; i < items; ++i) body(i);
  }
}

// How many pieces to cut each line of `n` elements into so that `lines` lines keep every thread busy.
int64_t pieces_per_line(int64_t lines, int64_t n) {
  int64_t threads = omp_get_max_threads();
  if (lines >= threads || n < 2048) return 1;
  return std::min<int64_t>(threads, n / 1024);
}

// dst[i * ds] op= src[i * ss] for i < n; the unit-stride case vectorises
template <bool Add, typename T>
inline void run(T* dst, int64_t ds, const T* src, int64_t ss, int64_t n) {
  if (ds == 1 && ss == 1) {
    if constexpr (Add) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    } else {
      std::copy(src, src + n, dst);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (Add) dst[i * ds] += src[i * ss];
      else dst[i * ds] = src[i * ss];
    }
  }
}

// The dims of `a` and `b` (same rank) outside `dim`, split into those before (outer)
// and after it (inner), for the select/add pair whose operands differ only along dim.
struct OuterInner {
  Walk<2> outer, inner;
};
OuterInner split_around(const Tensor& a, const Tensor& b, int dim) {
  OuterInner w;
  for (int d = 0; d < a.dim(); ++d) {
    if (d == dim) continue;
    std::array<int64_t, 2> s{a.strides()[d], b.strides()[d]};
    (d < dim ? w.outer : w.inner).add(a.shape()[d], s);
  }
  return w;
}

// dst row j = src row idx[j] (rows of n elements at strides ds/ss apart, element
// strides dn/sn), for j < K. Memory-bound, and latency-bound as written naively: rows
// drawn at random from a large tensor come from DRAM, and a 3 KB row is too short for
// the stream prefetcher to ramp up, so copying one row after another keeps few reads
// in flight (W1's 128 rows out of 188 MB: 40 us in a training step). Each thread first
// prefetches every 512th byte of all its rows, so that their page walks and first DRAM
// reads overlap, then copies (32 us; the first line of each row alone does as well).
template <typename T>
void select_rows(T* dst, int64_t ds, int64_t dn, const T* src, int64_t ss, int64_t sn, int64_t n, const int64_t* idx,
                 int64_t K) {
  constexpr int64_t kStep = 512 / int64_t(sizeof(T));
  auto rows = [&](int64_t begin, int64_t end) {
    const int64_t span = sn == 1 ? n : 1;
    for (int64_t j = begin; j < end; ++j)
      for (int64_t e = 0; e < span; e += kStep) __builtin_prefetch(src + idx[j] * ss + e);
    for (int64_t j = begin; j < end; ++j) run<false>(dst + j * ds, dn, src + idx[j] * ss, sn, n);
  };
  if (K * n >= kParallelGrain && K > 1) {
#pragma omp parallel
    {
      int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      rows(K * t / nt, K * (t + 1) / nt);
    }
  } else {
    rows(0, K);
  }
}

// out[o, j, i] = x[o, index[j], i]   (a = out, b = x)
template <typename T>
void index_select_typed(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  OuterInner w = split_around(out, x, dim);
  const int64_t K = index.numel(), os = out.strides()[dim], xs = x.strides()[dim];
  const int64_t* idx = index.data<int64_t>();
  T* o = out.data<T>();
  const T* xp = x.data<T>();
  const int64_t n = w.inner.inner(), lines = w.inner.lines();
  const int64_t on = w.inner.inner_stride(0), xn = w.inner.inner_stride(1);
  if (w.outer.count == 1 && lines == 1) return select_rows(o, os, on, xp, xs, xn, n, idx, K);
  // every (outer, j, line) writes its own destination: all of them run in parallel
  parallel_items(w.outer.count * K * lines, out.numel(), [&](int64_t item) {
    int64_t l = item % lines, j = (item / lines) % K, oi = item / (lines * K);
    auto ob = w.outer.offsets(oi), ib = w.inner.line_offsets(l);
    run<false>(o + ob[0] + j * os + ib[0], on, xp + ob[1] + idx[j] * xs + ib[1], xn, n);
  });
}

// out[o, index[j], i] += src[o, j, i]   (a = out, b = src); j runs sequentially
template <typename T>
void index_add_typed(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  OuterInner w = split_around(out, src, dim);
  const int64_t K = index.numel(), os = out.strides()[dim], ss = src.strides()[dim];
  const int64_t* idx = index.data<int64_t>();
  T* o = out.data<T>();
  const T* sp = src.data<T>();
  const int64_t n = w.inner.inner(), lines = w.inner.lines();
  const int64_t on = w.inner.inner_stride(0), sn = w.inner.inner_stride(1);
  const int64_t pieces = pieces_per_line(w.outer.count * lines, n), piece = (n + pieces - 1) / pieces;
  parallel_items(w.outer.count * lines * pieces, src.numel(), [&](int64_t item) {
    int64_t p = item % pieces, l = (item / pieces) % lines, oi = item / (pieces * lines);
    int64_t lo = p * piece, len = std::min(n, lo + piece) - lo;
    if (len <= 0) return;
    auto ob = w.outer.offsets(oi), ib = w.inner.line_offsets(l);
    T* dst = o + ob[0] + ib[0] + lo * on;
    const T* s = sp + ob[1] + ib[1] + lo * sn;
    for (int64_t j = 0; j < K; ++j) run<true>(dst + idx[j] * os, on, s + j * ss, sn, len);
  });
}

// out[p] = x[p with p[dim] = index[p]] over every position p of index (= out's shape)
template <typename T>
void gather_typed(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  Walk<3> w;  // out, x (stride 0 along dim: the index supplies it), index
  for (int d = 0; d < out.dim(); ++d)
    w.add(out.shape()[d], {out.strides()[d], d == dim ? 0 : x.strides()[d], index.strides()[d]});
  const int64_t xs = x.strides()[dim];
  T* o = out.data<T>();
  const T* xp = x.data<T>();
  const int64_t* idx = index.data<int64_t>();
  const int64_t n = w.inner(), s0 = w.inner_stride(0), s1 = w.inner_stride(1), s2 = w.inner_stride(2);
  parallel_items(w.lines(), out.numel(), [&](int64_t l) {
    auto b = w.line_offsets(l);
    T* op = o + b[0];
    const T* xb = xp + b[1];
    const int64_t* ip = idx + b[2];
    for (int64_t i = 0; i < n; ++i) op[i * s0] = xb[i * s1 + ip[i * s2] * xs];
  });
}

// out[p with p[dim] = index[p]] += src[p] (or = src[p]) over every position p of index; the
// positions that differ only along dim (the only ones that can collide) run in one thread
template <typename T, bool Add = true>
void scatter_add_typed(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  Walk<3> w;  // out, index, src over the dims other than dim
  for (int d = 0; d < index.dim(); ++d)
    if (d != dim) w.add(index.shape()[d], {out.strides()[d], index.strides()[d], src.strides()[d]});
  const int64_t K = index.shape()[dim];
  const int64_t os = out.strides()[dim], is = index.strides()[dim], ss = src.strides()[dim];
  T* o = out.data<T>();
  const int64_t* idx = index.data<int64_t>();
  const T* sp = src.data<T>();
  const int64_t n = w.inner(), s0 = w.inner_stride(0), s1 = w.inner_stride(1), s2 = w.inner_stride(2);
  parallel_items(w.lines(), index.numel(), [&](int64_t l) {
    auto b = w.line_offsets(l);
    for (int64_t k = 0; k < K; ++k) {
      T* ob = o + b[0];
      const int64_t* ib = idx + b[1] + k * is;
      const T* sb = sp + b[2] + k * ss;
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (Add) ob[i * s0 + ib[i * s1] * os] += sb[i * s2];
        else ob[i * s0 + ib[i * s1] * os] = sb[i * s2];
      }
    }
  });
}

}  // namespace

void CpuBackend::index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  dispatch(x.dtype(), "index_select", [&]<typename T>() { index_select_typed<T>(out, x, dim, index); });
}

void CpuBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  dispatch(out.dtype(), "index_add", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) throw Error("index_add: bool tensors cannot be summed");
    else index_add_typed<T>(out, dim, index, src);
  });
}

void CpuBackend::gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  dispatch(x.dtype(), "gather", [&]<typename T>() { gather_typed<T>(out, x, dim, index); });
}

void CpuBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  dispatch(out.dtype(), "scatter_add", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) throw Error("scatter_add: bool tensors cannot be summed");
    else scatter_add_typed<T>(out, dim, index, src);
  });
}

void CpuBackend::scatter(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  dispatch(out.dtype(), "scatter", [&]<typename T>() { scatter_add_typed<T, false>(out, dim, index, src); });
}

}  // namespace reel::cpu
