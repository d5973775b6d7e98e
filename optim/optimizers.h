// The optimizers (SGD, Adam, AdamW, Adamax, RMSprop, Adagrad), with PyTorch 1.13's update rules and defaults. g is the gradient
// (negated when maximize), p the parameter, t the step count (from 1).
//
//   optim::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
//   optim::AdamW adamw(model.parameters(), {.lr = 1e-3, .weight_decay = 0.05});
//   optim::Adam adam(model.parameters(), 1e-2);  // libtorch's positional lr
// A bare {} picks the options (the lr template cannot be deduced from it).
//
// Each is written as a user's optimizer would be: its update in tensor ops (update(), the
// reference anyone can read, and what set_fused(false) runs), and, as the fast path, the
// backend's fused pass over all parameters of a device (Backend::optim_step, which every
// backend provides: cpu/optim.cpp, cuda/optim.cu).
#pragma once
#include <type_traits>
#include <utility>

#include "../tensor/backend.h"
#include "optimizer.h"

namespace reel::optim {

// The built-in optimizers' step: per device and group, the backend's fused pass (while
// fused() is on, the default), else update() per parameter. Their state_dict also
// records the kind ("kind", i64 []), which load_state_dict checks.
class BuiltinOptimizer : public Optimizer {
 public:
  void step(Site site = {}) override;
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state, const std::string& source = "state dict") override;
  // Off: every step runs update(), the tensor-ops reference, instead of the backend's
  // fused pass (PyTorch's fused=False). On by default.
  void set_fused(bool on) { fused_ = on; }
  bool fused() const { return fused_; }

 protected:
  BuiltinOptimizer(std::string name, OptimStep::Kind kind, std::vector<ParamGroup> groups, const Hyper& defaults);
  // One parameter's update in tensor ops, PyTorch's rule: `s` holds the group's
  // hyper-parameters at this parameter's step (bias corrections folded in, first_step for
  // SGD's new momentum buffer), `state` the kind's state tensors as Backend::optim_step
  // takes them (undefined where unused).
  virtual void update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const = 0;

 private:
  OptimStep step_of(const Hyper& h) const;
  OptimStep::Kind kind_;
  bool fused_ = true;
};

// g += wd p; b = t == 1 ? g : momentum b + (1 - dampening) g;
// g = nesterov ? g + momentum b : b (when momentum != 0); p -= lr g
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0
  bool maximize = false;
};
class SGD : public BuiltinOptimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions opt = {});
  SGD(std::vector<ParamGroup> groups, SGDOptions opt = {});
  // libtorch's optim::SGD(params, lr): the learning rate by position, the rest at its defaults
  template <typename L>
    requires std::is_arithmetic_v<L>
  SGD(std::vector<Tensor> params, L lr) : SGD(std::move(params), SGDOptions{.lr = double(lr)}) {}

 protected:
  void update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const override;
};

// g += wd p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool maximize = false;
};
class Adam : public BuiltinOptimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions opt = {});
  Adam(std::vector<ParamGroup> groups, AdamOptions opt = {});
  // libtorch's optim::Adam(params, lr): the learning rate by position, the rest at its defaults
  template <typename L>
    requires std::is_arithmetic_v<L>
  Adam(std::vector<Tensor> params, L lr) : Adam(std::move(params), AdamOptions{.lr = double(lr)}) {}

 protected:
  void update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const override;
};

// Adam with decoupled weight decay: p *= 1 - lr wd first, and g is not decayed.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool maximize = false;
};
class AdamW : public BuiltinOptimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions opt = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions opt = {});
  // libtorch's optim::AdamW(params, lr): the learning rate by position, the rest at its defaults
  template <typename L>
    requires std::is_arithmetic_v<L>
  AdamW(std::vector<Tensor> params, L lr) : AdamW(std::move(params), AdamWOptions{.lr = double(lr)}) {}

 protected:
  void update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const override;
};

// g += wd p; m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) * m / u
struct AdamaxOptions {
  double lr = 2e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool maximize = false;
};
class Adamax : public BuiltinOptimizer {
 public:
  Adamax(std::vector<Tensor> params, AdamaxOptions opt = {});
  Adamax(std::vector<ParamGroup> groups, AdamaxOptions opt = {});
  // libtorch's optim::Adamax(params, lr): the learning rate by position, the rest at its defaults
  template <typename L>
    requires std::is_arithmetic_v<L>
  Adamax(std::vector<Tensor> params, L lr) : Adamax(std::move(params), AdamaxOptions{.lr = double(lr)}) {}

 protected:
  void update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const override;
};

// g += wd p; v = alpha v + (1 - alpha) g^2; centered: a = alpha a + (1 - alpha) g,
// d = sqrt(v - a^2) + eps, else d = sqrt(v) + eps;
// momentum > 0: b = momentum b + g / d, p -= lr b; else p -= lr g / d
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};
class RMSprop : public BuiltinOptimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions opt = {});
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions opt = {});
  // libtorch's optim::RMSprop(params, lr): the learning rate by position, the rest at its defaults
  template <typename L>
    requires std::is_arithmetic_v<L>
  RMSprop(std::vector<Tensor> params, L lr) : RMSprop(std::move(params), RMSpropOptions{.lr = double(lr)}) {}

 protected:
  void update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const override;
};

// g += wd p; sum += g^2; p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(sum) + eps)
// (sum starts at initial_accumulator_value)
struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
};
class Adagrad : public BuiltinOptimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions opt = {});
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions opt = {});
  // libtorch's optim::Adagrad(params, lr): the learning rate by position, the rest at its defaults
  template <typename L>
    requires std::is_arithmetic_v<L>
  Adagrad(std::vector<Tensor> params, L lr) : Adagrad(std::move(params), AdagradOptions{.lr = double(lr)}) {}

 protected:
  void update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const override;
};

}  // namespace reel::optim
