// Reading whole files, gzip or plain, with errors that name the file.
#include <fmt/format.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "../tensor/error.h"
#include "internal/io.h"

namespace reel::data::internal {

std::vector<uint8_t> read_file(const char* op, const std::string& path, size_t max_bytes, bool* more) {
  struct stat st;  // gzopen would open a directory and read nothing from it
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(fmt::format("{}: {}: is a directory, not a file", op, path));
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(fmt::format("{}: {}: cannot open: {}", op, path, std::strerror(errno)));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(f, gzclose);
  gzbuffer(f, 1 << 17);
  auto check = [&](int n) {
    int code = Z_OK;
    const char* msg = gzerror(f, &code);
    // zlib reports a gzip stream cut short as Z_BUF_ERROR after returning what it could
    if (n < 0 || code != Z_OK) {
      const char* what = code == Z_ERRNO ? std::strerror(errno) : msg;
      if (code == Z_BUF_ERROR) what = "the gzip stream is truncated";
      throw Error(fmt::format("{}: {}: cannot read: {}", op, path, what));
    }
  };
  std::vector<uint8_t> out;
  size_t chunk = 1 << 20;
  while (out.size() < max_bytes) {
    size_t have = out.size();
    size_t want = std::min(chunk, max_bytes - have);  // memory grows with what the file holds, never past the cap
    out.resize(have + want);
    int n = gzread(f, out.data() + have, unsigned(want));
    check(n);
    out.resize(have + size_t(n));
    if (n == 0) break;
    if (chunk < (size_t(1) << 26)) chunk *= 2;
  }
  if (more) {
    uint8_t probe;
    int n = out.size() < max_bytes ? 0 : gzread(f, &probe, 1);
    check(n);
    *more = n > 0;
  }
  return out;
}

}  // namespace reel::data::internal
