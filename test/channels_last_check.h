// Helpers of the channels-last tests (test_channels_last.cpp, test_norm_channels_last.cpp):
// the layout, and bit-for-bit comparison of values whatever the layout and dtype.
#pragma once
#include <reel/reel.h>

#include <cmath>
#include <vector>

namespace reel::test {

// whether the CPU keeps bf16 activations channels-last (AMX CPUs)
inline bool keeps_bf16_channels_last() { return backend_for(kCPU).channels_last(DType::bf16); }

inline bool channels_last(const Tensor& t) { return is_channels_last(t.shape(), t.strides()); }

// t [N, C, H, W] with the same values laid out NHWC
inline Tensor to_channels_last(const Tensor& t) {
  return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

// the same values bit for bit, NaN where NaN (any layouts, any dtypes)
inline bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

}  // namespace reel::test
