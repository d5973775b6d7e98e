// Which weight format a file holds, read from its first bytes, never from its name:
// what nn::Module::load goes by, so a file keeps loading whatever it is called
// (net.save("model.pt") writes safetensors, and net.load("model.pt") reads it back).
//
//   formats::Format f = formats::detect(bytes, n);  // Format::torch_zip for "PK\x03\x04..."
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace reel::formats {

enum class Format : uint8_t {
  safetensors,   // 8-byte little-endian header length N, then N bytes of JSON starting with '{'
  torch_zip,     // torch.save since PyTorch 1.6: a zip archive ("PK\x03\x04")
  torch_legacy,  // torch.save before 1.6: a bare pickle (0x80, protocol 2-5), which reel refuses
  unknown,
};
const char* format_name(Format f);  // "safetensors", "torch.save zip archive", ...

// From the first bytes of a file of `size` bytes (at least 9 of them given where the
// file has them; fewer only when the file is shorter).
Format detect(const uint8_t* head, size_t head_size, uint64_t file_size);
// Reads the first bytes of `path`; nullopt when it cannot be opened or read as a
// regular file (the reader that then opens it reports why).
std::optional<Format> detect_file(const std::string& path);

}  // namespace reel::formats
