// MNIST and Fashion-MNIST, stored as IDX files (gzip or plain), and the IDX format
// itself: a big-endian header, magic 0x0000TTDD (TT the element type, DD the number
// of dims), DD 32-bit sizes, then the elements row-major.
//
//   data::ImageSet train = data::load_mnist("/usr/share/datasets/fashion-mnist", data::Split::train);
//   // train.images f32 [60000, 1, 28, 28] in [0, 1]; train.labels i64 [60000]
//
// A file that is corrupt, truncated, too long or of the wrong kind gives an Error
// naming the function, the file and what is wrong.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "dataset.h"

namespace reel::data {

// Decodes an IDX array held in memory into a tensor of the file's dims. Element
// types: u8 -> u8, i8 / i16 / i32 -> i32, f32 -> f32, f64 -> f64. `name` (usually
// the path) goes into errors; `expected_magic`, when not 0, is the one magic
// accepted (0x00000803: u8 images, 0x00000801: u8 labels).
Tensor parse_idx(std::span<const uint8_t> bytes, const std::string& name, uint32_t expected_magic = 0);
Tensor read_idx(const std::string& path, uint32_t expected_magic = 0);

// How image readers deliver pixels: u8 as stored, or f32, divided by 255 when `scale`.
struct ImageOptions {
  DType dtype = DType::f32;
  bool scale = true;
};

// u8 IDX images [N, H, W] -> [N, 1, H, W]
Tensor read_mnist_images(const std::string& path, ImageOptions opt = {});
// u8 IDX labels [N] -> i64 [N]
Tensor read_mnist_labels(const std::string& path);
// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir` and checks that
// images and labels agree in number.
ImageSet load_mnist(const std::string& dir, Split split, ImageOptions opt = {});

}  // namespace reel::data
