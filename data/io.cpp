// Reading whole files, gzip or plain, with errors that name the file.
#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "../tensor/error.h"
#include "internal/io.h"

namespace reel::data::internal {

std::vector<uint8_t> read_file(const char* op, const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(fmt::format("{}: {}: cannot open: {}", op, path, std::strerror(errno)));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(f, gzclose);
  gzbuffer(f, 1 << 17);
  std::vector<uint8_t> out;
  size_t chunk = 1 << 20;
  for (;;) {
    size_t have = out.size();
    out.resize(have + chunk);
    int n = gzread(f, out.data() + have, unsigned(chunk));
    int code = Z_OK;
    const char* msg = gzerror(f, &code);
    // zlib reports a gzip stream cut short as Z_BUF_ERROR after returning what it could
    if (n < 0 || code != Z_OK) {
      const char* what = code == Z_ERRNO ? std::strerror(errno) : msg;
      if (code == Z_BUF_ERROR) what = "the gzip stream is truncated";
      throw Error(fmt::format("{}: {}: cannot read: {}", op, path, what));
    }
    out.resize(have + size_t(n));
    if (n == 0) break;
    if (chunk < (size_t(1) << 26)) chunk *= 2;
  }
  return out;
}

}  // namespace reel::data::internal
