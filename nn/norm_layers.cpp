// GroupNorm and InstanceNorm2d as layer_norm over [N, G, rest] / [N C, H W] views, the
// affine transform as a broadcast multiply-add; Dropout2d as a channel mask.
#include "norm_layers.h"

#include <fmt/format.h>

#include "../autograd/grad_mode.h"
#include "../tensor/backend.h"

namespace reel::nn {
namespace {
const char* py_bool(bool b) { return b ? "True" : "False"; }

// weight/bias [C] applied along dim 1 of y [N, C, *] (dim 0 of an unbatched [C, *])
Tensor affine(const Tensor& y, const Tensor& weight, const Tensor& bias, int channel_dim) {
  Dims shape = Dims::filled(y.dim(), 1);
  shape[channel_dim] = weight.shape()[0];
  return add(mul(y, weight.reshape(shape)), bias.reshape(shape));
}
}  // namespace

// ---- GroupNorm
GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions opt)
    : num_groups(num_groups), num_channels(num_channels), options(opt) {
  if (num_groups <= 0 || num_channels <= 0 || num_channels % num_groups != 0)
    throw Error(fmt::format("GroupNorm: num_channels must be a positive multiple of num_groups, got {} channels in {} "
                            "groups", num_channels, num_groups));
  if (opt.affine) {
    weight = ones({num_channels});
    bias = zeros({num_channels});
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor GroupNorm::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() < 2 || x.shape()[1] != num_channels)
    throw Error(fmt::format("GroupNorm: expected input [N, {}, *], got {}", num_channels, x.shape().str()));
  const int64_t N = x.shape()[0], per_group = x.numel() / (N ? N : 1) / num_groups;
  Tensor y = layer_norm(x.reshape({N, num_groups, per_group}), {per_group}, {}, {}, options.eps).reshape(x.shape());
  return options.affine ? affine(y, weight, bias, 1) : y;
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, options.eps, py_bool(options.affine));
}

// ---- InstanceNorm2d
InstanceNorm2d::InstanceNorm2d(int64_t num_features, InstanceNormOptions opt)
    : num_features(num_features), options(opt) {
  if (num_features <= 0) throw Error(fmt::format("InstanceNorm2d: num_features must be positive, got {}", num_features));
  if (opt.affine) {
    weight = ones({num_features});
    bias = zeros({num_features});
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  if (opt.track_running_stats) {
    running_mean = zeros({num_features});
    running_var = ones({num_features});
    num_batches_tracked = zeros({}, {.dtype = DType::i64});
  }
  register_buffer("running_mean", running_mean);
  register_buffer("running_var", running_var);
  register_buffer("num_batches_tracked", num_batches_tracked);
}

Tensor InstanceNorm2d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  const bool batched = x.dim() == 4;
  if ((x.dim() != 3 && x.dim() != 4) || x.shape()[batched ? 1 : 0] != num_features)
    throw Error(fmt::format("InstanceNorm2d: expected input [N, {0}, H, W] or [{0}, H, W], got {1}", num_features,
                            x.shape().str()));
  const int c_dim = batched ? 1 : 0;
  Tensor x4 = batched ? x : x.unsqueeze(0);
  const int64_t N = x4.shape()[0], C = num_features, HW = x4.shape()[2] * x4.shape()[3];
  Tensor y;
  if (options.track_running_stats && !is_training()) {
    // the running statistics, as batch_norm in eval mode
    y = batch_norm(x4, {}, {}, running_mean, running_var, false, options.momentum, options.eps);
  } else {
    y = layer_norm(x4.reshape({N * C, HW}), {HW}, {}, {}, options.eps).reshape(x4.shape());
    if (options.track_running_stats) {
      NoGradGuard no_grad;
      Tensor flat = x4.detach().reshape({N, C, HW});
      Tensor m = mean(mean(flat, {2}), {0}).to(running_mean.dtype());
      Tensor v = mean(var(flat, {2}, 1), {0}).to(running_var.dtype());
      double mom = options.momentum;
      running_mean.copy_(add(mul(running_mean, 1 - mom), mul(m, mom)));
      running_var.copy_(add(mul(running_var, 1 - mom), mul(v, mom)));
      backend_for(num_batches_tracked.device()).unary(UnaryOp::add_scalar, num_batches_tracked, num_batches_tracked, 1.0);
      num_batches_tracked.storage()->bump_version();
    }
  }
  if (!batched) y = y.squeeze(0);
  return options.affine ? affine(y, weight, bias, c_dim) : y;
}

std::string InstanceNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, options.eps,
                     options.momentum, py_bool(options.affine), py_bool(options.track_running_stats));
}

// ---- Dropout2d
Dropout2d::Dropout2d(double p) : p(p) {
  if (!(p >= 0 && p <= 1)) throw Error(fmt::format("Dropout2d: p must be in [0, 1], got {}", p));
}

Tensor Dropout2d::forward(const Tensor& x) {
  SiteScope at_caller = at_caller_site();
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(fmt::format("Dropout2d: expected input [N, C, H, W] or [C, H, W], got {}", x.shape().str()));
  if (!is_training() || p == 0) return x;
  if (p == 1) return mul(x, 0.0);
  // one keep/drop draw per channel, broadcast over the positions
  Dims mask_shape = x.shape();
  mask_shape[x.dim() - 1] = 1;
  mask_shape[x.dim() - 2] = 1;
  Tensor keep = lt(rand(mask_shape, {.dtype = x.dtype(), .device = x.device()}), 1 - p).to(x.dtype());
  return mul(x, mul(keep, 1 / (1 - p)));
}

std::string Dropout2d::extra_repr() const { return fmt::format("p={}", p); }

}  // namespace reel::nn
