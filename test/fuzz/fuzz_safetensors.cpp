// libFuzzer target for the safetensors reader: any input must either parse into
// tensors whose sizes agree with the header, or throw reel::Error; never crash,
// read out of bounds or leak (AddressSanitizer watches). Parsed files are written
// back and re-parsed: the round trip must give the same tensors. Format detection (what
// load() goes by) must not crash on any input, and must call a parsed file safetensors.
#include <reel/reel.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const reel::formats::Format detected = reel::formats::detect(data, size, size);
  reel::safetensors::File f;
  try {
    f = reel::safetensors::parse(data, size, "fuzz input");
  } catch (const reel::Error&) {
    return 0;
  }
  if (detected != reel::formats::Format::safetensors) std::abort();  // load() would pick another reader
  std::vector<uint8_t> again = reel::safetensors::serialize(f.tensors, f.metadata);
  reel::safetensors::File g = reel::safetensors::parse(again.data(), again.size(), "round trip");
  if (g.tensors.size() != f.tensors.size() || g.metadata != f.metadata) std::abort();
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const reel::Tensor& a = f.tensors[i].second;
    const reel::Tensor* b = g.find(f.tensors[i].first);
    if (!b || !(b->shape() == a.shape()) || b->dtype() != a.dtype() ||
        (a.numel() > 0 &&  // an empty tensor has no data: its pointer is null, memcmp's must not be
         std::memcmp(b->data_ptr(), a.data_ptr(), size_t(a.numel()) * a.element_size()) != 0))
      std::abort();
  }
  return 0;
}
