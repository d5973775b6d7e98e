// Image transforms: plain loops over host memory. They run in the DataLoader's
// worker threads, so they stay off the OpenMP pool the training step uses.
#include "transforms.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "internal/io.h"

namespace reel::data {

namespace {

// Each random transform draws from its own stream of the seed, so one seed can
// drive a crop and a flip without the two choices being related.
constexpr uint64_t kCropStream = 0x63726f70, kFlipStream = 0x666c6970, kResizedCropStream = 0x72726370;

// The generator for image i of a batch.
internal::SplitMix image_rng(uint64_t seed, uint64_t stream, int64_t i) {
  return internal::SplitMix(internal::derive_seed(internal::derive_seed(seed, stream), uint64_t(i)));
}

// x as a contiguous CPU tensor of images [N, C, H, W] (a single image gets N = 1).
struct Images {
  Tensor t;
  int64_t n, c, h, w;
  size_t elem;
};

Images images(const char* op, const Tensor& x) {
  if (!x.defined()) throw Error(fmt::format("{}: the tensor is undefined", op));
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(fmt::format("{}: expected images [N, C, H, W] or [C, H, W], got shape {}", op, x.shape().str()));
  if (!x.device().is_cpu())
    throw Error(fmt::format("{}: expected a CPU tensor, got one on {}; transform before the copy to the device", op,
                            x.device().str()));
  Tensor t = x.detach().contiguous();
  int o = x.dim() == 4 ? 1 : 0;
  return {t, o ? x.size(0) : 1, x.size(o), x.size(o + 1), x.size(o + 2), x.element_size()};
}

// Copies image rows with a per-image horizontal flip.
void flip_into(const Images& in, const Tensor& out, const std::vector<bool>& flip) {
  const char* src = static_cast<const char*>(in.t.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  size_t row = size_t(in.w) * in.elem;
  for (int64_t i = 0; i < in.n; ++i) {
    size_t plane = size_t(in.c * in.h);
    size_t base = size_t(i) * plane * row;
    if (!flip[size_t(i)]) {
      std::memcpy(dst + base, src + base, plane * row);
      continue;
    }
    for (size_t r = 0; r < plane; ++r) {
      const char* s = src + base + r * row;
      char* d = dst + base + r * row;
      for (int64_t x = 0; x < in.w; ++x) std::memcpy(d + x * in.elem, s + (in.w - 1 - x) * in.elem, in.elem);
    }
  }
}

// Bilinear resize of one [C, h, w] window at (top, left) of a [C, H, W] f32 image into
// [C, oh, ow]: source coordinate (o + 0.5) scale - 0.5 clamped at 0, as PyTorch's
// upsample_bilinear2d with align_corners = false.
void resize_window(const float* src, int64_t c, int64_t H, int64_t W, int64_t top, int64_t left, int64_t h,
                   int64_t w, float* dst, int64_t oh, int64_t ow) {
  const float sy = float(h) / float(oh), sx = float(w) / float(ow);
  for (int64_t y = 0; y < oh; ++y) {
    float fy = std::max(0.0f, (float(y) + 0.5f) * sy - 0.5f);
    int64_t y0 = std::min(int64_t(fy), h - 1), y1 = std::min(y0 + 1, h - 1);
    float ly = fy - float(y0);
    for (int64_t x = 0; x < ow; ++x) {
      float fx = std::max(0.0f, (float(x) + 0.5f) * sx - 0.5f);
      int64_t x0 = std::min(int64_t(fx), w - 1), x1 = std::min(x0 + 1, w - 1);
      float lx = fx - float(x0);
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* p = src + (ch * H + top) * W + left;
        float v = (1 - ly) * ((1 - lx) * p[y0 * W + x0] + lx * p[y0 * W + x1]) +
                  ly * ((1 - lx) * p[y1 * W + x0] + lx * p[y1 * W + x1]);
        dst[(ch * oh + y) * ow + x] = v;
      }
    }
  }
}

Images f32_images(const char* op, const Tensor& x) {
  Images in = images(op, x);
  if (x.dtype() != DType::f32)
    throw Error(fmt::format("{}: expected f32 images, got {}; convert with to_tensor or .to(DType::f32) first", op,
                            dtype_name(x.dtype())));
  return in;
}

Dims resized_shape(const Tensor& x, Size2 size) {
  Dims shape = x.shape();
  shape[x.dim() - 2] = size.h;
  shape[x.dim() - 1] = size.w;
  return shape;
}

}  // namespace

Tensor resized_crop(const Tensor& x, int64_t top, int64_t left, int64_t h, int64_t w, Size2 size) {
  Images in = f32_images("resized_crop", x);
  if (top < 0 || left < 0 || h <= 0 || w <= 0 || top + h > in.h || left + w > in.w || size.h <= 0 || size.w <= 0)
    throw Error(fmt::format("resized_crop: the window top {} left {} height {} width {} must lie inside the {}x{} "
                            "images and the size ({}, {}) be positive", top, left, h, w, in.h, in.w, size.h, size.w));
  Tensor out = empty(resized_shape(x, size), {.dtype = DType::f32});
  for (int64_t i = 0; i < in.n; ++i)
    resize_window(in.t.data<float>() + i * in.c * in.h * in.w, in.c, in.h, in.w, top, left, h, w,
                  out.data<float>() + i * in.c * size.h * size.w, size.h, size.w);
  return out;
}

Tensor random_resized_crop(const Tensor& x, Size2 size, uint64_t seed, RandomResizedCropOptions opt) {
  Images in = f32_images("random_resized_crop", x);
  if (!(opt.scale_lo > 0 && opt.scale_lo <= opt.scale_hi && opt.ratio_lo > 0 && opt.ratio_lo <= opt.ratio_hi) ||
      size.h <= 0 || size.w <= 0)
    throw Error(fmt::format("random_resized_crop: expected 0 < scale_lo <= scale_hi, 0 < ratio_lo <= ratio_hi and a "
                            "positive size, got scale ({}, {}), ratio ({}, {}), size ({}, {})", opt.scale_lo,
                            opt.scale_hi, opt.ratio_lo, opt.ratio_hi, size.h, size.w));
  Tensor out = empty(resized_shape(x, size), {.dtype = DType::f32});
  const double area = double(in.h * in.w), log_lo = std::log(opt.ratio_lo), log_hi = std::log(opt.ratio_hi);
  for (int64_t i = 0; i < in.n; ++i) {
    internal::SplitMix rng = image_rng(seed, kResizedCropStream, i);
    int64_t h = 0, w = 0, top = 0, left = 0;
    for (int attempt = 0; attempt < 10 && h == 0; ++attempt) {  // torchvision's get_params
      double target = area * (opt.scale_lo + (opt.scale_hi - opt.scale_lo) * rng.unit());
      double ratio = std::exp(log_lo + (log_hi - log_lo) * rng.unit());
      int64_t cw = std::llround(std::sqrt(target * ratio)), ch = std::llround(std::sqrt(target / ratio));
      if (cw > 0 && ch > 0 && cw <= in.w && ch <= in.h) {
        h = ch, w = cw;
        top = int64_t(rng.below(uint64_t(in.h - h + 1)));
        left = int64_t(rng.below(uint64_t(in.w - w + 1)));
      }
    }
    if (h == 0) {  // the centred crop of the whole image, its ratio clamped into range
      double r = double(in.w) / double(in.h);
      if (r < opt.ratio_lo) w = in.w, h = std::llround(double(w) / opt.ratio_lo);
      else if (r > opt.ratio_hi) h = in.h, w = std::llround(double(h) * opt.ratio_hi);
      else w = in.w, h = in.h;
      h = std::clamp<int64_t>(h, 1, in.h), w = std::clamp<int64_t>(w, 1, in.w);
      top = (in.h - h) / 2, left = (in.w - w) / 2;
    }
    resize_window(in.t.data<float>() + i * in.c * in.h * in.w, in.c, in.h, in.w, top, left, h, w,
                  out.data<float>() + i * in.c * size.h * size.w, size.h, size.w);
  }
  return out;
}

Tensor to_tensor(const Tensor& x) {
  if (!x.defined()) throw Error("to_tensor: the tensor is undefined");
  if (x.dtype() != DType::u8 || (x.dim() != 3 && x.dim() != 4) || !x.device().is_cpu())
    throw Error(fmt::format("to_tensor: expected u8 CPU images [N, H, W, C] or [H, W, C], got {} {} on {}",
                            dtype_name(x.dtype()), x.shape().str(), x.device().str()));
  Tensor chw = x.dim() == 4 ? x.permute({0, 3, 1, 2}) : x.permute({2, 0, 1});
  return (chw.to(DType::f32) / 255.0).contiguous();  // a true division, as torchvision: the same bits
}

Tensor normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std) {
  Images in = images("normalize", x);
  if (x.dtype() != DType::f32)
    throw Error(fmt::format("normalize: expected f32 images, got {}; convert with .to(DType::f32) first",
                            dtype_name(x.dtype())));
  auto per_channel = [&](const std::vector<double>& v, const char* what) {
    if (v.size() == 1) return std::vector<double>(size_t(in.c), v[0]);
    if (int64_t(v.size()) != in.c)
      throw Error(fmt::format("normalize: {} has {} values for {} channels (shape {})", what, v.size(), in.c,
                              x.shape().str()));
    return v;
  };
  std::vector<double> m = per_channel(mean, "mean"), s = per_channel(std, "std");
  for (size_t c = 0; c < s.size(); ++c)
    if (!(s[c] > 0)) throw Error(fmt::format("normalize: std[{}] is {}; it must be positive", c, s[c]));
  Tensor out = empty(x.shape(), {.dtype = DType::f32});
  const float* src = in.t.data<float>();
  float* dst = out.data<float>();
  int64_t plane = in.h * in.w;
  for (int64_t i = 0; i < in.n; ++i)
    for (int64_t c = 0; c < in.c; ++c) {
      float mc = float(m[size_t(c)]), k = float(1.0 / s[size_t(c)]);
      int64_t base = (i * in.c + c) * plane;
      for (int64_t p = 0; p < plane; ++p) dst[base + p] = (src[base + p] - mc) * k;
    }
  return out;
}

Tensor random_crop(const Tensor& x, int64_t padding, uint64_t seed) {
  Images in = images("random_crop", x);
  if (padding < 0) throw Error(fmt::format("random_crop: padding must be 0 or more, got {}", padding));
  Tensor out = zeros(x.shape(), {.dtype = x.dtype()});
  const char* src = static_cast<const char*>(in.t.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < in.n; ++i) {
    internal::SplitMix rng = image_rng(seed, kCropStream, i);
    // the window's top-left corner in padded coordinates, shifted to the image's
    int64_t dy = int64_t(rng.below(uint64_t(2 * padding + 1))) - padding;
    int64_t dx = int64_t(rng.below(uint64_t(2 * padding + 1))) - padding;
    int64_t x0 = std::max<int64_t>(0, -dx), x1 = std::min(in.w, in.w - dx);  // output columns with a source
    if (x1 <= x0) continue;
    for (int64_t c = 0; c < in.c; ++c)
      for (int64_t y = 0; y < in.h; ++y) {
        int64_t sy = y + dy;
        if (sy < 0 || sy >= in.h) continue;
        size_t plane = size_t((i * in.c + c) * in.h);
        std::memcpy(dst + ((plane + size_t(y)) * size_t(in.w) + size_t(x0)) * in.elem,
                    src + ((plane + size_t(sy)) * size_t(in.w) + size_t(x0 + dx)) * in.elem,
                    size_t(x1 - x0) * in.elem);
      }
  }
  return out;
}

Tensor random_horizontal_flip(const Tensor& x, uint64_t seed, double p) {
  Images in = images("random_horizontal_flip", x);
  if (!(p >= 0 && p <= 1)) throw Error(fmt::format("random_horizontal_flip: p must be in [0, 1], got {}", p));
  std::vector<bool> flip(size_t(in.n));
  for (int64_t i = 0; i < in.n; ++i) flip[size_t(i)] = image_rng(seed, kFlipStream, i).unit() < p;
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  flip_into(in, out, flip);
  return out;
}

Tensor horizontal_flip(const Tensor& x) {
  Images in = images("horizontal_flip", x);
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  flip_into(in, out, std::vector<bool>(size_t(in.n), true));
  return out;
}

}  // namespace reel::data
