// Helpers of the low-precision tests (test_autocast.cpp, cuda/test_cuda_autocast.cpp).
#pragma once
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace reel::test {

// max |a - b| / max |b|: the error of a low-precision result against its f32 reference
// (either may live on a GPU)
inline double rel_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.cpu().to_vector<double>(), y = b.cpu().to_vector<double>();
  REQUIRE(x.size() == y.size());
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / scale;
}

// t's values as they are once stored in d, back in f32
inline Tensor rounded(const Tensor& t, DType d) { return t.to(d).to(DType::f32); }

}  // namespace reel::test
