// Learning-rate schedulers, as torch.optim.lr_scheduler: constructing one sets each
// group's lr to its value at step 0; each step() advances one step (an epoch or an
// iteration, as the caller counts) and sets the lr of that step. Every schedule is
// computed in closed form from the group's initial_lr.
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//   optim::LinearWarmup sched(opt, {.warmup_steps = 500},
//                             optim::CosineAnnealingLR(opt, {.T_max = 10000}));
//   for (...) { ...; opt.step(); sched.step(); }
//
// A checkpoint keeps the schedule with the optimizer: sched.save(path) next to
// opt.save(...); to resume, make both as before, opt.load(...), sched.load(path).
#pragma once
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optimizer.h"

namespace reel::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();
  int64_t last_epoch() const { return last_epoch_; }  // steps taken; 0 after construction
  std::vector<double> get_last_lr() const;  // each group's lr now
  // The lr of group `group` at step `epoch` (with its base lr `base_lr`).
  virtual double lr_at(int64_t epoch, double base_lr, size_t group) const = 0;
  virtual std::string name() const = 0;  // "StepLR", ...

  // ---- state: "last_epoch" (i64 []), "<group>.base_lr" and "<group>.last_lr" (f64 []),
  // and the options as "options.<name>" (f64 []). Loading checks that the options are
  // this scheduler's own, then restores the step count, base lrs and each group's lr
  // (and OneCycleLR's momentum): the next step() continues the saved schedule.
  NamedTensors state_dict() const;
  // Validates everything before changing anything; throws Error naming `source`.
  void load_state_dict(const NamedTensors& state, const std::string& source = "state dict");
  void save(const std::string& path) const;  // a safetensors file; metadata names the scheduler
  void load(const std::string& path);

 protected:
  using Settings = std::vector<std::pair<std::string, double>>;
  explicit LRScheduler(Optimizer& opt);
  // The options that fix the schedule, by name, for state_dict's checks.
  virtual Settings settings() const = 0;
  LRScheduler(const LRScheduler&) = default;
  LRScheduler(LRScheduler&&) = default;
  // Sets the optimizer's hyper-parameters for step `epoch` (default: each group's lr).
  virtual void apply(int64_t epoch);
  // Derived constructors call this last: sets the lr of step 0 (not virtual-safe in the base).
  void start() { apply(0); }

  Optimizer* opt_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;

 private:
  friend class LinearWarmup;  // drives the scheduler it wraps
  friend class SequentialLR;  // drives the schedulers it runs
};

// lr = base gamma^floor(t / step_size)
struct StepLROptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};
// lr = base gamma^(number of milestones <= t)
struct MultiStepLROptions {
  std::vector<int64_t> milestones;  // increasing
  double gamma = 0.1;
};
// lr = eta_min + (base - eta_min) (1 + cos(pi t / T_max)) / 2
struct CosineAnnealingLROptions {
  int64_t T_max = 1;
  double eta_min = 0;
};

// A schedule given in closed form by its options alone: StepLR, MultiStepLR and
// CosineAnnealingLR are this class with their options (the formulas, checks and
// names are overloads on the options type, in scheduler.cpp).
template <typename Options>
class ClosedFormLR : public LRScheduler {
 public:
  ClosedFormLR(Optimizer& opt, Options o);
  double lr_at(int64_t epoch, double base_lr, size_t group) const override;
  std::string name() const override;
  Options options;

 protected:
  Settings settings() const override;
};
using StepLR = ClosedFormLR<StepLROptions>;
using MultiStepLR = ClosedFormLR<MultiStepLROptions>;
using CosineAnnealingLR = ClosedFormLR<CosineAnnealingLROptions>;
extern template class ClosedFormLR<StepLROptions>;
extern template class ClosedFormLR<MultiStepLROptions>;
extern template class ClosedFormLR<CosineAnnealingLROptions>;

// The 1cycle policy (PyTorch's OneCycleLR), stepped once per batch for total_steps
// steps: lr rises from max_lr / div_factor to max_lr over the first pct_start of the
// steps, then anneals to max_lr / (div_factor final_div_factor) (three_phase: back
// to the initial lr first, then down). With cycle_momentum (the default, as in
// PyTorch) the momentum (SGD, RMSprop) or beta1 (Adam family) moves inversely
// between max_momentum and base_momentum. Stepping past total_steps throws Error.
struct OneCycleLROptions {
  double max_lr = 0.1;
  int64_t total_steps = 0;
  double pct_start = 0.3;
  enum class Anneal { cos, linear } anneal_strategy = Anneal::cos;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool three_phase = false;
};
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, OneCycleLROptions o);
  double lr_at(int64_t epoch, double base_lr, size_t group) const override;
  std::string name() const override { return "OneCycleLR"; }
  double momentum_at(int64_t epoch) const;
  OneCycleLROptions options;

 protected:
  void apply(int64_t epoch) override;
  Settings settings() const override;

 private:
  struct Phase {
    double end_step, start_lr, end_lr, start_m, end_m;  // lrs as factors of max_lr
  };
  double interpolate(int64_t epoch, bool momentum) const;
  std::vector<Phase> phases_;
};

// Linear warm-up: lr = base (start_factor + (1 - start_factor) min(t, W) / W), then
// constant (PyTorch's LinearLR), or, given a scheduler `then`, that scheduler's
// lr at step t - W from step W on (PyTorch's SequentialLR with milestones [W]).
struct LinearWarmupOptions {
  int64_t warmup_steps = 5;
  double start_factor = 1.0 / 3.0;
};
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, LinearWarmupOptions o);
  template <typename S>
    requires(std::derived_from<S, LRScheduler> && !std::is_lvalue_reference_v<S>)
  LinearWarmup(Optimizer& opt, LinearWarmupOptions o, S&& then)
      : LinearWarmup(opt, o, std::unique_ptr<LRScheduler>(new S(std::move(then)))) {}
  LinearWarmup(Optimizer& opt, LinearWarmupOptions o, std::unique_ptr<LRScheduler> then);
  double lr_at(int64_t epoch, double base_lr, size_t group) const override;
  std::string name() const override { return "LinearWarmup"; }
  LinearWarmupOptions options;

 protected:
  void apply(int64_t epoch) override;
  Settings settings() const override;  // the scheduler it wraps: "then.<name>" entries

 private:
  std::unique_ptr<LRScheduler> then_;
};

}  // namespace reel::optim
