// Max pooling on bf16 channels-last activations ([N, C, H, W] with NHWC memory: what
// bf16 convolutions write on AMX and AMD AVX512-BF16 CPUs, Backend::channels_last), in place of the f32
// twins that the low-precision layer would make (two conversions and a layout change
// each way). Memory-bound: each input element read once per window covering it, each
// output written once; the channel loop is the contiguous, vectorised one. 2x2 windows at
// stride 2 and non-overlapping backward windows take one-pass special cases. Same values
// and indices as cpu/pool.cpp's NCHW loops: the first maximum in scan order wins, and the
// last NaN; gradients summed in f32 in (oh, ow) order and rounded once.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "convert.h"
#include "loops.h"

namespace reel::cpu {
namespace {

// whether t's channel dim is its contiguous one (NHWC memory), dims of size 1 aside
bool channels_inner(const Tensor& t) {
  if (t.dim() != 4) return false;
  const Dims cl = channels_last_strides(t.shape());
  for (int d = 0; d < 4; ++d)
    if (t.shape()[d] != 1 && t.strides()[d] != cl[d]) return false;
  return true;
}

// the window of output i along a dim of size `in`, clamped: [begin, end)
std::pair<int64_t, int64_t> window(int64_t i, int64_t in, int64_t k, int64_t s, int64_t pad) {
  int64_t b = i * s - pad, e = std::min(b + k, in + pad);
  return {std::max<int64_t>(b, 0), std::min(e, in)};
}

// One output pixel of a 2x2 window at stride 2 (nearly every CNN's pooling): the four
// source pixels' channels read side by side, no running arrays; cpu/pool.cpp's
// max_plane_2x2 rules (the first maximum wins, then the last NaN).
void max_pixel_2x2(const uint16_t* r0, const uint16_t* r1, int64_t pixel_step, int64_t base, int64_t W,
                   uint16_t* y, int64_t* ind, int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    float best = bf16_to_f32(r0[c]);
    int64_t arg = 0;
    auto consider = [&](float v, int64_t at) {
      const bool take = v > best || v != v;
      best = take ? v : best;
      arg = take ? at : arg;
    };
    consider(bf16_to_f32(r0[pixel_step + c]), 1);
    consider(bf16_to_f32(r1[c]), W);
    consider(bf16_to_f32(r1[pixel_step + c]), W + 1);
    uint32_t u;
    std::memcpy(&u, &best, 4);
    y[c] = uint16_t(u >> 16);  // a bf16 value read as f32: exact, its low bits zero
    ind[c] = base + arg;
  }
}

// g as the f32 sum 0 + g rounded back gives it: -0 becomes +0, a NaN the quiet NaN
// (selects, no branches: the channel loop stays vectorised)
inline uint16_t sum_from_zero(uint16_t g) {
  const uint16_t q = (g & 0x7fffu) > 0x7f80u ? uint16_t(0x7fc0) : g;
  return g == 0x8000u ? uint16_t(0) : q;
}

}  // namespace

bool lowp_max_pool2d_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const PoolParams& p) {
  if (x.dtype() != DType::bf16 || out.dtype() != DType::bf16 || !channels_inner(x) || !channels_inner(out) ||
      !channels_inner(indices))
    return false;
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t OH = out.shape()[2], OW = out.shape()[3];
  const auto* X = static_cast<const uint16_t*>(x.data_ptr());
  auto* Y = static_cast<uint16_t*>(out.data_ptr());
  auto* I = static_cast<int64_t*>(indices.data_ptr());
  const Dims &xs = x.strides(), &ys = out.strides(), &is = indices.strides();
  // ceil_mode's clipped last windows take the general loop
  if (p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 && p.padding[0] == 0 &&
      p.padding[1] == 0 && 2 * OH <= H && 2 * OW <= W) {
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelGrain)
    for (int64_t row = 0; row < N * OH; ++row) {
      const int64_t n = row / OH, oh = row % OH;
      const uint16_t* r0 = X + n * xs[0] + 2 * oh * xs[2];
      for (int64_t ow = 0; ow < OW; ++ow)
        max_pixel_2x2(r0 + 2 * ow * xs[3], r0 + xs[2] + 2 * ow * xs[3], xs[3], 2 * oh * W + 2 * ow, W,
                      Y + n * ys[0] + oh * ys[2] + ow * ys[3], I + n * is[0] + oh * is[2] + ow * is[3], C);
    }
    return true;
  }
#pragma omp parallel if (out.numel() >= kParallelGrain)
  {
    std::vector<float> best(static_cast<size_t>(C));
    std::vector<int64_t> arg(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < N * OH; ++row) {
      const int64_t n = row / OH, oh = row % OH;
      const auto [h0, h1] = window(oh, H, p.kernel[0], p.stride[0], p.padding[0]);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const auto [w0, w1] = window(ow, W, p.kernel[1], p.stride[1], p.padding[1]);
        std::fill(best.begin(), best.end(), -std::numeric_limits<float>::infinity());
        std::fill(arg.begin(), arg.end(), h0 * W + w0);
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            const uint16_t* src = X + n * x.strides()[0] + h * x.strides()[2] + w * x.strides()[3];
            const int64_t at = h * W + w;
            float* b = best.data();
            int64_t* a = arg.data();
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
              const float v = bf16_to_f32(src[c]);
              const bool take = v > b[c] || v != v;  // a NaN wins, as in PyTorch
              b[c] = take ? v : b[c];
              a[c] = take ? at : a[c];
            }
          }
        uint16_t* y = Y + n * out.strides()[0] + oh * out.strides()[2] + ow * out.strides()[3];
        int64_t* ind = I + n * indices.strides()[0] + oh * indices.strides()[2] + ow * indices.strides()[3];
        for (int64_t c = 0; c < C; ++c) {
          uint32_t u;
          std::memcpy(&u, &best[size_t(c)], 4);
          y[c] = uint16_t(u >> 16);  // a bf16 value read as f32: exact, its low bits zero
          ind[c] = arg[size_t(c)];
        }
      }
    }
  }
  return true;
}

bool lowp_max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolParams& p) {
  if (gx.dtype() != DType::bf16 || gy.dtype() != DType::bf16 || !channels_inner(gx) || !channels_inner(indices))
    return false;
  const int64_t N = gx.shape()[0], C = gx.shape()[1], H = gx.shape()[2], W = gx.shape()[3], HW = H * W;
  const int64_t OH = gy.shape()[2], OW = gy.shape()[3];
  const Dims &gs = gy.strides(), &is = indices.strides();
  const auto* G = static_cast<const uint16_t*>(gy.data_ptr());
  const auto* I = static_cast<const int64_t*>(indices.data_ptr());
  auto* X = static_cast<uint16_t*>(gx.data_ptr());
  if (p.stride[0] == p.kernel[0] && p.stride[1] == p.kernel[1] && p.padding[0] == 0 && p.padding[1] == 0) {
    // windows that tile x without overlapping: each gx element is its window's g or 0, so
    // zeros, then each g written at its argmax, with no f32 image to sum in and convert
    const int64_t gc = gs[1];
#pragma omp parallel for schedule(static) if (gx.numel() >= kParallelGrain)
    for (int64_t n = 0; n < N; ++n) {
      uint16_t* dst = X + n * gx.strides()[0];  // [H W, C]
      std::fill(dst, dst + HW * C, uint16_t(0));
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const uint16_t* g = G + n * gs[0] + oh * gs[2] + ow * gs[3];
          const int64_t* ind = I + n * is[0] + oh * is[2] + ow * is[3];
          for (int64_t c = 0; c < C; ++c) dst[ind[c] * C + c] = sum_from_zero(g[c * gc]);
        }
    }
    return true;
  }
  // one image's gradient [H W, C] per thread, from the allocator's block cache: a fresh
  // vector of this size (W4: 200 KB) was mmapped and page-faulted in on every call
  const int64_t threads = omp_get_max_threads();
  Tensor scratch = empty({threads, HW * C});
#pragma omp parallel if (gx.numel() >= kParallelGrain)
  {
    float* acc = scratch.data<float>() + omp_get_thread_num() * HW * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      std::fill(acc, acc + HW * C, 0.0f);
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const uint16_t* g = G + n * gs[0] + oh * gs[2] + ow * gs[3];
          const int64_t* ind = I + n * is[0] + oh * is[2] + ow * is[3];
          for (int64_t c = 0; c < C; ++c) acc[ind[c] * C + c] += bf16_to_f32(g[c * gs[1]]);
        }
      uint16_t* dst = X + n * gx.strides()[0];
      round_span(DType::bf16, dst, acc, HW * C, false);
    }
  }
  return true;
}

}  // namespace reel::cpu

namespace reel::cpu {

// Average pooling of channels-last bf16: per output pixel the window's channel vectors
// summed in f32 in (h, w) order, divided by the count and rounded once, as cpu/pool.cpp's
// f32 loop on converted twins gives.
bool lowp_avg_pool2d_forward(const Tensor& out, const Tensor& x, const PoolParams& p) {
  if (x.dtype() != DType::bf16 || out.dtype() != DType::bf16 || !channels_inner(x) || !channels_inner(out))
    return false;
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t OH = out.shape()[2], OW = out.shape()[3];
  const Dims &xs = x.strides(), &ys = out.strides();
  const auto* X = static_cast<const uint16_t*>(x.data_ptr());
  auto* Y = static_cast<uint16_t*>(out.data_ptr());
#pragma omp parallel if (x.numel() >= kParallelGrain)
  {
    std::vector<float> acc(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < N * OH; ++row) {
      const int64_t n = row / OH, oh = row % OH;
      const auto [h0, h1] = window(oh, H, p.kernel[0], p.stride[0], p.padding[0]);
      const int64_t hb = oh * p.stride[0] - p.padding[0], ph = std::min(hb + p.kernel[0], H + p.padding[0]) - hb;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const auto [w0, w1] = window(ow, W, p.kernel[1], p.stride[1], p.padding[1]);
        const int64_t wb = ow * p.stride[1] - p.padding[1], pw = std::min(wb + p.kernel[1], W + p.padding[1]) - wb;
        const int64_t count = p.count_include_pad ? ph * pw : (h1 - h0) * (w1 - w0);
        float* a = acc.data();
        std::fill(a, a + C, 0.0f);
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            const uint16_t* src = X + n * xs[0] + h * xs[2] + w * xs[3];
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) a[c] += bf16_to_f32(src[c]);
          }
        uint16_t* y = Y + n * ys[0] + oh * ys[2] + ow * ys[3];
        const float div = float(count);
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) y[c] = f32_to_bf16(a[c] / div);
      }
    }
  }
  return true;
}

// Its gradient into channels-last gx: g / count added over each window in f32, (oh, ow)
// order, one image per thread at a time, rounded once.
bool lowp_avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolParams& p) {
  if (gx.dtype() != DType::bf16 || gy.dtype() != DType::bf16 || !channels_inner(gx)) return false;
  const int64_t N = gx.shape()[0], C = gx.shape()[1], H = gx.shape()[2], W = gx.shape()[3], HW = H * W;
  const int64_t OH = gy.shape()[2], OW = gy.shape()[3];
  const Dims& gs = gy.strides();
  const auto* G = static_cast<const uint16_t*>(gy.data_ptr());
  auto* X = static_cast<uint16_t*>(gx.data_ptr());
  const int64_t threads = omp_get_max_threads();
  Tensor scratch = empty({threads, HW * C});  // the allocator's block cache, as max pooling's
#pragma omp parallel if (gx.numel() >= kParallelGrain)
  {
    float* acc = scratch.data<float>() + omp_get_thread_num() * HW * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      std::fill(acc, acc + HW * C, 0.0f);
      for (int64_t oh = 0; oh < OH; ++oh) {
        const auto [h0, h1] = window(oh, H, p.kernel[0], p.stride[0], p.padding[0]);
        const int64_t hb = oh * p.stride[0] - p.padding[0], ph = std::min(hb + p.kernel[0], H + p.padding[0]) - hb;
        for (int64_t ow = 0; ow < OW; ++ow) {
          const auto [w0, w1] = window(ow, W, p.kernel[1], p.stride[1], p.padding[1]);
          const int64_t wb = ow * p.stride[1] - p.padding[1], pw = std::min(wb + p.kernel[1], W + p.padding[1]) - wb;
          const float div = float(p.count_include_pad ? ph * pw : (h1 - h0) * (w1 - w0));
          const uint16_t* g = G + n * gs[0] + oh * gs[2] + ow * gs[3];
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              float* dst = acc + (h * W + w) * C;
              for (int64_t c = 0; c < C; ++c) dst[c] += bf16_to_f32(g[c * gs[1]]) / div;
            }
        }
      }
      round_span(DType::bf16, X + n * gx.strides()[0], acc, HW * C, false);
    }
  }
  return true;
}

}  // namespace reel::cpu
