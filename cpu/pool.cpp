// Pooling, NCHW: max (with flat h*W+w indices saved for backward), average
// (count_include_pad or not) and adaptive average, forward and backward.
// Memory-bound: one task per (n, c) plane, each input element read once per window
// covering it, so planes never share an output and the backward scatters need no
// atomics. Plain loops rather than oneDNN: its fast pooling kernels want blocked
// layouts, and it has no i64 indices of the kind our max pooling saves.
#include <cmath>
#include <limits>

#include "cpu_backend.h"
#include "loops.h"

namespace reel::cpu {
namespace {

// A plane-wise loop: f(n, c, plane index) on the OpenMP pool when the work is large.
template <typename F>
void for_planes(int64_t N, int64_t C, int64_t work, F f) {
#pragma omp parallel for schedule(static) if (work >= kParallelGrain)
  for (int64_t p = 0; p < N * C; ++p) f(p / C, p % C, p);
}

// The window of output i along a dim of size `in`: [begin, end) clamped to the input,
// and its size before clamping (the count_include_pad divisor).
struct Window {
  int64_t begin, end, padded;
};
Window window(int64_t i, int64_t in, int64_t k, int64_t s, int64_t pad) {
  int64_t b = i * s - pad, e = std::min(b + k, in + pad);
  return {std::max<int64_t>(b, 0), std::min(e, in), e - b};
}

// y = max of each 2x2 window at stride 2, unpadded (nearly every CNN's pooling), rows
// contiguous: branch-free selects, since the general loop's data-dependent branch
// mispredicted on real activations (8.7 ns per output). Same choices: the first
// maximum in scan order wins, and the last NaN.
template <typename T>
void max_plane_2x2(const T* src, int64_t row_stride, int64_t W, T* y, int64_t* ind, int64_t OH, int64_t OW) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const T* r0 = src + 2 * oh * row_stride;
    const T* r1 = r0 + row_stride;
    const int64_t base = 2 * oh * W;
    for (int64_t ow = 0; ow < OW; ++ow) {
      T best = r0[2 * ow];
      int64_t arg = 0;
      auto consider = [&](T v, int64_t at) {
        bool take = v > best || v != v;
        best = take ? v : best;
        arg = take ? at : arg;
      };
      consider(r0[2 * ow + 1], 1);
      consider(r1[2 * ow], W);
      consider(r1[2 * ow + 1], W + 1);
      y[oh * OW + ow] = best;
      ind[oh * OW + ow] = base + 2 * ow + arg;
    }
  }
}

// One tap of a row of windows: outputs [lo, hi) compare row[ow SW + off] (flat index hW +
// that column) with their best so far. SW a constant and the row contiguous, so the loads
// are a stride GCC vectorises; with the stride a runtime value they were gathers it left
// scalar, a branch an output (ResNet's and DenseNet's 3x3 stride-2 stem pooling of
// [16, 64, 112, 112]: 58 ms, as slow as PyTorch 2.15's 66 ms). Same choices as the general
// loop: the first maximum in scan order wins, and the last NaN.
template <typename T, int64_t SW>
void max_row_tap(const T* row, T* best, int64_t* arg, int64_t lo, int64_t hi, int64_t off, int64_t hW) {
#pragma omp simd
  for (int64_t ow = lo; ow < hi; ++ow) {
    const int64_t w = ow * SW + off;
    const T v = row[w], b = best[ow];
    const int64_t a = arg[ow];
    const bool take = v > b || v != v;  // a NaN wins, as in PyTorch
    best[ow] = take ? v : b;
    arg[ow] = take ? hW + w : a;
  }
}

template <typename T>
void max_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p) {
  int64_t C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], OH = out.shape()[2], OW = out.shape()[3];
  const Dims& xs = x.strides();
  const T* X = static_cast<const T*>(x.data_ptr());
  T* Y = static_cast<T*>(out.data_ptr());
  int64_t* I = static_cast<int64_t*>(indices.data_ptr());
  const bool pair_windows = p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 &&
                            p.padding[0] == 0 && p.padding[1] == 0 && xs[3] == 1 &&
                            2 * OH <= H && 2 * OW <= W;  // ceil_mode's clipped last windows take the general loop
  for_planes(x.shape()[0], C, x.numel(), [&](int64_t n, int64_t c, int64_t plane) {
    const T* src = X + n * xs[0] + c * xs[1];
    T* y = Y + plane * OH * OW;
    int64_t* ind = I + plane * OH * OW;
    if (pair_windows) return max_plane_2x2(src, xs[2], W, y, ind, OH, OW);
    // A row of outputs at a time, tap by tap in each window's scan order (h, then w): the
    // outputs of a row are independent, so the selects run across them, where one window
    // at a time was a chain of dependent compares (and, as a branch, mispredicted: ResNet's
    // 3x3 stride-2 pooling of [32, 64, 112, 112] took 84 ms). Same choices: the first
    // maximum in scan order wins, and the last NaN.
    const int64_t kw = p.kernel[1], sw = p.stride[1], pw = p.padding[1], ws = xs[3];
    for (int64_t oh = 0; oh < OH; ++oh) {
      const Window wh = window(oh, H, p.kernel[0], p.stride[0], p.padding[0]);
      T* best = y + oh * OW;
      int64_t* arg = ind + oh * OW;
      for (int64_t ow = 0; ow < OW; ++ow) {
        best[ow] = -std::numeric_limits<T>::infinity();
        arg[ow] = wh.begin * W + window(ow, W, kw, sw, pw).begin;
      }
      for (int64_t h = wh.begin; h < wh.end; ++h) {
        const T* row = src + h * xs[2];
        for (int64_t j = 0; j < kw; ++j) {
          // the outputs whose tap j falls inside the row: 0 <= ow sw - pw + j < W
          const int64_t lo = std::max<int64_t>(0, (pw - j + sw - 1) / sw);
          const int64_t hi = std::min<int64_t>(OW, pw - j + W > 0 ? (W - 1 + pw - j) / sw + 1 : 0);
          if (ws == 1 && sw == 1) {
            max_row_tap<T, 1>(row, best, arg, lo, hi, j - pw, h * W);
            continue;
          }
          if (ws == 1 && sw == 2) {
            max_row_tap<T, 2>(row, best, arg, lo, hi, j - pw, h * W);
            continue;
          }
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) {
            const int64_t w = ow * sw - pw + j;
            const T v = row[w * ws];
            const bool take = v > best[ow] || v != v;  // a NaN wins, as in PyTorch
            best[ow] = take ? v : best[ow];
            arg[ow] = take ? h * W + w : arg[ow];
          }
        }
      }
    }
  });
}

template <typename T>
void max_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices) {
  int64_t C = gx.shape()[1], HW = gx.shape()[2] * gx.shape()[3], OH = gy.shape()[2], OW = gy.shape()[3];
  const Dims& gs = gy.strides();
  const T* G = static_cast<const T*>(gy.data_ptr());
  const int64_t* I = static_cast<const int64_t*>(indices.data_ptr());
  T* X = static_cast<T*>(gx.data_ptr());
  for_planes(gx.shape()[0], C, gx.numel(), [&](int64_t n, int64_t c, int64_t plane) {
    T* dst = X + plane * HW;
    std::fill(dst, dst + HW, T(0));
    const T* g = G + n * gs[0] + c * gs[1];
    const int64_t* ind = I + plane * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) dst[ind[oh * OW + ow]] += g[oh * gs[2] + ow * gs[3]];
  });
}

// 2x2 windows at stride 2, unpadded, every window whole (DenseNet's transitions): rows
// contiguous and the taps constants, so the loop vectorises; the general loop's window
// arithmetic per output left it scalar (W11: 4 ms a call). The general loop's bits: the
// sum from 0 in scan order, then the division by 4.
bool avg_pair_windows(const PoolParams& p, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t width_stride) {
  return p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 && p.padding[0] == 0 &&
         p.padding[1] == 0 && width_stride == 1 && 2 * OH <= H && 2 * OW <= W;
}

template <typename T>
void avg_forward(const Tensor& out, const Tensor& x, const PoolParams& p) {
  int64_t C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], OH = out.shape()[2], OW = out.shape()[3];
  const Dims& xs = x.strides();
  const T* X = static_cast<const T*>(x.data_ptr());
  T* Y = static_cast<T*>(out.data_ptr());
  const bool pairs = avg_pair_windows(p, H, W, OH, OW, xs[3]);
  for_planes(x.shape()[0], C, x.numel(), [&](int64_t n, int64_t c, int64_t plane) {
    const T* src = X + n * xs[0] + c * xs[1];
    T* y = Y + plane * OH * OW;
    if (pairs) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        const T* __restrict r0 = src + 2 * oh * xs[2];
        const T* __restrict r1 = r0 + xs[2];
        T* __restrict o = y + oh * OW;
#pragma omp simd
        for (int64_t ow = 0; ow < OW; ++ow)
          o[ow] = ((((T(0) + r0[2 * ow]) + r0[2 * ow + 1]) + r1[2 * ow]) + r1[2 * ow + 1]) / T(4);
      }
      return;
    }
    for (int64_t oh = 0; oh < OH; ++oh) {
      Window wh = window(oh, H, p.kernel[0], p.stride[0], p.padding[0]);
      for (int64_t ow = 0; ow < OW; ++ow) {
        Window ww = window(ow, W, p.kernel[1], p.stride[1], p.padding[1]);
        T acc = 0;
        for (int64_t h = wh.begin; h < wh.end; ++h)
          for (int64_t w = ww.begin; w < ww.end; ++w) acc += src[h * xs[2] + w * xs[3]];
        int64_t count = p.count_include_pad ? wh.padded * ww.padded : (wh.end - wh.begin) * (ww.end - ww.begin);
        y[oh * OW + ow] = acc / T(count);
      }
    }
  });
}

template <typename T>
void avg_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) {
  int64_t C = gx.shape()[1], H = gx.shape()[2], W = gx.shape()[3], OH = gy.shape()[2], OW = gy.shape()[3];
  const Dims& gs = gy.strides();
  const T* G = static_cast<const T*>(gy.data_ptr());
  T* X = static_cast<T*>(gx.data_ptr());
  const bool pairs = avg_pair_windows(p, H, W, OH, OW, gs[3]);
  for_planes(gx.shape()[0], C, gx.numel(), [&](int64_t n, int64_t c, int64_t plane) {
    T* dst = X + plane * H * W;
    // the pairs cover an even plane whole: each input in one window, written once
    if (!pairs || 2 * OH != H || 2 * OW != W) std::fill(dst, dst + H * W, T(0));
    const T* g = G + n * gs[0] + c * gs[1];
    if (pairs) {  // each input in one window: 0 + its share, as the general loop adds it
      for (int64_t oh = 0; oh < OH; ++oh) {
        const T* __restrict gr = g + oh * gs[2];
        T* __restrict d0 = dst + 2 * oh * W;
        T* __restrict d1 = d0 + W;
#pragma omp simd
        for (int64_t ow = 0; ow < OW; ++ow) {
          const T share = T(0) + gr[ow] / T(4);
          d0[2 * ow] = share;
          d0[2 * ow + 1] = share;
          d1[2 * ow] = share;
          d1[2 * ow + 1] = share;
        }
      }
      return;
    }
    for (int64_t oh = 0; oh < OH; ++oh) {
      Window wh = window(oh, H, p.kernel[0], p.stride[0], p.padding[0]);
      for (int64_t ow = 0; ow < OW; ++ow) {
        Window ww = window(ow, W, p.kernel[1], p.stride[1], p.padding[1]);
        int64_t count = p.count_include_pad ? wh.padded * ww.padded : (wh.end - wh.begin) * (ww.end - ww.begin);
        T share = g[oh * gs[2] + ow * gs[3]] / T(count);
        for (int64_t h = wh.begin; h < wh.end; ++h)
          for (int64_t w = ww.begin; w < ww.end; ++w) dst[h * W + w] += share;
      }
    }
  });
}

// Adaptive windows, as PyTorch: output i of `out` averages [floor(i in / out), ceil((i + 1) in / out)).
int64_t adaptive_begin(int64_t i, int64_t in, int64_t out) { return i * in / out; }
int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

template <typename T>
void adaptive_forward(const Tensor& out, const Tensor& x) {
  int64_t C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], OH = out.shape()[2], OW = out.shape()[3];
  const Dims& xs = x.strides();
  const T* X = static_cast<const T*>(x.data_ptr());
  T* Y = static_cast<T*>(out.data_ptr());
  for_planes(x.shape()[0], C, x.numel(), [&](int64_t n, int64_t c, int64_t plane) {
    const T* src = X + n * xs[0] + c * xs[1];
    T* y = Y + plane * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = adaptive_begin(oh, H, OH), h1 = adaptive_end(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = adaptive_begin(ow, W, OW), w1 = adaptive_end(ow, W, OW);
        T acc = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) acc += src[h * xs[2] + w * xs[3]];
        y[oh * OW + ow] = acc / T((h1 - h0) * (w1 - w0));
      }
    }
  });
}

template <typename T>
void adaptive_backward(const Tensor& gx, const Tensor& gy) {
  int64_t C = gx.shape()[1], H = gx.shape()[2], W = gx.shape()[3], OH = gy.shape()[2], OW = gy.shape()[3];
  const Dims& gs = gy.strides();
  const T* G = static_cast<const T*>(gy.data_ptr());
  T* X = static_cast<T*>(gx.data_ptr());
  for_planes(gx.shape()[0], C, gx.numel(), [&](int64_t n, int64_t c, int64_t plane) {
    T* dst = X + plane * H * W;
    std::fill(dst, dst + H * W, T(0));
    const T* g = G + n * gs[0] + c * gs[1];
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = adaptive_begin(oh, H, OH), h1 = adaptive_end(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = adaptive_begin(ow, W, OW), w1 = adaptive_end(ow, W, OW);
        T share = g[oh * gs[2] + ow * gs[3]] / T((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) dst[h * W + w] += share;
      }
    }
  });
}

}  // namespace

void CpuBackend::max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p) {
  dispatch_float(x.dtype(), "max_pool2d", [&]<typename T>() { max_forward<T>(out, indices, x, p); });
}
void CpuBackend::max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolParams&) {
  dispatch_float(gx.dtype(), "max_pool2d", [&]<typename T>() { max_backward<T>(gx, gy, indices); });
}
void CpuBackend::avg_pool2d_forward(const Tensor& out, const Tensor& x, const PoolParams& p) {
  dispatch_float(x.dtype(), "avg_pool2d", [&]<typename T>() { avg_forward<T>(out, x, p); });
}
void CpuBackend::avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) {
  dispatch_float(gx.dtype(), "avg_pool2d", [&]<typename T>() { avg_backward<T>(gx, gy, p); });
}
void CpuBackend::adaptive_avg_pool2d_forward(const Tensor& out, const Tensor& x) {
  dispatch_float(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() { adaptive_forward<T>(out, x); });
}
void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& gx, const Tensor& gy) {
  dispatch_float(gx.dtype(), "adaptive_avg_pool2d", [&]<typename T>() { adaptive_backward<T>(gx, gy); });
}

}  // namespace reel::cpu
