// libFuzzer target for the torch.save reader (torch_pt: zip archive, restricted
// unpickler, storages): any input must either parse or throw reel::Error; never crash,
// read out of bounds, leak (AddressSanitizer watches) or allocate beyond the input's
// bounds (-rss_limit_mb and -malloc_limit_mb watch). A parsed file's tensors must lie
// inside their storages and read back whole, and format detection (what load() goes by)
// must call it a torch.save zip archive.
#include <reel/reel.h>

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const reel::formats::Format detected = reel::formats::detect(data, size, size);
  reel::torch_pt::File f;
  try {
    f = reel::torch_pt::parse(data, size, "fuzz input");
  } catch (const reel::Error&) {
    return 0;
  }
  if (detected != reel::formats::Format::torch_zip) std::abort();  // load() would pick another reader
  for (const auto& [name, t] : f.tensors) {
    // every element of the view is read: out-of-storage strides would be caught by ASan
    if (t.numel() > 0 && t.numel() < (1 << 20) && t.contiguous().numel() != t.numel()) std::abort();
    if (f.find(name) == nullptr) std::abort();
  }
  for (const auto& [name, v] : f.values)
    if (f.find_value(name) == nullptr) std::abort();
  return 0;
}
