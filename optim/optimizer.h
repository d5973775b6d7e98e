// Optimizer: the base of every optimizer, the built-in ones (SGD, Adam, AdamW, Adamax,
// RMSprop, Adagrad: optim/optimizers.h) and a user's own. libtorch's shape: parameter
// groups, each with its hyper-parameters (PyTorch's param_group dict: Hyper), state per
// parameter (named tensors and a step count: ParamState) and a virtual step(). What the
// base does for every optimizer: checks the parameters, zero_grad, state_dict /
// load_state_dict / save / load (so checkpoint::TrainingState resumes it bit for bit), the
// LR schedulers' lr, GradScaler's unscale and step, gradient clipping.
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//   for (auto [x, y] : loader) {
//     opt.zero_grad();
//     reel::cross_entropy(model(x), y).backward();
//     opt.step();
//   }
//
// A user's optimizer is a subclass whose step() updates the parameters in tensor ops, so
// it runs on whatever device the parameters are on (Lion, from its paper):
//   struct Lion : optim::Optimizer {
//     Lion(std::vector<Tensor> params, double lr, double beta1, double beta2)
//         : Optimizer("Lion", std::move(params), {.lr = lr, .beta1 = beta1, .beta2 = beta2}) {}
//     void step(Site site = {}) override {
//       for_each_parameter(site, [](Tensor& p, const Tensor& g, optim::ParamState& st, const optim::Hyper& h) {
//         Tensor& m = st.buffer("exp_avg", [&] { return zeros_like(p); });
//         p.mul_(1 - h.lr * h.weight_decay).sub_(sign(m * h.beta1 + g * (1 - h.beta1)), h.lr);
//         m.mul_(h.beta2).add_(g, 1 - h.beta2);
//       });
//     }
//   };
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A parameter group's hyper-parameters, PyTorch's param_group dict: the common ones by
// name (what the built-in optimizers read, what the LR schedulers set: lr, and OneCycleLR's
// momentum, or beta1 when `betas`), any other of a user's optimizer in `extra`
// (Adafactor's {"eps2", 1e-3}). All of them may change between steps; state_dict saves
// them all.
struct Hyper {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double alpha = 0.99;
  bool nesterov = false;
  bool maximize = false;
  bool centered = false;
  // The optimizer's own hyper-parameters by name (saved as "<group>.<name>").
  std::map<std::string, double> extra = {};
  // What the optimizer is, not saved: it steps with betas (OneCycleLR cycles beta1, as
  // PyTorch's does for an optimizer with "betas", else momentum).
  bool betas = false;

  // extra[name]; throws Error naming the hyper-parameter when the group has none such.
  double get(const std::string& name) const;
};

// Parameters that share hyper-parameters; lr and weight_decay default to the
// optimizer's options.
//   optim::AdamW opt({{.params = decayed}, {.params = biases, .weight_decay = 0.0}}, {.lr = 1e-3});
struct ParamGroup {
  std::vector<Tensor> params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// One parameter group as the optimizer keeps it.
struct Group {
  std::vector<Tensor> params;
  Hyper hyper;
  // The lr LR schedulers start from: set by the first scheduler made on this
  // optimizer from the lr of that moment (PyTorch's group["initial_lr"]).
  std::optional<double> initial_lr;
};

// The state of one parameter: its step count and its named tensors ("exp_avg"), created
// at its first step. Saved as "<group>.<index>.step" and "<group>.<index>.<name>".
struct ParamState {
  int64_t step = 0;  // the steps this parameter took (counted before its update runs)
  // In the order they were made; a deque, so that a reference buffer() returned stays
  // valid when the next one is made.
  std::deque<std::pair<std::string, Tensor>> buffers = {};

  // The tensor named `name`, made by `init()` when there is none yet.
  template <typename Init>
  Tensor& buffer(std::string_view name, Init&& init) {
    if (Tensor* t = find(name)) return *t;
    return buffers.emplace_back(std::string(name), std::forward<Init>(init)()).second;
  }
  // nullptr when there is none.
  Tensor* find(std::string_view name);
  const Tensor* find(std::string_view name) const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient (others are skipped and keep their
  // state, as in PyTorch), under no-grad.
  virtual void step(Site site = {}) = 0;
  // Clears the gradients: undefined (set_to_none, the default as in PyTorch 2.x,
  // which frees the memory and lets step() skip parameters without gradients) or zero-filled.
  void zero_grad(bool set_to_none = true);

  std::vector<Group>& param_groups() { return groups_; }
  const std::vector<Group>& param_groups() const { return groups_; }
  double lr() const { return groups_.front().hyper.lr; }  // of the first group
  void set_lr(double lr);  // of every group
  const std::string& name() const { return name_; }  // "SGD", "Adam", "Lion", ...
  int64_t steps_taken() const { return steps_; }
  // The state of parameter `index` of group `group` (PyTorch's optimizer.state[p]).
  ParamState& state(size_t group, size_t index);
  const ParamState& state(size_t group, size_t index) const;

  // ---- state. Names: "<group>.<index>.<buffer>" for state tensors
  // ("0.3.exp_avg"), "<group>.<index>.step" (i64 []) for step counts, "steps" (i64 []),
  // and "<group>.lr"-style f64 [] entries for every group's hyper-parameters.
  virtual NamedTensors state_dict() const;
  // Validates everything (group and parameter counts, hyper-parameter names, shapes)
  // before changing anything; throws Error naming `source` and the mismatch.
  virtual void load_state_dict(const NamedTensors& state, const std::string& source = "state dict");
  // A safetensors file; metadata records the optimizer's name.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // `defaults` are every group's hyper-parameters, but for a group's own lr and weight_decay.
  Optimizer(std::string name, std::vector<ParamGroup> groups, const Hyper& defaults);
  Optimizer(std::string name, std::vector<Tensor> params, const Hyper& defaults);

  // The body of most step()s: under no-grad with `site` as the call site, checks every
  // gradient against its parameter (before anything changes), then for each parameter
  // with a gradient counts its step and calls update(param, grad, its state, its group's
  // hyper-parameters), then counts the optimizer's step.
  using Update = std::function<void(Tensor& param, const Tensor& grad, ParamState& state, const Hyper& hyper)>;
  void for_each_parameter(Site site, const Update& update);
  // The checks of for_each_parameter, for a step() that walks the parameters itself:
  // each gradient matches its parameter's shape, dtype and device, f32 or f64, and the
  // parameter is contiguous.
  void check_gradients(Site site) const;
  void count_step() { ++steps_; }
  // The shape a saved state tensor must have (load_state_dict checks it): the parameter's,
  // unless an optimizer keeps others (Adafactor's row and column factors) and says so.
  virtual std::optional<Dims> state_shape(const std::string& buffer, const Tensor& param) const;

 private:
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
