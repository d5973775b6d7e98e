// safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the raw little-endian tensor data, offsets relative to its start. Dtypes:
// F32 F64 F16 BF16 I32 I64 U8 BOOL. Module and Optimizer checkpoints use this format.
//
//   safetensors::save("w.safetensors", {{"weight", w}}, {{"format", "pt"}});
//   safetensors::File f = safetensors::load("w.safetensors");
//   Tensor w2 = f.at("weight");
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::safetensors {

struct File {
  std::vector<std::pair<std::string, Tensor>> tensors;  // CPU tensors, in data order
  std::map<std::string, std::string> metadata;
  const Tensor* find(const std::string& name) const;  // nullptr when absent
  const Tensor& at(const std::string& name) const;    // throws Error when absent
};

// The largest header accepted (as the reference implementation: 100 MB).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Writes the tensors (from any device, any strides) to `path` through a temporary
// file in the same folder (`path.tmp-XXXXXX`), flushed and renamed over `path`, then
// the folder flushed: a failure or a kill never leaves a partial file, and the next
// save removes a temporary that a killed save left. A `path` that is a symbolic link
// stays one: the file it names is replaced. Throws Error for duplicate or empty names
// or an I/O failure.
void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata = {});
// The bytes save() would write.
std::vector<uint8_t> serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Reads a whole file. Throws Error naming the file and what is wrong for a missing,
// unreadable or non-regular (a directory),
// truncated or corrupt file: bad header length, malformed JSON, unknown dtype,
// shape/size mismatch, offsets out of range, overlapping, or leaving holes.
File load(const std::string& path);
// Parses bytes in memory (the fuzzing entry point); `source` names them in errors.
File parse(const uint8_t* data, size_t size, const std::string& source = "<memory>");

}  // namespace reel::safetensors
