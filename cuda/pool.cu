// 2-D pooling, [N, C, H, W] in any layout: max (with i64 indices, flat h*W+w within the
// plane), average (count_include_pad as PyTorch defines it) and adaptive average, forward
// and backward.
//
// Layout: each tensor is addressed through its own sizes and element strides
// (internal/pool_geometry.h): x and gy may be any view (no copy is made first), and out,
// indices and gx are written where their strides put them, since the low-precision layer
// stages an f16/bf16 pool on contiguous f32 twins of out and gx beside channels-last
// indices, and a channels-last backend passes NHWC outputs.
// Launch shape: one thread per element of the tensor written (out forward, gx backward),
// taken in that tensor's memory order, so stores coalesce (and for NHWC the window reads
// coalesce across channels); 256 threads, grid-stride. For a contiguous output that order
// is row-major, as it always was, so contiguous results are unchanged bit for bit.
// The backward passes gather rather than scatter: each input element sums the
// gradients of the windows that contain it, so overlapping windows need no atomics,
// gx needs no zeroing pass, and the result does not depend on thread timing.
// Floor: memory bandwidth (each element is read a window's worth of times from cache).
#include "elementwise.cuh"
#include "internal/pool_geometry.h"

namespace reel::cuda {
namespace {

using geometry::Nchw;
using geometry::PoolTensor;
using geometry::PoolWindow;
using geometry::Span2;

// out, indices = max over each window (a NaN wins) and where it sat; memory-bound, in out's order.
template <typename T>
__global__ void __launch_bounds__(kThreads) max_pool_fwd(const T* x, T* out, int64_t* idx, PoolWindow g, PoolTensor xl,
                                                         PoolTensor ol, PoolTensor il) {
  const int64_t total = ol.numel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Nchw o = ol.at(i);
    const Span2 s = geometry::pool_window(g, o.h, o.w);
    const T* p = x + xl.offset(o.n, o.c, 0, 0);
    T best = -INFINITY;
    int64_t at = s.h0 * g.w + s.w0;
    for (int64_t y = s.h0; y < s.h1; ++y) {
      for (int64_t xx = s.w0; xx < s.w1; ++xx) {
        T v = p[y * xl.stride[2] + xx * xl.stride[3]];
        if (v > best || v != v) {  // a NaN wins (the last one), as in PyTorch and on the CPU
          best = v;
          at = y * g.w + xx;
        }
      }
    }
    out[ol.offset(o)] = best;
    idx[il.offset(o)] = at;
  }
}

// gx[p] = sum of gy over the windows whose max sat at p; memory-bound gather in gx's order.
template <typename T>
__global__ void __launch_bounds__(kThreads) max_pool_bwd(T* gx, const T* gy, const int64_t* idx, PoolWindow g,
                                                         PoolTensor gxl, PoolTensor gyl, PoolTensor il) {
  const int64_t total = gxl.numel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Nchw e = gxl.at(i);
    const int64_t flat = e.h * g.w + e.w;
    const Span2 r = geometry::pool_outputs_of(g, e.h, e.w);
    const int64_t* ip = idx + il.offset(e.n, e.c, 0, 0);
    const T* gp = gy + gyl.offset(e.n, e.c, 0, 0);
    T sum = 0;
    for (int64_t oh = r.h0; oh < r.h1; ++oh)
      for (int64_t ow = r.w0; ow < r.w1; ++ow)
        if (ip[oh * il.stride[2] + ow * il.stride[3]] == flat) sum += gp[oh * gyl.stride[2] + ow * gyl.stride[3]];
    gx[gxl.offset(e)] = sum;
  }
}

// out = mean over each window (divisor per count_include_pad); memory-bound, in out's order.
template <typename T>
__global__ void __launch_bounds__(kThreads) avg_pool_fwd(const T* x, T* out, PoolWindow g, PoolTensor xl,
                                                         PoolTensor ol) {
  const int64_t total = ol.numel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Nchw o = ol.at(i);
    const Span2 s = geometry::pool_window(g, o.h, o.w);
    const T* p = x + xl.offset(o.n, o.c, 0, 0);
    T sum = 0;
    for (int64_t y = s.h0; y < s.h1; ++y)
      for (int64_t xx = s.w0; xx < s.w1; ++xx) sum += p[y * xl.stride[2] + xx * xl.stride[3]];
    out[ol.offset(o)] = sum / T(geometry::avg_divisor(g, o.h, o.w));
  }
}

// gx[p] = sum of gy / divisor over the windows containing p; memory-bound gather in gx's order.
template <typename T>
__global__ void __launch_bounds__(kThreads) avg_pool_bwd(T* gx, const T* gy, PoolWindow g, PoolTensor gxl,
                                                         PoolTensor gyl) {
  const int64_t total = gxl.numel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Nchw e = gxl.at(i);
    const Span2 r = geometry::pool_outputs_of(g, e.h, e.w);
    const T* gp = gy + gyl.offset(e.n, e.c, 0, 0);
    T sum = 0;
    for (int64_t oh = r.h0; oh < r.h1; ++oh)
      for (int64_t ow = r.w0; ow < r.w1; ++ow)
        sum += gp[oh * gyl.stride[2] + ow * gyl.stride[3]] / T(geometry::avg_divisor(g, oh, ow));
    gx[gxl.offset(e)] = sum;
  }
}

// out = mean over each adaptive window; memory-bound, in out's order.
template <typename T>
__global__ void __launch_bounds__(kThreads) adaptive_fwd(const T* x, T* out, PoolWindow g, PoolTensor xl,
                                                         PoolTensor ol) {
  const int64_t total = ol.numel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Nchw o = ol.at(i);
    const Span2 s = geometry::adaptive_window(g, o.h, o.w);
    const T* p = x + xl.offset(o.n, o.c, 0, 0);
    T sum = 0;
    for (int64_t y = s.h0; y < s.h1; ++y)
      for (int64_t xx = s.w0; xx < s.w1; ++xx) sum += p[y * xl.stride[2] + xx * xl.stride[3]];
    out[ol.offset(o)] = sum / T((s.h1 - s.h0) * (s.w1 - s.w0));
  }
}

// gx[p] = sum of gy / window size over the adaptive windows containing p; memory-bound gather.
template <typename T>
__global__ void __launch_bounds__(kThreads) adaptive_bwd(T* gx, const T* gy, PoolWindow g, PoolTensor gxl,
                                                         PoolTensor gyl) {
  const int64_t total = gxl.numel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const Nchw e = gxl.at(i);
    const Span2 r = geometry::adaptive_candidates(g, e.h, e.w);  // a superset: membership checked exactly
    const T* gp = gy + gyl.offset(e.n, e.c, 0, 0);
    T sum = 0;
    for (int64_t oh = r.h0; oh < r.h1; ++oh) {
      for (int64_t ow = r.w0; ow < r.w1; ++ow) {
        const Span2 s = geometry::adaptive_window(g, oh, ow);
        if (e.h < s.h0 || e.h >= s.h1 || e.w < s.w0 || e.w >= s.w1) continue;
        sum += gp[oh * gyl.stride[2] + ow * gyl.stride[3]] / T((s.h1 - s.h0) * (s.w1 - s.w0));
      }
    }
    gx[gxl.offset(e)] = sum;
  }
}

PoolWindow window(const Tensor& in, const Tensor& out, const PoolParams* p) {
  PoolWindow g{};
  g.h = in.shape()[2];
  g.w = in.shape()[3];
  g.oh = out.shape()[2];
  g.ow = out.shape()[3];
  if (p) {
    g.kh = int(p->kernel[0]);
    g.kw = int(p->kernel[1]);
    g.sh = int(p->stride[0]);
    g.sw = int(p->stride[1]);
    g.ph = int(p->padding[0]);
    g.pw = int(p->padding[1]);
    g.include_pad = p->count_include_pad;
  }
  return g;
}

PoolTensor layout(const Tensor& t) { return geometry::pool_tensor(t.shape(), t.strides()); }

template <typename T>
const T* cptr(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T>
T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

}  // namespace

void CudaBackend::max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p) {
  expect_here("max_pool2d", {&out, &indices, &x});
  if (out.numel() == 0) return;
  Context& c = ctx();
  const PoolWindow g = window(x, out, &p);
  dispatch_float(x.dtype(), "max_pool2d", [&]<typename T>() {
    max_pool_fwd<T><<<c.grid_for(out.numel(), kThreads), kThreads, 0, c.stream>>>(
        cptr<T>(x), ptr<T>(out), ptr<int64_t>(indices), g, layout(x), layout(out), layout(indices));
    check_launch("max_pool2d");
  });
}

void CudaBackend::max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolParams& p) {
  expect_here("max_pool2d_backward", {&gx, &gy, &indices});
  if (gx.numel() == 0) return;
  Context& c = ctx();
  const PoolWindow g = window(gx, gy, &p);
  dispatch_float(gx.dtype(), "max_pool2d_backward", [&]<typename T>() {
    max_pool_bwd<T><<<c.grid_for(gx.numel(), kThreads), kThreads, 0, c.stream>>>(
        ptr<T>(gx), cptr<T>(gy), cptr<int64_t>(indices), g, layout(gx), layout(gy), layout(indices));
    check_launch("max_pool2d_backward");
  });
}

void CudaBackend::avg_pool2d_forward(const Tensor& out, const Tensor& x, const PoolParams& p) {
  expect_here("avg_pool2d", {&out, &x});
  if (out.numel() == 0) return;
  Context& c = ctx();
  const PoolWindow g = window(x, out, &p);
  dispatch_float(x.dtype(), "avg_pool2d", [&]<typename T>() {
    avg_pool_fwd<T><<<c.grid_for(out.numel(), kThreads), kThreads, 0, c.stream>>>(cptr<T>(x), ptr<T>(out), g,
                                                                                   layout(x), layout(out));
    check_launch("avg_pool2d");
  });
}

void CudaBackend::avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) {
  expect_here("avg_pool2d_backward", {&gx, &gy});
  if (gx.numel() == 0) return;
  Context& c = ctx();
  const PoolWindow g = window(gx, gy, &p);
  dispatch_float(gx.dtype(), "avg_pool2d_backward", [&]<typename T>() {
    avg_pool_bwd<T><<<c.grid_for(gx.numel(), kThreads), kThreads, 0, c.stream>>>(ptr<T>(gx), cptr<T>(gy), g,
                                                                                  layout(gx), layout(gy));
    check_launch("avg_pool2d_backward");
  });
}

void CudaBackend::adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& x) {
  expect_here("adaptive_avg_pool2d", {&out, &x});
  if (out.numel() == 0) return;
  Context& c = ctx();
  const PoolWindow g = window(x, out, nullptr);
  dispatch_float(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() {
    adaptive_fwd<T><<<c.grid_for(out.numel(), kThreads), kThreads, 0, c.stream>>>(cptr<T>(x), ptr<T>(out), g,
                                                                                   layout(x), layout(out));
    check_launch("adaptive_avg_pool2d");
  });
}

void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& gx, const Tensor& gy) {
  expect_here("adaptive_avg_pool2d_backward", {&gx, &gy});
  if (gx.numel() == 0) return;
  Context& c = ctx();
  const PoolWindow g = window(gx, gy, nullptr);
  dispatch_float(gx.dtype(), "adaptive_avg_pool2d_backward", [&]<typename T>() {
    adaptive_bwd<T><<<c.grid_for(gx.numel(), kThreads), kThreads, 0, c.stream>>>(ptr<T>(gx), cptr<T>(gy), g,
                                                                                  layout(gx), layout(gy));
    check_launch("adaptive_avg_pool2d_backward");
  });
}

}  // namespace reel::cuda
