// Rearranging copies: repeat, tile, flip, roll, and split into given sizes. Built on
// expand/reshape (repeat), index_select (flip), narrow and cat (roll, split), whose
// rules are the gradients: repeat's sums the copies back, flip's flips g, roll's rolls
// it back.
#include <numeric>

#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {
std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace

// y = x tiled: reps[i] copies along dim i (x gets leading unit dims when reps is longer)
Tensor repeat(const Tensor& x, const Dims& reps, Site site) {
  OpScope op("repeat", site);
  check_defined(op, x, "the input");
  if (reps.size() < x.dim())
    fail(op.op, fmt::format("expected at least as many repeats as the input has dims, got {} for {}", reps.str(),
                            x.shape().str()), op.site);
  for (int64_t r : reps)
    if (r < 0) fail(op.op, fmt::format("expected non-negative repeats, got {}", reps.str()), op.site);
  Dims padded = Dims::filled(reps.size() - x.dim(), 1);
  for (int64_t s : x.shape()) padded.push_back(s);
  Tensor y = x.reshape(padded);
  // one dim at a time: [.., s, ..] -> [.., r, s, ..] (expanded) -> [.., r s, ..]
  for (int i = 0; i < reps.size(); ++i) {
    if (reps[i] == 1) continue;
    Dims wide = y.shape();
    wide.insert(i, reps[i]);
    Dims merged = y.shape();
    merged[i] *= reps[i];
    y = y.unsqueeze(i).expand(wide).reshape(merged);
  }
  return y.impl() == x.impl() || y.storage().get() == x.storage().get() ? y.clone() : y;
}

Tensor tile(const Tensor& x, const Dims& reps, Site site) {
  OpScope op("tile", site);
  check_defined(op, x, "the input");
  Dims r = reps;
  while (r.size() < x.dim()) r.insert(0, 1);
  return repeat(x, r);
}

// y = x reversed along each of dims
Tensor flip(const Tensor& x, const Dims& dims, Site site) {
  OpScope op("flip", site);
  check_defined(op, x, "the input");
  Tensor y = x;
  std::vector<bool> seen(size_t(x.dim()), false);
  for (int64_t dim : dims) {
    int d = wrap_dim(op.op, dim, x.dim(), op.site);
    if (seen[size_t(d)]) fail(op.op, fmt::format("dim {} is repeated in {}", d, dims.str()), op.site);
    seen[size_t(d)] = true;
    const int64_t n = x.size(d);
    std::vector<int64_t> rev(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rev[size_t(i)] = n - 1 - i;
    y = index_select(y, d, from_vector<int64_t>(rev, {n}, {.dtype = DType::i64, .device = x.device()}));
  }
  return y.impl() == x.impl() ? x.clone() : y;
}

// y = x shifted by shifts[i] along dims[i], wrapping around; no dims: over x flattened
Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims, Site site) {
  OpScope op("roll", site);
  check_defined(op, x, "the input");
  if (dims.empty()) {
    if (shifts.size() != 1)
      fail(op.op, fmt::format("without dims, expected one shift, got {}", shifts.str()), op.site);
    return roll(x.reshape({-1}), shifts, {0}).reshape(x.shape());
  }
  if (shifts.size() != dims.size())
    fail(op.op, fmt::format("expected one shift per dim, got shifts {} and dims {}", shifts.str(), dims.str()),
         op.site);
  Tensor y = x;
  for (int i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(op.op, dims[i], x.dim(), op.site);
    const int64_t n = x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    y = cat({y.narrow(d, n - s, s), y.narrow(d, 0, n - s)}, d);
  }
  return y.impl() == x.impl() ? x.clone() : y;
}

// views of x along dim, of the given sizes
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim, Site site) {
  OpScope op("split", site);
  check_defined(op, x, "the input");
  if (x.dim() == 0) fail(op.op, "cannot split a 0-d tensor", op.site);
  int d = wrap_dim(op.op, dim, x.dim(), op.site);
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail(op.op, fmt::format("expected non-negative sizes, got {}", list_str(sizes)), op.site);
    total += s;
  }
  if (total != x.size(d))
    fail(op.op, fmt::format("the sizes {} add up to {}, but dim {} of the input {} has {}", list_str(sizes), total,
                            d, x.shape().str(), x.size(d)), op.site);
  return split_views(op, x, d, sizes);
}

}  // namespace reel
