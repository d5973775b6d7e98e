// 2-D pooling, NCHW: max (with i64 indices, flat h*W+w within the plane), average
// (count_include_pad as PyTorch defines it) and adaptive average, forward and backward.
//
// Layout: x and gy are read contiguous (a strided input is copied first); out, indices
// and gx are contiguous. Launch shape: one thread per output element (forward) or per
// input element (backward), 256 threads, grid-stride over N*C*H*W.
// The backward passes gather rather than scatter: each input element sums the
// gradients of the windows that contain it, so overlapping windows need no atomics,
// gx needs no zeroing pass, and the result does not depend on thread timing.
// Floor: memory bandwidth (each element is read a window's worth of times from cache).
#include "elementwise.cuh"

namespace reel::cuda {
namespace {

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

struct Geom {
  int64_t planes, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw;
  bool include_pad;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) max_pool_fwd(const T* x, T* out, int64_t* idx, Geom g) {
  int64_t total = g.planes * g.oh * g.ow;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
    int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    int64_t he = imin(hs + g.kh, g.h), we = imin(ws + g.kw, g.w);
    hs = imax(hs, 0);
    ws = imax(ws, 0);
    const T* p = x + plane * g.h * g.w;
    T best = -INFINITY;
    int64_t at = hs * g.w + ws;
    for (int64_t y = hs; y < he; ++y) {
      for (int64_t xx = ws; xx < we; ++xx) {
        T v = p[y * g.w + xx];
        if (v > best || v != v) {  // a NaN wins (the last one), as in PyTorch and on the CPU
          best = v;
          at = y * g.w + xx;
        }
      }
    }
    out[i] = best;
    idx[i] = at;
  }
}

// gx[p] = sum of gy over the windows whose max sat at p
template <typename T>
__global__ void __launch_bounds__(kThreads) max_pool_bwd(T* gx, const T* gy, const int64_t* idx, Geom g) {
  int64_t total = g.planes * g.h * g.w;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t x = i % g.w, y = (i / g.w) % g.h, plane = i / (g.w * g.h);
    int64_t flat = y * g.w + x;
    // the outputs whose windows contain (y, x)
    int64_t oh0 = y + g.ph < g.kh ? 0 : (y + g.ph - g.kh) / g.sh + 1, oh1 = imin((y + g.ph) / g.sh + 1, g.oh);
    int64_t ow0 = x + g.pw < g.kw ? 0 : (x + g.pw - g.kw) / g.sw + 1, ow1 = imin((x + g.pw) / g.sw + 1, g.ow);
    const int64_t* ip = idx + plane * g.oh * g.ow;
    const T* gp = gy + plane * g.oh * g.ow;
    T sum = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow)
        if (ip[oh * g.ow + ow] == flat) sum += gp[oh * g.ow + ow];
    gx[i] = sum;
  }
}

// The divisor of output (oh, ow): the window's size clipped to the padded input, or to the input.
__device__ __forceinline__ int64_t avg_divisor(const Geom& g, int64_t oh, int64_t ow) {
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int64_t he = imin(hs + g.kh, g.h + g.ph), we = imin(ws + g.kw, g.w + g.pw);
  int64_t pool = (he - hs) * (we - ws);
  if (g.include_pad) return pool;
  hs = imax(hs, 0);
  ws = imax(ws, 0);
  he = imin(he, g.h);
  we = imin(we, g.w);
  return imax((he - hs) * (we - ws), int64_t(1));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) avg_pool_fwd(const T* x, T* out, Geom g) {
  int64_t total = g.planes * g.oh * g.ow;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
    int64_t hs = imax(oh * g.sh - g.ph, 0), ws = imax(ow * g.sw - g.pw, 0);
    int64_t he = imin(oh * g.sh - g.ph + g.kh, g.h), we = imin(ow * g.sw - g.pw + g.kw, g.w);
    const T* p = x + plane * g.h * g.w;
    T sum = 0;
    for (int64_t y = hs; y < he; ++y)
      for (int64_t xx = ws; xx < we; ++xx) sum += p[y * g.w + xx];
    out[i] = sum / T(avg_divisor(g, oh, ow));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) avg_pool_bwd(T* gx, const T* gy, Geom g) {
  int64_t total = g.planes * g.h * g.w;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t x = i % g.w, y = (i / g.w) % g.h, plane = i / (g.w * g.h);
    int64_t oh0 = y + g.ph < g.kh ? 0 : (y + g.ph - g.kh) / g.sh + 1, oh1 = imin((y + g.ph) / g.sh + 1, g.oh);
    int64_t ow0 = x + g.pw < g.kw ? 0 : (x + g.pw - g.kw) / g.sw + 1, ow1 = imin((x + g.pw) / g.sw + 1, g.ow);
    const T* gp = gy + plane * g.oh * g.ow;
    T sum = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) sum += gp[oh * g.ow + ow] / T(avg_divisor(g, oh, ow));
    gx[i] = sum;
  }
}

// adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out))
__device__ __forceinline__ int64_t win_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
__device__ __forceinline__ int64_t win_end(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) adaptive_fwd(const T* x, T* out, Geom g) {
  int64_t total = g.planes * g.oh * g.ow;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
    int64_t hs = win_start(oh, g.h, g.oh), he = win_end(oh, g.h, g.oh);
    int64_t ws = win_start(ow, g.w, g.ow), we = win_end(ow, g.w, g.ow);
    const T* p = x + plane * g.h * g.w;
    T sum = 0;
    for (int64_t y = hs; y < he; ++y)
      for (int64_t xx = ws; xx < we; ++xx) sum += p[y * g.w + xx];
    out[i] = sum / T((he - hs) * (we - ws));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) adaptive_bwd(T* gx, const T* gy, Geom g) {
  int64_t total = g.planes * g.h * g.w;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t x = i % g.w, y = (i / g.w) % g.h, plane = i / (g.w * g.h);
    // candidate outputs: those whose windows may contain (y, x); membership is checked exactly
    int64_t oh0 = (y * g.oh) / g.h, oh1 = imin(((y + 1) * g.oh + g.h - 1) / g.h, g.oh);
    int64_t ow0 = (x * g.ow) / g.w, ow1 = imin(((x + 1) * g.ow + g.w - 1) / g.w, g.ow);
    const T* gp = gy + plane * g.oh * g.ow;
    T sum = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      int64_t hs = win_start(oh, g.h, g.oh), he = win_end(oh, g.h, g.oh);
      if (y < hs || y >= he) continue;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        int64_t ws = win_start(ow, g.w, g.ow), we = win_end(ow, g.w, g.ow);
        if (x < ws || x >= we) continue;
        sum += gp[oh * g.ow + ow] / T((he - hs) * (we - ws));
      }
    }
    gx[i] = sum;
  }
}

Geom geom(const Tensor& in, const Tensor& out, const PoolParams* p) {
  Geom g{};
  g.planes = in.shape()[0] * in.shape()[1];
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

template <typename T>
const T* cptr(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T>
T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

}  // namespace

void CudaBackend::max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x_, const PoolParams& p) {
  expect_here("max_pool2d", {&out, &indices, &x_});
  if (out.numel() == 0) return;
  Context& c = ctx();
  Tensor x = contiguous_copy(x_);
  Geom g = geom(x, out, &p);
  dispatch_float(x.dtype(), "max_pool2d", [&]<typename T>() {
    max_pool_fwd<T><<<c.grid_for(out.numel(), kThreads), kThreads, 0, c.stream>>>(cptr<T>(x), ptr<T>(out),
                                                                                   ptr<int64_t>(indices), g);
    check_launch("max_pool2d");
  });
}

void CudaBackend::max_pool2d_backward(const Tensor& gx, const Tensor& gy_, const Tensor& indices_,
                                      const PoolParams& p) {
  expect_here("max_pool2d_backward", {&gx, &gy_, &indices_});
  if (gx.numel() == 0) return;
  Context& c = ctx();
  Tensor gy = contiguous_copy(gy_), indices = contiguous_copy(indices_);
  Geom g = geom(gx, gy, &p);
  dispatch_float(gx.dtype(), "max_pool2d_backward", [&]<typename T>() {
    max_pool_bwd<T><<<c.grid_for(gx.numel(), kThreads), kThreads, 0, c.stream>>>(ptr<T>(gx), cptr<T>(gy),
                                                                                  cptr<int64_t>(indices), g);
    check_launch("max_pool2d_backward");
  });
}

void CudaBackend::avg_pool2d_forward(const Tensor& out, const Tensor& x_, const PoolParams& p) {
  expect_here("avg_pool2d", {&out, &x_});
  if (out.numel() == 0) return;
  Context& c = ctx();
  Tensor x = contiguous_copy(x_);
  Geom g = geom(x, out, &p);
  dispatch_float(x.dtype(), "avg_pool2d", [&]<typename T>() {
    avg_pool_fwd<T><<<c.grid_for(out.numel(), kThreads), kThreads, 0, c.stream>>>(cptr<T>(x), ptr<T>(out), g);
    check_launch("avg_pool2d");
  });
}

void CudaBackend::avg_pool2d_backward(const Tensor& gx, const Tensor& gy_, const PoolParams& p) {
  expect_here("avg_pool2d_backward", {&gx, &gy_});
  if (gx.numel() == 0) return;
  Context& c = ctx();
  Tensor gy = contiguous_copy(gy_);
  Geom g = geom(gx, gy, &p);
  dispatch_float(gx.dtype(), "avg_pool2d_backward", [&]<typename T>() {
    avg_pool_bwd<T><<<c.grid_for(gx.numel(), kThreads), kThreads, 0, c.stream>>>(ptr<T>(gx), cptr<T>(gy), g);
    check_launch("avg_pool2d_backward");
  });
}

void CudaBackend::adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& x_) {
  expect_here("adaptive_avg_pool2d", {&out, &x_});
  if (out.numel() == 0) return;
  Context& c = ctx();
  Tensor x = contiguous_copy(x_);
  Geom g = geom(x, out, nullptr);
  dispatch_float(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() {
    adaptive_fwd<T><<<c.grid_for(out.numel(), kThreads), kThreads, 0, c.stream>>>(cptr<T>(x), ptr<T>(out), g);
    check_launch("adaptive_avg_pool2d");
  });
}

void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& gx, const Tensor& gy_) {
  expect_here("adaptive_avg_pool2d_backward", {&gx, &gy_});
  if (gx.numel() == 0) return;
  Context& c = ctx();
  Tensor gy = contiguous_copy(gy_);
  Geom g = geom(gx, gy, nullptr);
  dispatch_float(gx.dtype(), "adaptive_avg_pool2d_backward", [&]<typename T>() {
    adaptive_bwd<T><<<c.grid_for(gx.numel(), kThreads), kThreads, 0, c.stream>>>(ptr<T>(gx), cptr<T>(gy), g);
    check_launch("adaptive_avg_pool2d_backward");
  });
}

}  // namespace reel::cuda
