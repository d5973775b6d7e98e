// The non-template parts of libtorch's dataset pipeline (data/datasets.h).
#include "datasets.h"

#include <fmt/format.h>

#include "../autograd/ops.h"

namespace reel::data {

void transforms::detail::check_normalize(const std::vector<double>& mean, const std::vector<double>& stddev) {
  if (mean.empty() || mean.size() != stddev.size())
    throw Error(fmt::format("Normalize: expected as many means as stddevs, at least one, got {} and {}", mean.size(),
                            stddev.size()));
  for (double s : stddev)
    if (s == 0) throw Error("Normalize: expected every stddev nonzero, got 0 (it would divide by zero)");
}

Tensor transforms::detail::normalize_example(const Tensor& x_in, const std::vector<double>& mean,
                                             const std::vector<double>& stddev) {
  if (!x_in.defined()) throw Error("Normalize: the example's data is undefined");
  const Tensor x = x_in.is_floating_point() ? x_in : x_in.to(DType::f32);
  if (mean.size() == 1) return div(sub(x, mean[0]), stddev[0]);
  const auto c = int64_t(mean.size());
  if (x.dim() < 3 || x.size(-3) != c)
    throw Error(fmt::format("Normalize: {} means and stddevs are one per channel of [C, H, W] data with C = {}; got "
                            "data {}", c, c, x.shape().str()));
  Tensor m = from_vector(mean, {c, 1, 1}, {.dtype = x.dtype(), .device = x.device()});
  Tensor s = from_vector(stddev, {c, 1, 1}, {.dtype = x.dtype(), .device = x.device()});
  return div(sub(x, m), s);
}

void datasets::detail::throw_stack_index(int64_t index, int64_t size) {
  throw Error(fmt::format("Stack: index {} is out of range for a dataset of {} examples", index, size));
}

}  // namespace reel::data
