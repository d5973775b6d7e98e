// PNG encoding of 8-bit images (grey, grey+alpha, RGB, RGBA), for TensorBoard's image
// summaries and anything else that wants a picture on disk. No filtering, zlib level 6.
//
//   std::vector<uint8_t> rgb(w * h * 3);                 // rows top to bottom
//   reel::write_png("out.png", rgb.data(), w, h, 3);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace reel {

// The PNG file's bytes for `height` rows of `width` pixels of `channels` (1, 2, 3 or 4)
// interleaved bytes each. Throws reel::Error for other channel counts or empty images.
std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels);

// encode_png written to `path` by write_file_atomically (tensor/atomic_file.h): a failure
// leaves the previous file whole and no temporary.
void write_png(const std::string& path, const uint8_t* pixels, int width, int height, int channels);

}  // namespace reel
