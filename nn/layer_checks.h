// Internal to nn/: the constructor-argument checks and printing helpers the layer files
// share, so each layer's error names the layer and the argument the same way.
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../autograd/ops.h"
#include "init.h"

namespace reel::nn::detail {

// Forward errors carry the module call's site (each forward opens at_caller_site()).
inline const Site kNoSite{nullptr, 0};

inline void check_positive(const char* layer, const char* what, int64_t v) {
  if (v <= 0) throw Error(fmt::format("{}: {} must be positive, got {}", layer, what, v));
}
inline void check_positive(const char* layer, const char* what, Size2 v) {
  if (v.h <= 0 || v.w <= 0) throw Error(fmt::format("{}: {} must be positive, got ({}, {})", layer, what, v.h, v.w));
}
inline void check_nonnegative(const char* layer, const char* what, int64_t v) {
  if (v < 0) throw Error(fmt::format("{}: {} must be >= 0, got {}", layer, what, v));
}
inline void check_nonnegative(const char* layer, const char* what, Size2 v) {
  if (v.h < 0 || v.w < 0) throw Error(fmt::format("{}: {} must be >= 0, got ({}, {})", layer, what, v.h, v.w));
}
inline void check_groups(const char* layer, int64_t in_channels, int64_t out_channels, int64_t groups) {
  check_positive(layer, "groups", groups);
  if (in_channels % groups || out_channels % groups)
    throw Error(fmt::format("{}: in_channels {} and out_channels {} must both be divisible by groups {}", layer,
                            in_channels, out_channels, groups));
}
// String padding as PyTorch's Conv modules check it when built: "same" or "valid", and
// "same" with stride 1 only
inline void check_padding_mode(const char* layer, const std::string& mode, bool unit_stride) {
  if (mode.empty() || mode == "valid") return;
  if (mode != "same")
    throw Error(fmt::format("{}: padding must be \"same\", \"valid\" or amounts, got \"{}\"", layer, mode));
  if (!unit_stride) throw Error(fmt::format("{}: padding \"same\" needs stride 1 (PyTorch's rule)", layer));
}
inline std::string pair_str(Size2 s) { return fmt::format("({}, {})", s.h, s.w); }
inline const char* py_bool(bool b) { return b ? "True" : "False"; }

// PyTorch's default for Linear and the convolutions: weight kaiming_uniform(a = sqrt 5),
// which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in from dim 1 of the weight (so
// C_out/groups kh kw for the transposed layout), and the bias from the same range.
inline void default_init(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (bias.defined()) {
    int64_t fan_in = init::calculate_fans(weight).fan_in;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace reel::nn::detail
