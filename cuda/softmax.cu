// Softmax and log-softmax along one dim, and the fused softmax cross-entropy.
//
// softmax: x viewed as [outer, C, inner] (copied to contiguous when strided). With
//   inner == 1 (the last dim, the common case) a warp per row (C <= 1024) or a block
//   per row: max, then the sum of exp(x - max), then the write; the row is read from
//   memory once and from cache after. With inner > 1 a thread per (outer, inner)
//   column walks C, so neighbouring threads read neighbouring addresses.
//   Backward: y (gy - sum(gy y)) for softmax, gy - exp(y) sum(gy) for log-softmax.
// cross_entropy, logits [N, C] any strides, i64 labels [N]: forward is one kernel, a
//   warp or block per row, writing lse and the (label-smoothed) loss; the probabilities
//   are never written. Backward is one elementwise kernel that recomputes
//   exp(x - lse): g = gloss (p - (1 - eps) [c == y] - eps / C), zero on ignored rows.
//   A label outside [0, C) cannot throw from a kernel: it is reported as a DeviceFault
//   and raised as reel::Error at the next host synchronisation; its row's loss is NaN.
// Floor: memory bandwidth (exp is cheap next to a read on an H100).
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return fmax(a, b); }  // NaN never wins the max, as on the CPU
};
struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

// Reduction over a group of TPR threads (a warp, or the whole block), given to all of them.
template <int TPR, typename T, typename Op>
__device__ __forceinline__ T group_reduce(T v, Op op, T* smem) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  if constexpr (TPR == 32) {
    return v;
  } else {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = smem[0];
    for (int k = 1; k < kThreads / 32; ++k) v = op(v, smem[k]);
    __syncthreads();
    return v;
  }
}

// ---- softmax over rows (inner == 1)
template <typename T, int TPR>
__global__ void __launch_bounds__(kThreads) softmax_rows(const T* x, T* y, int64_t rows, int64_t C, bool log) {
  __shared__ T smem[kThreads / 32];
  constexpr int per_block = kThreads / TPR;
  int local = threadIdx.x / TPR, t = threadIdx.x % TPR;
  for (int64_t row0 = int64_t(blockIdx.x) * per_block; row0 < rows; row0 += int64_t(gridDim.x) * per_block) {
    int64_t row = row0 + local;
    bool live = row < rows;
    const T* xr = x + (live ? row : 0) * C;
    T m = -INFINITY;
    if (live)
      for (int64_t c = t; c < C; c += TPR) m = fmax(m, xr[c]);
    m = group_reduce<TPR>(m, MaxOp{}, smem);
    T s = 0;
    if (live)
      for (int64_t c = t; c < C; c += TPR) s += exp(xr[c] - m);
    s = group_reduce<TPR>(s, SumOp{}, smem);
    if (!live) continue;
    T* yr = y + row * C;
    if (log) {
      T lse = m + ::log(s);
      for (int64_t c = t; c < C; c += TPR) yr[c] = xr[c] - lse;
    } else {
      T inv = T(1) / s;
      for (int64_t c = t; c < C; c += TPR) yr[c] = exp(xr[c] - m) * inv;
    }
  }
}

template <typename T, int TPR>
__global__ void __launch_bounds__(kThreads)
    softmax_rows_backward(T* gx, const T* gy, const T* y, int64_t rows, int64_t C, bool log) {
  __shared__ T smem[kThreads / 32];
  constexpr int per_block = kThreads / TPR;
  int local = threadIdx.x / TPR, t = threadIdx.x % TPR;
  for (int64_t row0 = int64_t(blockIdx.x) * per_block; row0 < rows; row0 += int64_t(gridDim.x) * per_block) {
    int64_t row = row0 + local;
    bool live = row < rows;
    int64_t base = (live ? row : 0) * C;
    T s = 0;
    if (live)
      for (int64_t c = t; c < C; c += TPR) s += log ? gy[base + c] : gy[base + c] * y[base + c];
    s = group_reduce<TPR>(s, SumOp{}, smem);
    if (!live) continue;
    for (int64_t c = t; c < C; c += TPR)
      gx[base + c] = log ? gy[base + c] - exp(y[base + c]) * s : y[base + c] * (gy[base + c] - s);
  }
}

// ---- softmax over a middle dim: one thread per (outer, inner) column
template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_cols(const T* x, T* y, int64_t outer, int64_t C, int64_t inner, bool log) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * inner;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = i / inner, in = i - o * inner;
    const T* xc = x + o * C * inner + in;
    T* yc = y + o * C * inner + in;
    T m = -INFINITY;
    for (int64_t c = 0; c < C; ++c) m = fmax(m, xc[c * inner]);
    T s = 0;
    for (int64_t c = 0; c < C; ++c) s += exp(xc[c * inner] - m);
    if (log) {
      T lse = m + ::log(s);
      for (int64_t c = 0; c < C; ++c) yc[c * inner] = xc[c * inner] - lse;
    } else {
      T inv = T(1) / s;
      for (int64_t c = 0; c < C; ++c) yc[c * inner] = exp(xc[c * inner] - m) * inv;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_cols_backward(T* gx, const T* gy, const T* y, int64_t outer,
                                                                  int64_t C, int64_t inner, bool log) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * inner;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = i / inner, in = i - o * inner, base = o * C * inner + in;
    T s = 0;
    for (int64_t c = 0; c < C; ++c) s += log ? gy[base + c * inner] : gy[base + c * inner] * y[base + c * inner];
    for (int64_t c = 0; c < C; ++c) {
      int64_t k = base + c * inner;
      gx[k] = log ? gy[k] - exp(y[k]) * s : y[k] * (gy[k] - s);
    }
  }
}

// ---- cross entropy
struct CeArgs {
  int64_t N, C, rs, cs, ys;
  int64_t ignore;
  double eps;
};

__device__ __forceinline__ void report(DeviceFault* f, long long value, long long bound) {
  if (atomicCAS(&f->code, int(kFaultNone), int(kFaultCrossEntropyLabel)) == int(kFaultNone)) {
    f->value = value;
    f->bound = bound;
  }
}

// loss = lse - (1 - eps) x[y] - (eps / C) sum_c x[c]
template <typename T, int TPR>
__global__ void __launch_bounds__(kThreads) ce_forward(const T* x, const int64_t* labels, T* losses, T* lse_out,
                                                       CeArgs a, DeviceFault* fault) {
  __shared__ T smem[kThreads / 32];
  constexpr int per_block = kThreads / TPR;
  int local = threadIdx.x / TPR, t = threadIdx.x % TPR;
  for (int64_t row0 = int64_t(blockIdx.x) * per_block; row0 < a.N; row0 += int64_t(gridDim.x) * per_block) {
    int64_t n = row0 + local;
    bool live = n < a.N;
    const T* row = x + (live ? n : 0) * a.rs;
    T m = -INFINITY, total = 0;
    if (live)
      for (int64_t c = t; c < a.C; c += TPR) {
        T v = row[c * a.cs];
        m = fmax(m, v);
        total += v;
      }
    m = group_reduce<TPR>(m, MaxOp{}, smem);
    T s = 0;
    if (live)
      for (int64_t c = t; c < a.C; c += TPR) s += exp(row[c * a.cs] - m);
    s = group_reduce<TPR>(s, SumOp{}, smem);
    if (a.eps != 0) total = group_reduce<TPR>(total, SumOp{}, smem);
    if (!live || t != 0) continue;
    T lse = isinf(m) ? m : m + ::log(s);  // a row of -inf (or one +inf): lse is that infinity
    lse_out[n] = lse;
    int64_t y = labels[n * a.ys];
    if (y == a.ignore) {
      losses[n] = 0;
    } else if (y < 0 || y >= a.C) {
      report(fault, y, a.C);
      losses[n] = NAN;
    } else {
      T loss = lse - T(1 - a.eps) * row[y * a.cs];
      if (a.eps != 0) loss -= T(a.eps / double(a.C)) * total;
      losses[n] = loss;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) ce_backward(T* g, int64_t grs, int64_t gcs, const T* gloss, int64_t gs,
                                                        const T* x, const T* lse, int64_t ls, const int64_t* labels,
                                                        CeArgs a, Divmod by_c, bool wide) {
  const T on = T(1 - a.eps), off = T(a.eps / double(a.C));
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.N * a.C;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c;
    if (wide) {
      n = i / a.C;
      c = i - n * a.C;
    } else {
      n = by_c.div(uint32_t(i));
      c = i - n * a.C;
    }
    int64_t y = labels[n * a.ys];
    T* out = g + n * grs + c * gcs;
    if (y == a.ignore || y < 0 || y >= a.C) {  // ignored (or invalid, already reported) rows: zero
      *out = 0;
      continue;
    }
    T scale = gloss[n * gs];
    T v = scale * exp(x[n * a.rs + c * a.cs] - lse[n * ls]) - off * scale;
    if (c == y) v -= on * scale;
    *out = v;
  }
}

template <typename T>
const T* cp(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T>
T* mp(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

struct Layout {
  int64_t outer = 1, C = 1, inner = 1;
};
Layout layout_of(const Tensor& t, int dim) {
  Layout l;
  for (int d = 0; d < t.dim(); ++d) {
    if (d < dim) l.outer *= t.shape()[d];
    else if (d == dim) l.C = t.shape()[d];
    else l.inner *= t.shape()[d];
  }
  return l;
}

}  // namespace

void CudaBackend::softmax_forward(const Tensor& out, const Tensor& x_, int dim, bool log) {
  expect_here(log ? "log_softmax" : "softmax", {&out, &x_});
  if (out.numel() == 0) return;
  Context& c = ctx();
  Tensor x = contiguous_copy(x_);
  Layout l = layout_of(x, dim);
  const char* op = log ? "log_softmax" : "softmax";
  dispatch_float(x.dtype(), op, [&]<typename T>() {
    if (l.inner == 1) {
      if (l.C <= 1024)
        softmax_rows<T, 32><<<c.grid_for(l.outer, kThreads / 32), kThreads, 0, c.stream>>>(cp<T>(x), mp<T>(out),
                                                                                         l.outer, l.C, log);
      else
        softmax_rows<T, kThreads><<<c.grid_for(l.outer, 1), kThreads, 0, c.stream>>>(cp<T>(x), mp<T>(out), l.outer,
                                                                                     l.C, log);
    } else {
      softmax_cols<T><<<c.grid_for(l.outer * l.inner, kThreads), kThreads, 0, c.stream>>>(cp<T>(x), mp<T>(out),
                                                                                           l.outer, l.C, l.inner, log);
    }
    check_launch(op);
  });
}

void CudaBackend::softmax_backward(const Tensor& gx, const Tensor& gy_, const Tensor& y_, int dim, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  expect_here(op, {&gx, &gy_, &y_});
  if (gx.numel() == 0) return;
  Context& c = ctx();
  Tensor gy = contiguous_copy(gy_), y = contiguous_copy(y_);
  Layout l = layout_of(y, dim);
  dispatch_float(y.dtype(), op, [&]<typename T>() {
    if (l.inner == 1) {
      if (l.C <= 1024)
        softmax_rows_backward<T, 32><<<c.grid_for(l.outer, kThreads / 32), kThreads, 0, c.stream>>>(
            mp<T>(gx), cp<T>(gy), cp<T>(y), l.outer, l.C, log);
      else
        softmax_rows_backward<T, kThreads><<<c.grid_for(l.outer, 1), kThreads, 0, c.stream>>>(
            mp<T>(gx), cp<T>(gy), cp<T>(y), l.outer, l.C, log);
    } else {
      softmax_cols_backward<T><<<c.grid_for(l.outer * l.inner, kThreads), kThreads, 0, c.stream>>>(
          mp<T>(gx), cp<T>(gy), cp<T>(y), l.outer, l.C, l.inner, log);
    }
    check_launch(op);
  });
}

void CudaBackend::cross_entropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits,
                                        const Tensor& labels, double label_smoothing, int64_t ignore_index) {
  expect_here("cross_entropy", {&losses, &lse, &logits, &labels});
  int64_t N = logits.shape()[0];
  if (N == 0) return;
  Context& c = ctx();
  CeArgs a{N, logits.shape()[1], logits.strides()[0], logits.strides()[1], labels.strides()[0], ignore_index,
           label_smoothing};
  dispatch_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    if (a.C <= 2048)
      ce_forward<T, 32><<<c.grid_for(N, kThreads / 32), kThreads, 0, c.stream>>>(
          cp<T>(logits), cp<int64_t>(labels), mp<T>(losses), mp<T>(lse), a, c.fault_device);
    else
      ce_forward<T, kThreads><<<c.grid_for(N, 1), kThreads, 0, c.stream>>>(cp<T>(logits), cp<int64_t>(labels),
                                                                           mp<T>(losses), mp<T>(lse), a, c.fault_device);
    check_launch("cross_entropy");
  });
}

void CudaBackend::cross_entropy_backward(const Tensor& glogits, const Tensor& glosses, const Tensor& logits,
                                         const Tensor& lse, const Tensor& labels, double label_smoothing,
                                         int64_t ignore_index) {
  expect_here("cross_entropy_backward", {&glogits, &glosses, &logits, &lse, &labels});
  int64_t N = logits.shape()[0], C = logits.shape()[1];
  if (N * C == 0) return;
  Context& c = ctx();
  CeArgs a{N, C, logits.strides()[0], logits.strides()[1], labels.strides()[0], ignore_index, label_smoothing};
  bool wide = N * C > (int64_t(1) << 31) - 1;
  Divmod by_c(wide ? 1u : uint32_t(C));
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    ce_backward<T><<<c.grid_for(N * C, kThreads), kThreads, 0, c.stream>>>(
        mp<T>(glogits), glogits.strides()[0], glogits.strides()[1], cp<T>(glosses), glosses.strides()[0],
        cp<T>(logits), cp<T>(lse), lse.strides()[0], cp<int64_t>(labels), a, by_c, wide);
    check_launch("cross_entropy_backward");
  });
}

}  // namespace reel::cuda
