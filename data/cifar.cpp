// CIFAR-10 binary records: the file is checked whole (length, labels) before any
// pixel is converted.
#include "cifar.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "internal/io.h"

namespace reel::data {

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;

void check_options(const char* op, const std::string& name, const ImageOptions& opt) {
  if (opt.dtype != DType::u8 && opt.dtype != DType::f32)
    throw Error(fmt::format("{}: {}: pixels come as u8 or f32, not {}", op, name, dtype_name(opt.dtype)));
}

// Checks `bytes` and returns its number of records.
int64_t count_records(const char* op, std::span<const uint8_t> bytes, const std::string& name) {
  if (bytes.empty()) throw Error(fmt::format("{}: {}: the file is empty", op, name));
  if (bytes.size() % kRecord != 0)
    throw Error(fmt::format("{}: {}: {} bytes is not a whole number of {}-byte records ({} records and {} bytes over)",
                            op, name, bytes.size(), kRecord, bytes.size() / kRecord, bytes.size() % kRecord));
  int64_t n = int64_t(bytes.size()) / kRecord;
  for (int64_t i = 0; i < n; ++i)
    if (uint8_t label = bytes[size_t(i * kRecord)]; label > 9)
      throw Error(fmt::format("{}: {}: record {} has label {}; CIFAR-10 labels are 0 to 9", op, name, i, label));
  return n;
}

// Writes n records into images/labels starting at row `at`.
void decode(std::span<const uint8_t> bytes, int64_t n, const ImageSet& out, int64_t at, const ImageOptions& opt) {
  int64_t* labels = out.labels.data<int64_t>() + at;
  float k = opt.scale ? 1.0f / 255.0f : 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = bytes.data() + i * kRecord;
    labels[i] = rec[0];
    if (opt.dtype == DType::u8) {
      std::memcpy(out.images.data<uint8_t>() + (at + i) * kPixels, rec + 1, kPixels);
    } else {
      float* dst = out.images.data<float>() + (at + i) * kPixels;
      for (int64_t p = 0; p < kPixels; ++p) dst[p] = float(rec[1 + p]) * k;
    }
  }
}

ImageSet allocate(int64_t n, const ImageOptions& opt) {
  return {empty({n, 3, 32, 32}, {.dtype = opt.dtype}), empty({n}, {.dtype = DType::i64})};
}

}  // namespace

ImageSet parse_cifar10(std::span<const uint8_t> bytes, const std::string& name, ImageOptions opt) {
  check_options("parse_cifar10", name, opt);
  int64_t n = count_records("parse_cifar10", bytes, name);
  ImageSet out = allocate(n, opt);
  decode(bytes, n, out, 0, opt);
  return out;
}

ImageSet read_cifar10(const std::vector<std::string>& paths, ImageOptions opt) {
  if (paths.empty()) throw Error("read_cifar10: no files given");
  check_options("read_cifar10", paths[0], opt);
  std::vector<std::vector<uint8_t>> files;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const auto& p : paths) {
    files.push_back(internal::read_file("read_cifar10", p));
    counts.push_back(count_records("read_cifar10", files.back(), p));
    total += counts.back();
  }
  ImageSet out = allocate(total, opt);
  int64_t at = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    decode(files[f], counts[f], out, at, opt);
    at += counts[f];
    std::vector<uint8_t>().swap(files[f]);  // keep peak memory at the files not yet decoded
  }
  return out;
}

ImageSet load_cifar10(const std::string& dir, Split split, ImageOptions opt) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  if (split == Split::train)
    for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
  else
    names.push_back("test_batch.bin");
  std::vector<std::string> paths;
  for (const auto& name : names) {
    fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (!fs::exists(p, ec) && fs::exists(p.string() + ".gz", ec)) p += ".gz";
    paths.push_back(p.string());
  }
  return read_cifar10(paths, opt);
}

}  // namespace reel::data
