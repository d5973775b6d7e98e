// Telling the weight formats apart by their first bytes (formats/detect.h).
#include "detect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "safetensors.h"

namespace reel::formats {

const char* format_name(Format f) {
  switch (f) {
    case Format::safetensors: return "safetensors";
    case Format::torch_zip: return "torch.save zip archive";
    case Format::torch_legacy: return "legacy torch.save pickle";
    case Format::unknown: break;
  }
  return "unknown";
}

Format detect(const uint8_t* head, size_t head_size, uint64_t file_size) {
  if (head_size >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return Format::torch_zip;
  // safetensors before the pickle: a header of 128, 384, ... bytes starts with 0x80 and a
  // byte up to 5, which the pickle test alone would take for a legacy file
  if (head_size >= 9) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | head[i];
    if (n >= 2 && n <= safetensors::kMaxHeaderBytes && n <= file_size - 8 && head[8] == '{')
      return Format::safetensors;
  }
  // the same test as torch_pt's reader: a pickle's PROTO opcode and a protocol up to 5
  if (head_size >= 2 && head[0] == 0x80 && head[1] <= 5) return Format::torch_legacy;
  return Format::unknown;
}

std::optional<Format> detect_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  uint8_t head[9];
  size_t got = 0;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  while (ok && got < sizeof head) {
    ssize_t n = ::read(fd, head + got, sizeof head - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    got += size_t(n);
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  return detect(head, got, uint64_t(st.st_size));
}

}  // namespace reel::formats
