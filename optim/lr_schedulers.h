// More learning-rate schedulers with torch.optim.lr_scheduler's names and PyTorch
// 1.13's lr sequences: LambdaLR, ExponentialLR, LinearLR, SequentialLR (closed forms,
// on the LRScheduler base of scheduler.h) and ReduceLROnPlateau (stepped with a metric).
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1});
//   std::vector<std::unique_ptr<optim::LRScheduler>> parts;
//   parts.push_back(std::make_unique<optim::LinearLR>(opt, optim::LinearLROptions{.total_iters = 5}));
//   parts.push_back(std::make_unique<optim::ExponentialLR>(opt, optim::ExponentialLROptions{.gamma = 0.9}));
//   optim::SequentialLR sched(opt, std::move(parts), {5});
//   optim::ReduceLROnPlateau plateau(opt, {.patience = 2});  plateau.step(val_loss);
#pragma once
#include <functional>
#include <limits>

#include "scheduler.h"

namespace reel::optim {

// lr = base lambda(t): one function for every group, or one per group
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& opt, Lambda lambda);
  LambdaLR(Optimizer& opt, std::vector<Lambda> per_group);
  double lr_at(int64_t epoch, double base_lr, size_t group) const override;
  std::string name() const override { return "LambdaLR"; }

 protected:
  Settings settings() const override { return {{"lambdas", double(lambdas_.size())}}; }

 private:
  std::vector<Lambda> lambdas_;
};

// lr = base gamma^t
struct ExponentialLROptions {
  double gamma = 0.1;
};
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, ExponentialLROptions o);
  double lr_at(int64_t epoch, double base_lr, size_t group) const override;
  std::string name() const override { return "ExponentialLR"; }
  ExponentialLROptions options;

 protected:
  Settings settings() const override { return {{"gamma", options.gamma}}; }
};

// lr = base (start + (end - start) min(t, total_iters) / total_iters)
struct LinearLROptions {
  double start_factor = 1.0 / 3.0;  // in (0, 1]
  double end_factor = 1.0;          // in [0, 1]
  int64_t total_iters = 5;
};
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, LinearLROptions o);
  double lr_at(int64_t epoch, double base_lr, size_t group) const override;
  std::string name() const override { return "LinearLR"; }
  LinearLROptions options;

 protected:
  Settings settings() const override;
};

// Runs schedulers one after another: from step milestones[i - 1] on, scheduler i at
// step t - milestones[i - 1] (restarted from its step 0, as PyTorch's step(0)).
// All must step `opt`; milestones increasing, one fewer than schedulers.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& opt, std::vector<std::unique_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones);
  double lr_at(int64_t epoch, double base_lr, size_t group) const override;
  std::string name() const override { return "SequentialLR"; }

 protected:
  void apply(int64_t epoch) override;
  Settings settings() const override;

 private:
  size_t index_at(int64_t epoch) const;
  int64_t start_of(size_t i) const { return i == 0 ? 0 : milestones_[i - 1]; }
  std::vector<std::unique_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Divides the lr by 1/factor when a metric has not improved for more than `patience`
// steps (then waits `cooldown` steps before counting again). Improvement: rel mode
// a < best (1 - threshold) (min) / a > best (1 + threshold) (max); abs mode a < best -
// threshold / a > best + threshold. A reduction smaller than eps is skipped.
struct ReduceLROnPlateauOptions {
  enum class Mode { min, max } mode = Mode::min;
  double factor = 0.1;  // < 1
  int64_t patience = 10;
  double threshold = 1e-4;
  enum class ThresholdMode { rel, abs } threshold_mode = ThresholdMode::rel;
  int64_t cooldown = 0;
  double min_lr = 0;  // for every group
  double eps = 1e-8;
};
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions o = {});
  void step(double metric);
  std::vector<double> get_last_lr() const;
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  // "best", "num_bad_epochs", "cooldown_counter", "last_epoch" (f64 [])
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state, const std::string& source = "state dict");
  ReduceLROnPlateauOptions options;

 private:
  bool is_better(double a) const;
  Optimizer* opt_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace reel::optim
