// The small modules of small_layers.h: each forward is one op (or a view) named by its
// module in errors; channel dropout draws one keep/drop per (sample, channel).
#include "small_layers.h"

#include <fmt/format.h>

#include <cmath>

namespace reel::nn {

Tensor Functional::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return fn_(x);
}

// ---- Unflatten
Unflatten::Unflatten(int64_t dim, Dims sizes) : dim(dim), sizes(sizes) {
  int unknown = 0;
  for (int64_t s : sizes) {
    if (s == -1) ++unknown;
    else if (s < 0) throw Error(fmt::format("Unflatten: sizes {} has a negative size (only one -1 may stand for the rest)",
                                            sizes.str()));
  }
  if (sizes.empty() || unknown > 1)
    throw Error(fmt::format("Unflatten: expected a non-empty list of sizes with at most one -1, got {}", sizes.str()));
}

Tensor Unflatten::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  int d = wrap_dim("Unflatten", dim, x.dim(), Site{nullptr, 0});
  int64_t known = 1;
  for (int64_t s : sizes)
    if (s != -1) known *= s;
  Dims out;
  for (int i = 0; i < d; ++i) out.push_back(x.size(i));
  for (int64_t s : sizes) {
    if (s == -1 && known != 0 && x.size(d) % known == 0) out.push_back(x.size(d) / known);
    else out.push_back(s);
  }
  for (int i = d + 1; i < x.dim(); ++i) out.push_back(x.size(i));
  int64_t product = 1;
  for (int i = 0; i < sizes.size(); ++i) product *= out[d + i];
  if (product != x.size(d) || out.size() > kMaxDims)
    throw Error(fmt::format("Unflatten: dim {} of input {} has size {}, which sizes {} do not multiply to",
                            dim, x.shape().str(), x.size(d), sizes.str()));
  return x.reshape(out);
}

std::string Unflatten::extra_repr() const {
  std::string s = sizes.str();  // "[4, 16]" printed as PyTorch's tuple
  return fmt::format("dim={}, unflattened_size=({})", dim, s.substr(1, s.size() - 2));
}

// ---- channel dropout
namespace {
void check_p(const char* name, double p) {
  if (!(p >= 0 && p <= 1)) throw Error(fmt::format("{}: p must be in [0, 1], got {}", name, p));
}
// x [N, C, *spatial] or [C, *spatial]: one draw per channel, broadcast over the positions
Tensor channel_dropout(const Tensor& x, double p, int spatial, bool training, const char* name, const char* shapes) {
  if (x.dim() != spatial + 1 && x.dim() != spatial + 2)
    throw Error(fmt::format("{}: expected input {}, got {}", name, shapes, x.shape().str()));
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, 0.0);
  Dims mask_shape = x.shape();
  for (int i = 0; i < spatial; ++i) mask_shape[x.dim() - 1 - i] = 1;
  Tensor keep = lt(rand(mask_shape, {.dtype = x.dtype(), .device = x.device()}), 1 - p).to(x.dtype());
  return mul(x, mul(keep, 1 / (1 - p)));
}
}  // namespace

Dropout1d::Dropout1d(double p) : p(p) { check_p("Dropout1d", p); }
Tensor Dropout1d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return channel_dropout(x, p, 1, is_training(), "Dropout1d", "[N, C, L] or [C, L]");
}
std::string Dropout1d::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

Dropout3d::Dropout3d(double p) : p(p) { check_p("Dropout3d", p); }
Tensor Dropout3d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return channel_dropout(x, p, 3, is_training(), "Dropout3d", "[N, C, D, H, W] or [C, D, H, W]");
}
std::string Dropout3d::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

// ---- alpha dropout
namespace {
// noise_shape: x's shape, or [N, C, 1, ...] for whole channels
Tensor alpha_dropout(const Tensor& x, double p, bool training, const Dims& noise_shape) {
  if (!training || p == 0 || x.numel() == 0) return x;
  if (p == 1) return mul(x, 0.0);
  constexpr double kAlpha = 1.7580993408473766;  // -SELU(-inf): scale * alpha
  double a = 1.0 / std::sqrt((kAlpha * kAlpha * p + 1) * (1 - p));
  Tensor keep = lt(rand(noise_shape, {.dtype = x.dtype(), .device = x.device()}), 1 - p).to(x.dtype());
  Tensor b = add(mul(sub(keep, 1.0), kAlpha * a), kAlpha * a * p);  // dropped: -alpha a + alpha a p
  return add(mul(x, mul(keep, a)), b);
}
}  // namespace

AlphaDropout::AlphaDropout(double p) : p(p) { check_p("AlphaDropout", p); }
Tensor AlphaDropout::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return alpha_dropout(x, p, is_training(), x.shape());
}
std::string AlphaDropout::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

FeatureAlphaDropout::FeatureAlphaDropout(double p) : p(p) { check_p("FeatureAlphaDropout", p); }
Tensor FeatureAlphaDropout::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() < 2)
    throw Error(fmt::format("FeatureAlphaDropout: expected input [N, C, *] of at least 2 dims, got {}",
                            x.shape().str()));
  Dims noise = Dims::filled(x.dim(), 1);
  noise[0] = x.size(0);
  noise[1] = x.size(1);
  return alpha_dropout(x, p, is_training(), noise);
}
std::string FeatureAlphaDropout::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

// ---- activations
Tensor LogSoftmax::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  return log_softmax(x, dim);
}

// ---- padding
Pad2d::Pad2d(const char* name, std::vector<int64_t> p, PadOptions opt) : options(opt) {
  if (p.size() == 1) p = {p[0], p[0], p[0], p[0]};
  if (p.size() != 4)
    throw Error(fmt::format("{}: expected one padding or four (left, right, top, bottom), got {}", name, p.size()));
  padding = std::move(p);
}
Tensor Pad2d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(fmt::format("{}: expected input [N, C, H, W] or [C, H, W], got {}", type_name(), x.shape().str()));
  return pad(x, padding, options);
}
std::string Pad2d::extra_repr() const {
  std::string v = options.mode == PadMode::constant && options.value != 0 ? fmt::format(", value={}", options.value) : "";
  return fmt::format("({}, {}, {}, {}){}", padding[0], padding[1], padding[2], padding[3], v);
}

}  // namespace reel::nn
