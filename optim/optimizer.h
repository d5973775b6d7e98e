// Optimizer: the base of SGD, Adam, AdamW, Adamax and RMSprop (optim/optimizers.h).
// It holds parameter groups, each with its own hyper-parameters, creates the state
// tensors lazily at the first step, and steps every parameter of a device in one
// fused backend pass (Backend::optim_step) with PyTorch's exact update rules.
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//   for (auto [x, y] : loader) {
//     opt.zero_grad();
//     reel::cross_entropy(model(x), y).backward();
//     opt.step();
//   }
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../tensor/backend.h"
#include "../tensor/tensor.h"

namespace reel::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Parameters that share hyper-parameters; lr and weight_decay default to the
// optimizer's options.
//   optim::AdamW opt({{.params = decayed}, {.params = biases, .weight_decay = 0.0}}, {.lr = 1e-3});
struct ParamGroup {
  std::vector<Tensor> params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// One parameter group as the optimizer keeps it. `hyper` holds its hyper-parameters
// (lr, momentum, betas, eps, ...), which may be changed between steps (schedulers
// do); its first_step and bias_correction fields are filled in at each step.
struct Group {
  std::vector<Tensor> params;
  OptimStep hyper;
  // The lr LR schedulers start from: set by the first scheduler made on this
  // optimizer from the lr of that moment (PyTorch's group["initial_lr"]).
  std::optional<double> initial_lr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient (others are skipped and keep their
  // state, as in PyTorch), under no-grad. One Backend::optim_step call per device
  // per group (per distinct step count, which differs only for parameters that
  // missed gradients in earlier steps).
  void step(Site site = {});
  // Clears the gradients: undefined (set_to_none, the default as in PyTorch 2.x,
  // which frees the memory and lets step() skip parameters without gradients) or zero-filled.
  void zero_grad(bool set_to_none = true);

  std::vector<Group>& param_groups() { return groups_; }
  const std::vector<Group>& param_groups() const { return groups_; }
  double lr() const { return groups_.front().hyper.lr; }  // of the first group
  void set_lr(double lr);  // of every group
  const std::string& name() const { return name_; }  // "SGD", "Adam", ...
  int64_t steps_taken() const { return steps_; }

  // ---- state. Names: "<group>.<index>.<buffer>" for state tensors
  // ("0.3.exp_avg"), "<group>.<index>.step" (i64 []) for step counts, and
  // "<group>.lr"-style f64 [] entries for every group's hyper-parameters.
  NamedTensors state_dict() const;
  // Validates everything (optimizer kind, group and parameter counts, shapes) before
  // changing anything; throws Error naming `source` and the mismatch.
  void load_state_dict(const NamedTensors& state, const std::string& source = "state dict");
  // A safetensors file; metadata records the optimizer's name.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  Optimizer(std::string name, std::vector<ParamGroup> groups, const OptimStep& defaults);

 private:
  struct ParamState {
    Tensor s1, s2, s3;  // as OptimStep's kind needs (see Backend::optim_step)
    int64_t step = 0;
  };
  static bool needs(const OptimStep& h, int slot);
  void make_state(const Group& g, const Tensor& p, ParamState& st) const;

  std::string name_;
  std::vector<Group> groups_;
  std::vector<std::vector<ParamState>> state_;  // [group][param]
  int64_t steps_ = 0;
};

// Scales the gradients of `params` so that their joint norm (of order norm_type:
// 2, or INFINITY for the max-norm) is at most max_norm, and returns the norm they
// had before, as a [] tensor of the first gradient's dtype and device (no host
// sync; [] f32 0 when no parameter has a gradient). As PyTorch:
// grads *= min(1, max_norm / (total_norm + 1e-6)). Parameters without a gradient are skipped.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      Site site = {});
// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value(const std::vector<Tensor>& params, double clip_value, Site site = {});

}  // namespace reel::optim
