// Reductions over any set of dims of a strided tensor. Memory-bound: x is read once.
// Two loop orders: when the innermost dim is reduced, each output sums a contiguous
// run (vectorised); when it is kept (sum over the batch of [N, C]), whole rows are
// added into the output row, so the reads stay sequential either way.
#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu_backend.h"
#include "loops.h"

namespace reel::cpu {
namespace {

struct Split {
  // kept dims (outer loop) and reduced dims (inner loop), each coalesced
  int nk = 0, nr = 0;
  int64_t kshape[kMaxDims], kstride[kMaxDims], ostride[kMaxDims];
  int64_t rshape[kMaxDims], rstride[kMaxDims];
  int64_t outputs = 1, count = 1;
};

Split split_dims(const Tensor& x, const Tensor& out, const std::vector<int>& dims) {
  Split s;
  std::vector<bool> red(size_t(x.dim()), false);
  for (int d : dims) red[size_t(d)] = true;
  Dims ost = contiguous_strides(out.shape());
  for (int d = 0; d < x.dim(); ++d) {
    int64_t n = x.shape()[d];
    if (n == 1) continue;
    if (red[size_t(d)]) {
      if (s.nr > 0 && s.rstride[s.nr - 1] == x.strides()[d] * n) {
        s.rshape[s.nr - 1] *= n;
        s.rstride[s.nr - 1] = x.strides()[d];
      } else {
        s.rshape[s.nr] = n;
        s.rstride[s.nr++] = x.strides()[d];
      }
      s.count *= n;
    } else {
      s.kshape[s.nk] = n;
      s.kstride[s.nk] = x.strides()[d];
      s.ostride[s.nk++] = ost[d];
      s.outputs *= n;
    }
  }
  return s;
}

// Visits every reduced element of the group starting at `base`: f(value, flat index).
template <typename T, typename F>
void visit_group(const T* base, const Split& s, F&& f) {
  if (s.nr == 0) {
    f(base[0], int64_t(0));
    return;
  }
  int inner = s.nr - 1;
  int64_t n = s.rshape[inner], st = s.rstride[inner];
  int64_t outer = s.count / n;
  for (int64_t r = 0; r < outer; ++r) {
    int64_t off = 0, rem = r;
    for (int d = inner - 1; d >= 0; --d) {
      off += (rem % s.rshape[d]) * s.rstride[d];
      rem /= s.rshape[d];
    }
    const T* p = base + off;
    for (int64_t i = 0; i < n; ++i) f(p[i * st], r * n + i);
  }
}

// Sum of a contiguous run in 32 independent lanes (4 AVX2 vectors): one vector
// accumulator's add latency held a core to 8 floats per 4 cycles, below its share
// of DRAM bandwidth.
template <typename T, typename Acc>
Acc sum_run(const T* p, int64_t n) {
  constexpr int kLanes = 32;
  Acc acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) acc[j] += Acc(p[i + j]);
  }
  Acc total = 0;
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  for (; i < n; ++i) total += Acc(p[i]);
  return total;
}

// Sum of the group, with a contiguous inner run vectorised.
template <typename T, typename Acc>
Acc sum_group(const T* base, const Split& s) {
  if (s.nr == 0) return Acc(base[0]);
  int inner = s.nr - 1;
  int64_t n = s.rshape[inner], st = s.rstride[inner];
  int64_t outer = s.count / n;
  Acc total = 0;
  for (int64_t r = 0; r < outer; ++r) {
    int64_t off = 0, rem = r;
    for (int d = inner - 1; d >= 0; --d) {
      off += (rem % s.rshape[d]) * s.rstride[d];
      rem /= s.rshape[d];
    }
    const T* p = base + off;
    Acc acc = 0;
    if (st == 1) {
      acc = sum_run<T, Acc>(p, n);
    } else {
      for (int64_t i = 0; i < n; ++i) acc += Acc(p[i * st]);
    }
    total += acc;
  }
  return total;
}

int64_t kept_offset(const Split& s, int64_t o, int64_t& out_off) {
  int64_t off = 0;
  out_off = 0;
  for (int d = s.nk - 1; d >= 0; --d) {
    int64_t i = o % s.kshape[d];
    o /= s.kshape[d];
    off += i * s.kstride[d];
    out_off += i * s.ostride[d];
  }
  return off;
}

// The sums of kStreams runs of n elements at once, each exactly as sum_run<T, T> sums it
// (the same 32 lanes, added up in the same order, then the tail): the loop reads from
// kStreams places of memory at a time. One sequential stream a core left DRAM's
// bandwidth on the table on the Xeon of issue 42 (2 threads summing 4 MiB each: 18-20 GB/s
// with one stream, 26-30 with four, a standalone probe timed in thread CPU time on a busy
// machine).
// Each stream also asks for its line 8 KiB ahead into L2 (the next runs of that stream:
// [A, K, B] is walked in k order): the L2 streamer stops at every 4 KiB page and a core's
// fill buffers alone held W7 to 22 GB/s, against 26-28 with the prefetch (a standalone
// copy of this loop, 384 MiB of buffers, the Xeon of issue 42). Prefetches past the end
// are hints, never faults.
constexpr int kStreams = 4;
constexpr uintptr_t kPrefetchAhead = 8192;  // bytes
template <typename T>
void sum_runs(const T* const* p, int64_t n, T* out) {
  constexpr int kLanes = 32;
  T acc[kStreams][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int s = 0; s < kStreams; ++s) {
      // the address as an integer: a pointer formed past the buffer would be undefined
      const uintptr_t at = reinterpret_cast<uintptr_t>(p[s] + i) + uintptr_t(kPrefetchAhead);
      for (uintptr_t line = 0; line < kLanes * sizeof(T); line += 64)
        __builtin_prefetch(reinterpret_cast<const void*>(at + line), 0, 2);
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) acc[s][j] += p[s][i + j];
    }
  for (int s = 0; s < kStreams; ++s) {
    T total = 0;
    for (int j = 0; j < kLanes; ++j) total += acc[s][j];
    for (int64_t t = i; t < n; ++t) total += p[s][t];
    out[s] = total;
  }
}

// out[k] = sum over a, b of x[a, k, b] for x a contiguous [A, K, B] block (the bias
// gradient of NCHW: sum over N, H, W). Memory-bound (the read floor: each element read
// once). Each thread takes its own range of a; a loop per k instead read B-runs 256 KB
// apart and reached 61% of the read floor (W7). Within the range, kStreams quarters are
// read side by side (sum_runs), each run's sum kept in a small [A, K] table, and the
// thread's row of K partial sums adds them up in the order of a: the bits of a single
// sequential pass, from several streams.
template <typename T>
bool sum_outer_inner(const Split& s, const T* x, T* out, double scale) {
  if (s.nk != 1 || s.nr != 2 || s.rstride[1] != 1 || s.kstride[0] != s.rshape[1] ||
      s.rstride[0] != s.kshape[0] * s.kstride[0])
    return false;
  const int64_t A = s.rshape[0], K = s.kshape[0], B = s.rshape[1];
  const int threads = A * K * B >= kParallelGrain ? int(std::min<int64_t>(omp_get_max_threads(), A)) : 1;
  std::vector<T> partial(size_t(threads) * size_t(K), T(0));
  std::vector<T> runs(size_t(A) * size_t(K));  // runs[a K + k]: the sum of x[a, k, :]
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num();
    const int64_t a0 = A * t / threads, a1 = A * (t + 1) / threads;
    const int64_t q = (a1 - a0) / kStreams;  // a-values per stream; the rest one at a time
    for (int64_t j = 0; j < q; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const T* p[kStreams];
        T sums[kStreams];
        for (int st = 0; st < kStreams; ++st) p[st] = x + ((a0 + st * q + j) * K + k) * B;
        sum_runs<T>(p, B, sums);
        for (int st = 0; st < kStreams; ++st) runs[size_t((a0 + st * q + j) * K + k)] = sums[st];
      }
    for (int64_t a = a0 + kStreams * q; a < a1; ++a)
      for (int64_t k = 0; k < K; ++k) runs[size_t(a * K + k)] = sum_run<T, T>(x + (a * K + k) * B, B);
    T* row = partial.data() + size_t(t) * size_t(K);
    for (int64_t a = a0; a < a1; ++a)
      for (int64_t k = 0; k < K; ++k) row[k] += runs[size_t(a * K + k)];
  }
  for (int64_t k = 0; k < K; ++k) {
    T total = 0;
    for (int t = 0; t < threads; ++t) total += partial[size_t(t) * size_t(K) + size_t(k)];
    out[k] = T(total * T(scale));
  }
  return true;
}

// The sum of one long contiguous run (x.sum(), a mean over everything) on every thread:
// fixed blocks of kSumBlock elements, each summed as sum_run sums it, the block sums
// added in order. The blocks do not depend on the thread count, so neither do the bits.
// One thread summing the whole run read at one core's share of the bandwidth (about half
// of the machine's on 2 cores). Memory-bound: the read floor.
constexpr int64_t kSumBlock = 65536;
template <typename T>
bool sum_long_run(const Split& s, const T* x, T* out, bool mean) {
  if (s.outputs != 1 || s.nr != 1 || s.rstride[0] != 1 || s.count < 2 * kSumBlock) return false;
  const int64_t n = s.count, blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<T> sums(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    sums[size_t(b)] = sum_run<T, T>(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
  T total = 0;
  for (T v : sums) total += v;
  *out = mean ? T(double(total) / double(n)) : total;
  return true;
}

template <typename T>
void reduce_typed(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) {
  Split s = split_dims(x, out, dims);
  if constexpr (std::is_floating_point_v<T>) {
    if ((op == ReduceOp::sum || op == ReduceOp::mean) && out.dtype() == x.dtype() &&
        sum_outer_inner<T>(s, static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()),
                           op == ReduceOp::mean ? 1.0 / double(s.count) : 1.0))
      return;
    if ((op == ReduceOp::sum || op == ReduceOp::mean) && out.dtype() == x.dtype() &&
        sum_long_run<T>(s, static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()),
                        op == ReduceOp::mean))
      return;
  }
  const T* xp = static_cast<const T*>(x.data_ptr());
  using Acc = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
  bool inner_kept = s.nk > 0 && (s.nr == 0 || s.kstride[s.nk - 1] < s.rstride[s.nr - 1]) && s.kstride[s.nk - 1] == 1;

  if ((op == ReduceOp::sum || op == ReduceOp::mean) && inner_kept && out.dtype() == x.dtype()) {
    // rows of the innermost kept dim are added into the output row
    T* o = static_cast<T*>(out.data_ptr());
    int64_t row = s.kshape[s.nk - 1];
    int64_t nrows_out = s.outputs / row;
    double scale = op == ReduceOp::mean ? 1.0 / double(s.count) : 1.0;
    int64_t chunk = std::max<int64_t>(64, (row + omp_get_max_threads() - 1) / omp_get_max_threads());
    int64_t nchunks = (row + chunk - 1) / chunk;
#pragma omp parallel for collapse(2) schedule(static) if (s.outputs * s.count >= kParallelGrain)
    for (int64_t ro = 0; ro < nrows_out; ++ro) {
      for (int64_t c = 0; c < nchunks; ++c) {
        int64_t lo = c * chunk, hi = std::min(row, lo + chunk);
        int64_t out_off;
        int64_t xoff = kept_offset(s, ro * row, out_off);
        T* orow = o + out_off;
        for (int64_t j = lo; j < hi; ++j) orow[j] = T(0);
        int inner = s.nr - 1;
        int64_t outer = s.count;
        for (int64_t r = 0; r < outer; ++r) {
          int64_t off = 0, rem = r;
          for (int d = inner; d >= 0; --d) {
            off += (rem % s.rshape[d]) * s.rstride[d];
            rem /= s.rshape[d];
          }
          const T* p = xp + xoff + off;
#pragma omp simd
          for (int64_t j = lo; j < hi; ++j) orow[j] += p[j];
        }
        if (scale != 1.0)
          for (int64_t j = lo; j < hi; ++j) orow[j] = T(orow[j] * T(scale));
      }
    }
    return;
  }

#pragma omp parallel for schedule(static) if (s.outputs * s.count >= kParallelGrain && s.outputs > 1)
  for (int64_t o = 0; o < s.outputs; ++o) {
    int64_t out_off;
    const T* base = xp + kept_offset(s, o, out_off);
    switch (op) {
      case ReduceOp::sum:
        if (out.dtype() == DType::i64) static_cast<int64_t*>(out.data_ptr())[out_off] = int64_t(sum_group<T, Acc>(base, s));
        else static_cast<T*>(out.data_ptr())[out_off] = T(sum_group<T, Acc>(base, s));
        break;
      case ReduceOp::mean:
        static_cast<T*>(out.data_ptr())[out_off] = T(double(sum_group<T, Acc>(base, s)) / double(s.count));
        break;
      case ReduceOp::prod: {
        Acc acc = 1;
        visit_group<T>(base, s, [&](T v, int64_t) { acc *= Acc(v); });
        static_cast<T*>(out.data_ptr())[out_off] = T(acc);
        break;
      }
      case ReduceOp::max:
      case ReduceOp::min: {
        bool is_max = op == ReduceOp::max;
        T best = base[0];
        visit_group<T>(base, s, [&](T v, int64_t) {
          if (v != v || (best == best && (is_max ? v > best : v < best))) best = v;  // NaN wins
        });
        static_cast<T*>(out.data_ptr())[out_off] = best;
        break;
      }
      case ReduceOp::argmax:
      case ReduceOp::argmin: {
        bool is_max = op == ReduceOp::argmax;
        T best = base[0];
        int64_t at = 0;
        visit_group<T>(base, s, [&](T v, int64_t i) {
          if (best != best) return;  // first NaN wins
          if (v != v || (is_max ? v > best : v < best)) { best = v; at = i; }
        });
        static_cast<int64_t*>(out.data_ptr())[out_off] = at;
        break;
      }
    }
  }
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int>& dims) {
  if (x.numel() == 0) {  // empty groups: sum 0, prod 1, mean NaN (as PyTorch)
    fill(out, op == ReduceOp::prod ? 1.0 : op == ReduceOp::mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return;
  }
  dispatch(x.dtype(), "reduce", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("reduce: convert a bool tensor with .to(DType::i64) before reducing it");
    } else {
      reduce_typed<T>(op, out, x, dims);
    }
  });
}

}  // namespace reel::cpu
