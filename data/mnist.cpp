// IDX parsing and the MNIST readers. The header is checked against the length of
// the data before anything is allocated, so a corrupt size cannot ask for gigabytes.
#include "mnist.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "internal/io.h"

namespace reel::data {

namespace {

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
uint64_t be64(const uint8_t* p) { return uint64_t(be32(p)) << 32 | be32(p + 4); }

struct IdxType {
  DType dtype;  // what the tensor holds
  int bytes;    // bytes per element in the file
  const char* name;
};

bool idx_type(uint8_t code, IdxType& out) {
  switch (code) {
    case 0x08: out = {DType::u8, 1, "u8"}; return true;
    case 0x09: out = {DType::i32, 1, "i8"}; return true;
    case 0x0B: out = {DType::i32, 2, "i16"}; return true;
    case 0x0C: out = {DType::i32, 4, "i32"}; return true;
    case 0x0D: out = {DType::f32, 4, "f32"}; return true;
    case 0x0E: out = {DType::f64, 8, "f64"}; return true;
  }
  return false;
}

void decode(const uint8_t* src, uint8_t code, int64_t n, void* dst) {
  switch (code) {
    case 0x08: std::memcpy(dst, src, size_t(n)); break;
    case 0x09:
      for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(dst)[i] = int8_t(src[i]);
      break;
    case 0x0B:
      for (int64_t i = 0; i < n; ++i)
        static_cast<int32_t*>(dst)[i] = int16_t(uint16_t(src[2 * i] << 8 | src[2 * i + 1]));
      break;
    case 0x0C:
      for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(dst)[i] = int32_t(be32(src + 4 * i));
      break;
    case 0x0D:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u = be32(src + 4 * i);
        std::memcpy(static_cast<float*>(dst) + i, &u, 4);
      }
      break;
    case 0x0E:
      for (int64_t i = 0; i < n; ++i) {
        uint64_t u = be64(src + 8 * i);
        std::memcpy(static_cast<double*>(dst) + i, &u, 8);
      }
      break;
  }
}

std::string dims_text(const Dims& d) {
  std::string s;
  for (int i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

}  // namespace

Tensor parse_idx(std::span<const uint8_t> bytes, const std::string& name, uint32_t expected_magic) {
  if (bytes.size() < 4)
    throw Error(fmt::format("read_idx: {}: {} bytes is too short for an IDX header (4 bytes of magic)", name,
                            bytes.size()));
  uint32_t magic = be32(bytes.data());
  if (expected_magic != 0 && magic != expected_magic)
    throw Error(fmt::format("read_idx: {}: expected magic 0x{:08x}, got 0x{:08x}", name, expected_magic, magic));
  IdxType type;
  uint8_t code = uint8_t(magic >> 8);
  int ndim = int(magic & 0xff);
  if ((magic >> 16) != 0 || !idx_type(code, type))
    throw Error(fmt::format("read_idx: {}: 0x{:08x} is not an IDX magic (0x0000TTDD, TT one of 08 09 0B 0C 0D 0E)",
                            name, magic));
  if (ndim < 1 || ndim > kMaxDims)
    throw Error(fmt::format("read_idx: {}: magic 0x{:08x} says {} dims; reel reads 1 to {}", name, magic, ndim,
                            kMaxDims));
  size_t header = 4 + 4 * size_t(ndim);
  if (bytes.size() < header)
    throw Error(fmt::format("read_idx: {}: truncated: the header needs {} bytes for {} dims, file has {}", name, header,
                            ndim, bytes.size()));
  Dims dims;
  // the element count is compared with the data in doubles: a product of up to eight
  // 32-bit sizes may overflow any integer, never a double's range
  double count = 1;
  for (int i = 0; i < ndim; ++i) {
    dims.push_back(int64_t(be32(bytes.data() + 4 + 4 * i)));
    count *= double(dims[i]);
  }
  size_t have = bytes.size() - header;
  double need = count * type.bytes;
  if (need > double(have))
    throw Error(fmt::format("read_idx: {}: truncated: header says {} {} values ({:.0f} bytes), file has {} bytes of data",
                            name, dims_text(dims), type.name, need, have));
  if (need < double(have))
    throw Error(fmt::format("read_idx: {}: header says {} {} values ({:.0f} bytes), file has {} bytes of data: "
                            "{:.0f} bytes too many",
                            name, dims_text(dims), type.name, need, have, double(have) - need));
  // zero elements along a huge dim: no data to compare, but strides that overflow
  try {
    check_shape("read_idx", dims, dtype_size(type.dtype), Site{nullptr, 0});
  } catch (const Error&) {
    throw Error(fmt::format("read_idx: {}: header says {} values, a shape too large for a tensor", name, dims_text(dims)));
  }
  Tensor out = empty(dims, {.dtype = type.dtype});
  if (out.numel() > 0) decode(bytes.data() + header, code, out.numel(), out.data_ptr());
  return out;
}

Tensor read_idx(const std::string& path, uint32_t expected_magic) {
  // The header says how many bytes follow: read no more than that (plus one, to tell
  // a file that is too long), so that a small gzip file cannot inflate to gigabytes.
  std::vector<uint8_t> head = internal::read_file("read_idx", path, 4 + 4 * size_t(kMaxDims));
  size_t cap = SIZE_MAX;
  if (head.size() >= 4) {
    uint32_t magic = be32(head.data());
    IdxType type;
    int ndim = int(magic & 0xff);
    size_t header = 4 + 4 * size_t(ndim);
    if ((magic >> 16) == 0 && idx_type(uint8_t(magic >> 8), type) && ndim >= 1 && ndim <= kMaxDims &&
        head.size() >= header) {
      uint64_t need = uint64_t(type.bytes);
      bool overflow = false;
      for (int i = 0; i < ndim; ++i) overflow |= __builtin_mul_overflow(need, uint64_t(be32(head.data() + 4 + 4 * i)), &need);
      if (!overflow && need <= uint64_t(SIZE_MAX) - header) cap = header + size_t(need);
    }
  }
  bool more = false;
  std::vector<uint8_t> bytes = internal::read_file("read_idx", path, cap, &more);
  if (more)
    throw Error(fmt::format("read_idx: {}: the file holds more than the {} bytes of data its header says", path,
                            cap - 4 - 4 * size_t(be32(bytes.data()) & 0xff)));
  return parse_idx(bytes, path, expected_magic);  // checks the header, and the size against it
}

Tensor read_mnist_images(const std::string& path, ImageOptions opt) {
  if (opt.dtype != DType::u8 && opt.dtype != DType::f32)
    throw Error(fmt::format("read_mnist_images: {}: pixels come as u8 or f32, not {}", path, dtype_name(opt.dtype)));
  Tensor raw = read_idx(path, 0x00000803);
  Dims shape{raw.size(0), 1, raw.size(1), raw.size(2)};
  if (opt.dtype == DType::u8) return raw.reshape(shape);
  Tensor out = empty(shape, {.dtype = DType::f32});
  const uint8_t* src = raw.data<uint8_t>();
  float* dst = out.data<float>();
  float k = opt.scale ? 1.0f / 255.0f : 1.0f;
  for (int64_t i = 0, n = out.numel(); i < n; ++i) dst[i] = float(src[i]) * k;
  return out;
}

Tensor read_mnist_labels(const std::string& path) {
  Tensor raw = read_idx(path, 0x00000801);
  Tensor out = empty(raw.shape(), {.dtype = DType::i64});
  const uint8_t* src = raw.data<uint8_t>();
  int64_t* dst = out.data<int64_t>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) dst[i] = src[i];
  return out;
}

ImageSet load_mnist(const std::string& dir, Split split, ImageOptions opt) {
  namespace fs = std::filesystem;
  const char* prefix = split == Split::train ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    for (const char* ext : {".gz", ""}) {
      fs::path p = fs::path(dir) / (std::string(prefix) + stem + ext);
      std::error_code ec;
      if (fs::exists(p, ec)) return p.string();
    }
    throw Error(fmt::format("load_mnist: {}: found neither {}{} nor {}{}.gz", dir, prefix, stem, prefix, stem));
  };
  std::string images_path = find("-images-idx3-ubyte"), labels_path = find("-labels-idx1-ubyte");
  ImageSet set{read_mnist_images(images_path, opt), read_mnist_labels(labels_path)};
  if (set.images.size(0) != set.labels.size(0))
    throw Error(fmt::format("load_mnist: {} holds {} images but {} holds {} labels", images_path, set.images.size(0),
                            labels_path, set.labels.size(0)));
  return set;
}

}  // namespace reel::data
