// libFuzzer target for the IDX (MNIST) and CIFAR-10 parsers: any input must either
// parse into a tensor whose size agrees with the bytes it came from, or throw
// reel::Error; never crash, read out of bounds or allocate what the data cannot
// fill (AddressSanitizer and libFuzzer's -rss_limit_mb watch).
#include <reel/data/cifar.h>
#include <reel/data/mnist.h>
#include <reel/reel.h>

#include <cstdint>
#include <cstdlib>
#include <span>

namespace {

int64_t idx_element_bytes(uint8_t code) {
  switch (code) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
  }
  std::abort();  // the parser accepted a type it should have refused
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  try {
    reel::Tensor t = reel::data::parse_idx(bytes, "fuzz input");
    // header (4 + 4 per dim) plus the elements must be exactly the input
    int64_t expect = 4 + 4 * int64_t(t.dim()) + t.numel() * idx_element_bytes(data[2]);
    if (expect != int64_t(size) || t.dim() != data[3]) std::abort();
  } catch (const reel::Error&) {
  }
  try {
    reel::Tensor images = reel::data::parse_idx(bytes, "fuzz input", 0x00000803);
    if (images.dim() != 3 || images.dtype() != reel::DType::u8) std::abort();
  } catch (const reel::Error&) {
  }
  try {
    reel::data::ImageSet s = reel::data::parse_cifar10(bytes, "fuzz input", {.dtype = reel::DType::u8});
    if (s.images.size(0) * 3073 != int64_t(size) || s.labels.size(0) != s.images.size(0)) std::abort();
    for (int64_t label : s.labels.to_vector<int64_t>())
      if (label < 0 || label > 9) std::abort();
  } catch (const reel::Error&) {
  }
  return 0;
}
