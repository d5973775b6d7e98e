// REEL_CHECK: libtorch's TORCH_CHECK for your own code. When the condition is false it
// throws reel::Error naming the enclosing function, your message (its parts written one
// after another, as TORCH_CHECK's) and the line, as reel's own checks do:
//
//   REEL_CHECK(x.dim() == 4, "expected [N, C, H, W], got ", x.sizes());
//   // forward: expected [N, C, H, W], got [3, 5]; `x.dim() == 4` is false (at net.cpp:12 in feat)
//
// A port keeps its TORCH_CHECK lines with `#define TORCH_CHECK REEL_CHECK`.
#pragma once
#include <sstream>
#include <string>

#include "error.h"

namespace reel::detail {
template <typename... Parts>
std::string check_message(const Parts&... parts) {
  if constexpr (sizeof...(Parts) == 0) {
    return {};
  } else {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
  }
}
[[noreturn]] void check_failed(const char* function, const char* condition, const std::string& message,
                               const Site& site);
}  // namespace reel::detail

#define REEL_CHECK(condition, ...)                                                                     \
  do {                                                                                                 \
    if (!(condition)) [[unlikely]]                                                                     \
      ::reel::detail::check_failed(__func__, #condition, ::reel::detail::check_message(__VA_ARGS__),   \
                                   ::reel::Site(__FILE__, __LINE__));                                  \
  } while (false)
