// Padding and resampling, composed from index_select, cat, narrow and elementwise
// weights, so the gradients (the index_add of index_select's rule, cat's slices) are
// exact and twice differentiable. Source positions follow PyTorch 1.13's kernels to the
// bit where they choose an element (nearest: float arithmetic, as upsample_nearest).
#include <algorithm>
#include <cmath>

#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  return from_vector<int64_t>(v, {int64_t(v.size())}, {.dtype = DType::i64, .device = device});
}

// weights [out] shaped to broadcast along dim d of a rank-r tensor
Tensor weights_along(const std::vector<double>& w, int d, int rank, const Tensor& like) {
  Dims shape = Dims::filled(rank, 1);
  shape[d] = int64_t(w.size());
  return from_vector<double>(w, shape, {.dtype = like.dtype(), .device = like.device()});
}

const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::replicate: return "replicate";
    case PadMode::circular: return "circular";
  }
  return "?";
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& amounts, PadOptions opt, Site site) {
  OpScope op("pad", site);
  check_defined(op, x, "the input");
  if (amounts.size() % 2 != 0 || int(amounts.size()) > 2 * x.dim())
    fail(op.op, fmt::format("expected an even number of padding amounts, at most 2 per dim of the input {}, got {}",
                            x.shape().str(), amounts.size()), op.site);
  Tensor y = x;
  for (size_t p = 0; p < amounts.size() / 2; ++p) {
    const int d = x.dim() - 1 - int(p);
    const int64_t left = amounts[2 * p], right = amounts[2 * p + 1], n = y.size(d);
    if (left == 0 && right == 0) continue;
    if (opt.mode == PadMode::constant) {
      if (n + std::min<int64_t>(left, 0) + std::min<int64_t>(right, 0) < 0)
        fail(op.op, fmt::format("padding ({}, {}) crops more than dim {} of the input {} holds", left, right, d,
                                x.shape().str()), op.site);
      if (left < 0) y = y.narrow(d, -left, y.size(d) + left);
      if (right < 0) y = y.narrow(d, 0, y.size(d) + right);
      std::vector<Tensor> parts;
      Dims side = y.shape();
      if (left > 0) side[d] = left, parts.push_back(full(side, opt.value, {.dtype = x.dtype(), .device = x.device()}));
      parts.push_back(y);
      if (right > 0) side[d] = right, parts.push_back(full(side, opt.value, {.dtype = x.dtype(), .device = x.device()}));
      if (parts.size() > 1) y = cat(parts, d);
      continue;
    }
    const int64_t limit = opt.mode == PadMode::reflect ? n - 1 : opt.mode == PadMode::circular ? n : INT64_MAX;
    if (left < 0 || right < 0 || n == 0 || left > limit || right > limit)
      fail(op.op, fmt::format("{} padding ({}, {}) of dim {} of the input {}: expected amounts from 0 to {}",
                              mode_name(opt.mode), left, right, d, x.shape().str(),
                              limit == INT64_MAX ? std::string("any") : std::to_string(limit)), op.site);
    std::vector<int64_t> idx;
    for (int64_t j = -left; j < n + right; ++j) {
      int64_t i = j;
      if (opt.mode == PadMode::reflect) i = i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
      else if (opt.mode == PadMode::replicate) i = std::clamp<int64_t>(i, 0, n - 1);
      else i = ((i % n) + n) % n;
      idx.push_back(i);
    }
    y = index_select(y, d, index_tensor(idx, x.device()));
  }
  return y.impl() == x.impl() ? x.clone() : y;
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& opt, Site site) {
  OpScope op("interpolate", site);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  const int spatial = x.dim() - 2;
  const bool linear = opt.mode != InterpolateMode::nearest;
  if (spatial < 1 || spatial > 2 || (opt.mode == InterpolateMode::linear && spatial != 1) ||
      (opt.mode == InterpolateMode::bilinear && spatial != 2))
    fail(op.op, fmt::format("expected [N, C, L] for nearest or linear, [N, C, H, W] for nearest or bilinear, got {} "
                            "for {}", x.shape().str(), opt.mode == InterpolateMode::nearest ? "nearest"
                            : opt.mode == InterpolateMode::linear ? "linear" : "bilinear"), op.site);
  if (opt.size.empty() == opt.scale_factor.empty())
    fail(op.op, "expected either size or scale_factor, not both and not neither", op.site);
  if (opt.align_corners && !linear)
    fail(op.op, "align_corners applies to linear and bilinear modes only", op.site);
  auto pick = [&](const auto& v, int i) { return v.size() == 1 ? v[0] : v[size_t(i)]; };
  for (const auto* v : {&opt.size})
    if (!v->empty() && v->size() != 1 && int(v->size()) != spatial)
      fail(op.op, fmt::format("expected {} output sizes, got {}", spatial, v->size()), op.site);
  if (!opt.scale_factor.empty() && opt.scale_factor.size() != 1 && int(opt.scale_factor.size()) != spatial)
    fail(op.op, fmt::format("expected {} scale factors, got {}", spatial, opt.scale_factor.size()), op.site);
  Tensor y = x;
  for (int s = 0; s < spatial; ++s) {
    const int d = 2 + s;
    const int64_t in = x.size(d);
    const bool given_scale = !opt.scale_factor.empty();
    const double factor = given_scale ? pick(opt.scale_factor, s) : 0.0;
    const int64_t out = given_scale ? int64_t(std::floor(double(in) * factor)) : pick(opt.size, s);
    if (out < 1 || in < 1 || (given_scale && !(factor > 0)))
      fail(op.op, fmt::format("dim {} of the input {} would resample to {} elements: expected at least 1 on each side",
                              d, x.shape().str(), out), op.site);
    if (!linear) {  // PyTorch's nearest_idx, in float as it computes
      std::vector<int64_t> idx(static_cast<size_t>(out));
      const float scale = given_scale ? float(1.0 / factor) : float(in) / float(out);
      for (int64_t j = 0; j < out; ++j)
        idx[size_t(j)] = out == in ? j : out == 2 * in ? j >> 1
                                       : std::min<int64_t>(int64_t(std::floor(float(j) * scale)), in - 1);
      y = index_select(y, d, index_tensor(idx, x.device()));
      continue;
    }
    // area_pixel_compute_source_index: align_corners maps the corners onto each other
    const double scale = opt.align_corners ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0)
                         : given_scale     ? 1.0 / factor
                                           : double(in) / double(out);
    std::vector<int64_t> lo(static_cast<size_t>(out)), hi(static_cast<size_t>(out));
    std::vector<double> w_lo(static_cast<size_t>(out)), w_hi(static_cast<size_t>(out));
    for (int64_t j = 0; j < out; ++j) {
      double src = opt.align_corners ? scale * double(j) : std::max(scale * (double(j) + 0.5) - 0.5, 0.0);
      int64_t i0 = std::min<int64_t>(int64_t(src), in - 1);
      int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
      double l1 = std::min(src - double(i0), 1.0);
      lo[size_t(j)] = i0;
      hi[size_t(j)] = i1;
      w_lo[size_t(j)] = 1.0 - l1;
      w_hi[size_t(j)] = l1;
    }
    y = add(mul(index_select(y, d, index_tensor(lo, x.device())), weights_along(w_lo, d, x.dim(), x)),
            mul(index_select(y, d, index_tensor(hi, x.device())), weights_along(w_hi, d, x.dim(), x)));
  }
  return y;
}

}  // namespace reel
