// LambdaLR, ExponentialLR, LinearLR, SequentialLR in closed form; ReduceLROnPlateau
// as PyTorch 1.13's step(metrics), statement for statement.
#include "lr_schedulers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace reel::optim {

// ---- LambdaLR
LambdaLR::LambdaLR(Optimizer& opt, Lambda lambda) : LambdaLR(opt, std::vector<Lambda>{std::move(lambda)}) {}

LambdaLR::LambdaLR(Optimizer& opt, std::vector<Lambda> per_group) : LRScheduler(opt), lambdas_(std::move(per_group)) {
  size_t groups = opt.param_groups().size();
  if (lambdas_.size() != 1 && lambdas_.size() != groups)
    throw Error(fmt::format("LambdaLR: expected 1 or {} lambdas (one per group), got {}", groups, lambdas_.size()));
  for (const Lambda& l : lambdas_)
    if (!l) throw Error("LambdaLR: a lambda is empty");
  start();
}

double LambdaLR::lr_at(int64_t epoch, double base_lr, size_t group) const {
  return base_lr * lambdas_[lambdas_.size() == 1 ? 0 : group](epoch);
}

// ---- ExponentialLR
ExponentialLR::ExponentialLR(Optimizer& opt, ExponentialLROptions o) : LRScheduler(opt), options(o) { start(); }

double ExponentialLR::lr_at(int64_t epoch, double base_lr, size_t) const {
  return base_lr * std::pow(options.gamma, double(epoch));
}

// ---- LinearLR
LinearLR::LinearLR(Optimizer& opt, LinearLROptions o) : LRScheduler(opt), options(o) {
  if (!(o.start_factor > 0 && o.start_factor <= 1))
    throw Error(fmt::format("LinearLR: start_factor must be in (0, 1], got {}", o.start_factor));
  if (!(o.end_factor >= 0 && o.end_factor <= 1))
    throw Error(fmt::format("LinearLR: end_factor must be in [0, 1], got {}", o.end_factor));
  if (o.total_iters < 0) throw Error(fmt::format("LinearLR: total_iters must be >= 0, got {}", o.total_iters));
  start();
}

double LinearLR::lr_at(int64_t epoch, double base_lr, size_t) const {
  const LinearLROptions& o = options;
  if (o.total_iters == 0) return base_lr * o.end_factor;
  double frac = double(std::min(epoch, o.total_iters)) / double(o.total_iters);
  return base_lr * (o.start_factor + (o.end_factor - o.start_factor) * frac);
}

LRScheduler::Settings LinearLR::settings() const {
  return {{"start_factor", options.start_factor}, {"end_factor", options.end_factor},
          {"total_iters", double(options.total_iters)}};
}

// ---- SequentialLR
SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::unique_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  if (schedulers_.empty()) throw Error("SequentialLR: expected at least one scheduler");
  if (milestones_.size() + 1 != schedulers_.size())
    throw Error(fmt::format("SequentialLR: expected {} milestones for {} schedulers, got {}", schedulers_.size() - 1,
                            schedulers_.size(), milestones_.size()));
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    if (!schedulers_[i]) throw Error(fmt::format("SequentialLR: scheduler {} is null", i));
    if (schedulers_[i]->opt_ != opt_)
      throw Error(fmt::format("SequentialLR: scheduler {} ({}) steps another optimizer", i, schedulers_[i]->name()));
  }
  for (size_t i = 0; i < milestones_.size(); ++i)
    if (milestones_[i] < 0 || (i > 0 && milestones_[i] < milestones_[i - 1]))
      throw Error(fmt::format("SequentialLR: milestones must be increasing and >= 0, got {} at {}", milestones_[i], i));
  start();
}

size_t SequentialLR::index_at(int64_t epoch) const {
  return size_t(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
}

double SequentialLR::lr_at(int64_t epoch, double base_lr, size_t group) const {
  size_t i = index_at(epoch);
  return schedulers_[i]->lr_at(epoch - start_of(i), base_lr, group);
}

void SequentialLR::apply(int64_t epoch) {
  size_t i = index_at(epoch);
  schedulers_[i]->base_lrs_ = base_lrs_;  // a loaded state may have changed them
  schedulers_[i]->apply(epoch - start_of(i));
}

LRScheduler::Settings SequentialLR::settings() const {
  Settings out = {{"schedulers", double(schedulers_.size())}};
  for (size_t i = 0; i < milestones_.size(); ++i) out.emplace_back(fmt::format("milestones.{}", i), double(milestones_[i]));
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    out.emplace_back(fmt::format("{}.{}", i, schedulers_[i]->name()), 1.0);
    for (const auto& [n, v] : schedulers_[i]->settings()) out.emplace_back(fmt::format("{}.{}", i, n), v);
  }
  return out;
}

// ---- ReduceLROnPlateau
ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions o) : options(o), opt_(&opt) {
  if (!(o.factor < 1)) throw Error(fmt::format("ReduceLROnPlateau: factor must be < 1, got {}", o.factor));
  if (o.patience < 0 || o.cooldown < 0)
    throw Error(fmt::format("ReduceLROnPlateau: patience and cooldown must be >= 0, got {} and {}", o.patience,
                            o.cooldown));
  best_ = o.mode == ReduceLROnPlateauOptions::Mode::min ? std::numeric_limits<double>::infinity()
                                                        : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double a) const {
  using O = ReduceLROnPlateauOptions;
  const bool rel = options.threshold_mode == O::ThresholdMode::rel;
  if (options.mode == O::Mode::min) return rel ? a < best_ * (1 - options.threshold) : a < best_ - options.threshold;
  return rel ? a > best_ * (options.threshold + 1) : a > best_ + options.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad steps in the cooldown do not count
  }
  if (num_bad_epochs_ > options.patience) {
    for (Group& g : opt_->param_groups()) {
      double old_lr = g.hyper.lr, new_lr = std::max(old_lr * options.factor, options.min_lr);
      if (old_lr - new_lr > options.eps) g.hyper.lr = new_lr;
    }
    cooldown_counter_ = options.cooldown;
    num_bad_epochs_ = 0;
  }
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  std::vector<double> out;
  for (const Group& g : opt_->param_groups()) out.push_back(g.hyper.lr);
  return out;
}

NamedTensors ReduceLROnPlateau::state_dict() const {
  auto scalar = [](double v) { return scalar_tensor(v, {.dtype = DType::f64}); };
  return {{"best", scalar(best_)},
          {"num_bad_epochs", scalar(double(num_bad_epochs_))},
          {"cooldown_counter", scalar(double(cooldown_counter_))},
          {"last_epoch", scalar(double(last_epoch_))}};
}

void ReduceLROnPlateau::load_state_dict(const NamedTensors& state, const std::string& source) {
  std::map<std::string, double> given;
  for (const auto& [n, t] : state) {
    if (!t.defined() || t.numel() != 1)
      throw Error(fmt::format("ReduceLROnPlateau: load from {}: \"{}\" is not a [] tensor; nothing was loaded", source, n));
    given[n] = t.item<double>();
  }
  for (const char* n : {"best", "num_bad_epochs", "cooldown_counter", "last_epoch"})
    if (!given.count(n))
      throw Error(fmt::format("ReduceLROnPlateau: load from {}: \"{}\" is missing; nothing was loaded", source, n));
  if (given.size() != 4)
    throw Error(fmt::format("ReduceLROnPlateau: load from {}: {} entries, expected 4; nothing was loaded", source,
                            given.size()));
  best_ = given["best"];
  num_bad_epochs_ = int64_t(given["num_bad_epochs"]);
  cooldown_counter_ = int64_t(given["cooldown_counter"]);
  last_epoch_ = int64_t(given["last_epoch"]);
}

}  // namespace reel::optim
