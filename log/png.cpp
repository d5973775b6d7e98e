// PNG: the 8-byte signature, then chunks of (length, type, data, CRC-32 of type and
// data): IHDR (size, bit depth 8, colour type), IDAT (the zlib stream of the rows,
// each led by filter byte 0) and IEND. Big-endian throughout.
#include "png.h"

#include <zlib.h>

#include <cstring>

#include "../tensor/atomic_file.h"
#include "../tensor/error.h"

namespace reel {

namespace {

void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put32(out, uint32_t(data.size()));
  size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(out, uint32_t(crc32(0, out.data() + start, uInt(out.size() - start))));
}

}  // namespace

std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels) {
  // colour types: 0 grey, 4 grey + alpha, 2 RGB, 6 RGBA
  static constexpr uint8_t kColorType[5] = {0, 0, 4, 2, 6};
  if (channels < 1 || channels > 4)
    throw Error("encode_png: expected 1, 2, 3 or 4 channels, got " + std::to_string(channels));
  if (width <= 0 || height <= 0)
    throw Error("encode_png: expected a non-empty image, got " + std::to_string(width) + "x" + std::to_string(height));
  size_t row = size_t(width) * channels;
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * height);
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), pixels + y * row, pixels + (y + 1) * row);
  }
  uLongf zlen = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(zlen);
  if (compress2(z.data(), &zlen, raw.data(), uLong(raw.size()), 6) != Z_OK)
    throw Error("encode_png: zlib compression failed");
  z.resize(zlen);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, uint32_t(width));
  put32(ihdr, uint32_t(height));
  ihdr.insert(ihdr.end(), {8, kColorType[channels], 0, 0, 0});  // depth, colour, deflate, filter 0, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

void write_png(const std::string& path, const uint8_t* pixels, int width, int height, int channels) {
  std::vector<uint8_t> png = encode_png(pixels, width, height, channels);
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()), "write_png");
}

}  // namespace reel
