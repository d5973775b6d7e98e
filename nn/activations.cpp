// Activation modules: their printed forms (nn/activations.h has the rest inline).
#include "activations.h"

#include <fmt/format.h>

namespace reel::nn {
namespace {
// a double as Python prints a float: 1.0, 0.01, 1e-05
std::string py_float(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string ELU::extra_repr() const { return "alpha=" + py_float(alpha); }
std::string LeakyReLU::extra_repr() const { return "negative_slope=" + py_float(negative_slope); }
// PyTorch's defaults are ints (beta=1, threshold=20) and print without ".0"
std::string Softplus::extra_repr() const {
  return fmt::format("beta={}, threshold={}", options.beta, options.threshold);
}

std::string Hardtanh::extra_repr() const {
  return "min_val=" + py_float(min_val) + ", max_val=" + py_float(max_val);
}
std::string Threshold::extra_repr() const { return "threshold=" + py_float(threshold) + ", value=" + py_float(value); }

}  // namespace reel::nn
