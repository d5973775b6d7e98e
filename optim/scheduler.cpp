// LR schedulers in closed form (PyTorch's chainable forms agree with these up to
// rounding).
#include "scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numbers>

namespace reel::optim {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(&opt) {
  for (Group& g : opt.param_groups()) {
    if (!g.initial_lr) g.initial_lr = g.hyper.lr;
    base_lrs_.push_back(*g.initial_lr);
  }
}

void LRScheduler::step() {
  ++last_epoch_;
  apply(last_epoch_);
}

void LRScheduler::apply(int64_t epoch) {
  auto& groups = opt_->param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) groups[i].hyper.lr = lr_at(epoch, base_lrs_[i], i);
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (const Group& g : opt_->param_groups()) out.push_back(g.hyper.lr);
  return out;
}

// ---- StepLR, MultiStepLR, CosineAnnealingLR
StepLR::StepLR(Optimizer& opt, StepLROptions o) : LRScheduler(opt), options(o) {
  if (o.step_size <= 0) throw Error(fmt::format("StepLR: step_size must be positive, got {}", o.step_size));
  start();
}
double StepLR::lr_at(int64_t epoch, double base_lr, size_t) const {
  return base_lr * std::pow(options.gamma, double(epoch / options.step_size));
}

MultiStepLR::MultiStepLR(Optimizer& opt, MultiStepLROptions o) : LRScheduler(opt), options(std::move(o)) {
  if (!std::is_sorted(options.milestones.begin(), options.milestones.end()))
    throw Error("MultiStepLR: milestones must be increasing");
  start();
}
double MultiStepLR::lr_at(int64_t epoch, double base_lr, size_t) const {
  auto passed = std::upper_bound(options.milestones.begin(), options.milestones.end(), epoch) - options.milestones.begin();
  return base_lr * std::pow(options.gamma, double(passed));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, CosineAnnealingLROptions o) : LRScheduler(opt), options(o) {
  if (o.T_max <= 0) throw Error(fmt::format("CosineAnnealingLR: T_max must be positive, got {}", o.T_max));
  start();
}
double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr, size_t) const {
  double c = std::cos(std::numbers::pi * double(epoch) / double(options.T_max));
  return options.eta_min + (base_lr - options.eta_min) * (1 + c) / 2;
}

// ---- OneCycleLR
OneCycleLR::OneCycleLR(Optimizer& opt, OneCycleLROptions o) : LRScheduler(opt), options(o) {
  if (o.total_steps <= 0) throw Error(fmt::format("OneCycleLR: total_steps must be positive, got {}", o.total_steps));
  if (!(o.pct_start >= 0 && o.pct_start <= 1))
    throw Error(fmt::format("OneCycleLR: pct_start must be in [0, 1], got {}", o.pct_start));
  double initial = 1.0 / o.div_factor, min = initial / o.final_div_factor, T = double(o.total_steps);
  double up = o.pct_start * T - 1;
  if (o.three_phase)
    phases_ = {{up, initial, 1.0, o.max_momentum, o.base_momentum},
               {2 * o.pct_start * T - 2, 1.0, initial, o.base_momentum, o.max_momentum},
               {T - 1, initial, min, o.max_momentum, o.max_momentum}};
  else
    phases_ = {{up, initial, 1.0, o.max_momentum, o.base_momentum}, {T - 1, 1.0, min, o.base_momentum, o.max_momentum}};
  for (Group& g : opt.param_groups()) g.initial_lr = o.max_lr * initial;
  start();
}

double OneCycleLR::interpolate(int64_t epoch, bool momentum) const {
  if (epoch > options.total_steps)
    throw Error(fmt::format("OneCycleLR: stepped {} times, more than total_steps {}", epoch, options.total_steps));
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (double(epoch) <= ph.end_step || i + 1 == phases_.size()) {
      double pct = (double(epoch) - start_step) / (ph.end_step - start_step);
      double a = momentum ? ph.start_m : ph.start_lr, b = momentum ? ph.end_m : ph.end_lr;
      if (options.anneal_strategy == OneCycleLROptions::Anneal::cos)
        return b + (a - b) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
      return (b - a) * pct + a;
    }
    start_step = ph.end_step;
  }
  return 0;
}

double OneCycleLR::lr_at(int64_t epoch, double, size_t) const { return options.max_lr * interpolate(epoch, false); }
double OneCycleLR::momentum_at(int64_t epoch) const { return interpolate(epoch, true); }

void OneCycleLR::apply(int64_t epoch) {
  LRScheduler::apply(epoch);
  if (!options.cycle_momentum) return;
  double m = momentum_at(epoch);
  for (Group& g : opt_->param_groups()) {
    bool betas = g.hyper.kind == OptimStep::adam || g.hyper.kind == OptimStep::adamw || g.hyper.kind == OptimStep::adamax;
    (betas ? g.hyper.beta1 : g.hyper.momentum) = m;
  }
}

// ---- LinearWarmup
LinearWarmup::LinearWarmup(Optimizer& opt, LinearWarmupOptions o) : LinearWarmup(opt, o, nullptr) {}

LinearWarmup::LinearWarmup(Optimizer& opt, LinearWarmupOptions o, std::unique_ptr<LRScheduler> then)
    : LRScheduler(opt), options(o), then_(std::move(then)) {
  if (o.warmup_steps < 0) throw Error(fmt::format("LinearWarmup: warmup_steps must be >= 0, got {}", o.warmup_steps));
  if (!(o.start_factor >= 0 && o.start_factor <= 1))
    throw Error(fmt::format("LinearWarmup: start_factor must be in [0, 1], got {}", o.start_factor));
  if (then_ && then_->opt_ != opt_) throw Error("LinearWarmup: the scheduler to follow steps another optimizer");
  start();
}

double LinearWarmup::lr_at(int64_t epoch, double base_lr, size_t group) const {
  int64_t W = options.warmup_steps;
  if (then_ && epoch >= W) return then_->lr_at(epoch - W, base_lr, group);
  if (W == 0) return base_lr;
  double f = options.start_factor + (1 - options.start_factor) * double(std::min(epoch, W)) / double(W);
  return base_lr * f;
}

void LinearWarmup::apply(int64_t epoch) {
  if (then_ && epoch >= options.warmup_steps) then_->apply(epoch - options.warmup_steps);
  else LRScheduler::apply(epoch);
}

}  // namespace reel::optim
