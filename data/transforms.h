// Image transforms for batches [N, C, H, W] (or one image [C, H, W]) on the CPU.
// Each returns a new tensor and leaves its input alone. The random ones draw one
// choice per image from `seed` and the image's position, so the same seed gives the
// same batch; the DataLoader passes a seed per (epoch, batch) to its transform. One
// seed may drive several transforms: each draws from its own stream of it.
//
//   data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 1,
//       .transform = [](data::Example b, uint64_t seed) {
//         b.data = data::random_horizontal_flip(data::random_crop(b.data, 4, seed), seed);
//         b.data = data::normalize(b.data, {0.4914, 0.4822, 0.4465}, {0.247, 0.243, 0.261});
//         return b;
//       }});
#pragma once
#include <cstdint>
#include <vector>

#include "../autograd/ops.h"  // Size2
#include "../tensor/tensor.h"

namespace reel::data {

// (x - mean[c]) / std[c] per channel c; f32. One mean and one std apply to every channel.
Tensor normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std);
// Pads each image with `padding` zeros on every side, then cuts an H x W window at a
// random offset (per image, uniform over the 2 padding + 1 positions in each axis).
// Any dtype.
Tensor random_crop(const Tensor& x, int64_t padding, uint64_t seed);
// Mirrors each image left-right with probability p. Any dtype.
Tensor random_horizontal_flip(const Tensor& x, uint64_t seed, double p = 0.5);
// Mirrors every image left-right. Any dtype.
Tensor horizontal_flip(const Tensor& x);

// torchvision's RandomResizedCrop: per image, a window of area scale x (H W) and aspect
// ratio (w / h, log-uniform) in `ratio`, at a uniform position (up to 10 tries, then the
// centred window of the nearest admissible ratio), resized to `size` by bilinear
// interpolation (half-pixel centres, as interpolate(..., bilinear, align_corners = false)).
// f32 images; [N, C, H, W] -> [N, C, size.h, size.w].
struct RandomResizedCropOptions {
  double scale_lo = 0.08, scale_hi = 1.0;
  double ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
};
Tensor random_resized_crop(const Tensor& x, Size2 size, uint64_t seed, RandomResizedCropOptions opt = {});
// The window [top, top + h) x [left, left + w) of every image, resized to `size` (bilinear as above).
Tensor resized_crop(const Tensor& x, int64_t top, int64_t left, int64_t h, int64_t w, Size2 size);
// torchvision's ToTensor: u8 images [N, H, W, C] (or [H, W, C]) -> f32 [N, C, H, W] in [0, 1].
Tensor to_tensor(const Tensor& x);

}  // namespace reel::data
