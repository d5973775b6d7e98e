// A full disk, made small: runs a writer with the process's file size limit
// (RLIMIT_FSIZE) lowered and SIGXFSZ ignored, so that its write past the limit fails with
// EFBIG as a write to a full filesystem fails with ENOSPC, then restores both. Only the
// soft limit moves (a process may raise it back up to the hard limit); files already
// longer than the limit are untouched by it. Used by test_atomic_file.cpp and by
// test/onnx/full_disk.cpp.
#pragma once
#include <sys/resource.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <reel/reel.h>

namespace reel::test {

// The message of the reel::Error `write` throws with the file size limit at `limit`
// bytes, or "no error".
inline std::string error_with_file_limit(uint64_t limit, const std::function<void()>& write) {
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit low = old;
  low.rlim_cur = rlim_t(limit);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ::setrlimit(RLIMIT_FSIZE, &low);
  std::string error = "no error";
  try {
    write();
  } catch (const Error& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  return error;
}

inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The names in `dir` that look like a writer's temporary (".tmp" anywhere in them).
inline std::vector<std::string> temporaries_in(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) out.push_back(e.path().filename());
  return out;
}

}  // namespace reel::test
