// Group and instance normalisation, composed of layer_norm over reshaped views (so
// their gradients are layer_norm's), and the small layers Identity and Dropout2d.
//
//   nn::GroupNorm gn(8, 64);                       // x [N, 64, *] -> same shape
//   nn::InstanceNorm2d in(64, {.affine = true});   // x [N, 64, H, W] or [64, H, W]
#pragma once
#include "module.h"
#include "../autograd/ops.h"

namespace reel::nn {

// Normalises each of num_groups groups of channels of each sample over the group's
// channels and all positions; then y = y * weight[c] + bias[c] (affine).
// x [N, C, *] -> x's shape; weight 1, bias 0 of shape [C].
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
};
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Tensor weight, bias;  // [C], when affine
  int64_t num_groups, num_channels;
  GroupNormOptions options;
};

// Normalises each channel of each sample over its positions. x [N, C, H, W] or
// [C, H, W] -> x's shape. affine: weight 1, bias 0 of shape [C]. track_running_stats:
// training also updates running_mean/running_var [C] (the batch mean of the
// per-instance statistics, variance unbiased) by momentum; eval normalises with them.
struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;
  bool track_running_stats = false;
};
class InstanceNorm2d : public Module {
 public:
  explicit InstanceNorm2d(int64_t num_features, InstanceNormOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "InstanceNorm2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;                // [C], when affine
  Tensor running_mean, running_var;   // [C] f32, when tracking
  Tensor num_batches_tracked;         // [] i64, when tracking
  int64_t num_features;
  InstanceNormOptions options;
};

// y = x
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

// Zeroes whole channels with probability p in training and scales the rest by
// 1/(1-p); the identity in eval. x [N, C, H, W] (or [C, H, W]): one draw per (n, c).
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout2d"; }
  std::string extra_repr() const override;
  double p;
};

}  // namespace reel::nn
