// Opening a weight file for reading, shared by the safetensors and .pt readers: a
// directory opens and reports a size, and a fifo or a device has none to trust, so only
// regular files are read; the descriptor closes with the object.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "../../tensor/error.h"

namespace reel::internal {

class RegularFile {
 public:
  // `reader` names the format in errors ("safetensors", "torch_pt")
  RegularFile(const std::string& path, const char* reader) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error(fmt::format("{}: cannot open {}: {}", reader, path, std::strerror(errno)));
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      int err = errno;
      ::close(fd_);
      throw Error(fmt::format("{}: cannot read {}: {}", reader, path, std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error(fmt::format("{}: cannot load {}: it is {}, not a regular file", reader, path,
                              S_ISDIR(st.st_mode) ? "a directory" : "a special file"));
    }
    size_ = size_t(st.st_size);
  }
  ~RegularFile() { ::close(fd_); }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
};

}  // namespace reel::internal
