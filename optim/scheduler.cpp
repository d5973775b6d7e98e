// LR schedulers in closed form (PyTorch's chainable forms agree with these up to
// rounding).
#include "scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numbers>
#include <set>

#include "../formats/safetensors.h"

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

// ---- state
NamedTensors LRScheduler::state_dict() const {
  auto scalar = [](double v) { return scalar_tensor(v, {.dtype = DType::f64}); };
  NamedTensors out;
  out.emplace_back("last_epoch", scalar_tensor(double(last_epoch_), {.dtype = DType::i64}));
  std::vector<double> lrs = get_last_lr();
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    out.emplace_back(fmt::format("{}.base_lr", i), scalar(base_lrs_[i]));
    out.emplace_back(fmt::format("{}.last_lr", i), scalar(lrs[i]));
  }
  for (const auto& [n, v] : settings()) out.emplace_back("options." + n, scalar(v));
  return out;
}

void LRScheduler::load_state_dict(const NamedTensors& state, const std::string& source) {
  auto bad = [&](const std::string& what) {
    throw Error(fmt::format("{}: load from {}: {}; nothing was loaded", name(), source, what));
  };
  std::map<std::string, double> given;
  for (const auto& [n, t] : state) {
    if (!t.defined() || t.numel() != 1)
      bad(fmt::format("\"{}\" is {}, expected a [] tensor", n, t.defined() ? t.shape().str() : "undefined"));
    if (!given.emplace(n, t.item<double>()).second) bad(fmt::format("\"{}\" appears twice", n));
  }
  std::set<std::string> used;
  auto take = [&](const std::string& n) {
    auto it = given.find(n);
    if (it == given.end()) bad(fmt::format("\"{}\" is missing", n));
    used.insert(n);
    return it->second;
  };
  for (const auto& [n, v] : settings())
    if (double saved = take("options." + n); saved != v)
      bad(fmt::format("option {} is {} in it but {} here (a scheduler made with other options)", n, saved, v));
  int64_t epoch = int64_t(take("last_epoch"));
  if (epoch < 0) bad(fmt::format("last_epoch is {}, expected >= 0", epoch));
  std::vector<double> base(base_lrs_.size()), last(base_lrs_.size());
  for (size_t i = 0; i < base.size(); ++i) {
    base[i] = take(fmt::format("{}.base_lr", i));
    last[i] = take(fmt::format("{}.last_lr", i));
  }
  for (const auto& [n, v] : given)
    if (!used.count(n)) bad(fmt::format("unexpected \"{}\" (other options, or more than the optimizer's {} groups)", n,
                                        base_lrs_.size()));
  last_epoch_ = epoch;
  base_lrs_ = base;
  apply(epoch);  // what else the step sets (OneCycleLR's momentum)
  auto& groups = opt_->param_groups();
  for (size_t i = 0; i < groups.size() && i < last.size(); ++i) {
    groups[i].hyper.lr = last[i];  // as saved, even if set by hand after the last step
    groups[i].initial_lr = base[i];
  }
}

void LRScheduler::save(const std::string& path) const {
  safetensors::save(path, state_dict(), {{"scheduler", name()}});
}

void LRScheduler::load(const std::string& path) {
  safetensors::File f = safetensors::load(path);
  auto it = f.metadata.find("scheduler");
  if (it != f.metadata.end() && it->second != name())
    throw Error(fmt::format("{}: load from {}: the file holds the state of a {} scheduler; nothing was loaded", name(),
                            path, it->second));
  load_state_dict(f.tensors, path);
}

// ---- StepLR, MultiStepLR, CosineAnnealingLR: per options type, its name, checks,
// formula and settings
namespace {
const char* name_of(const StepLROptions&) { return "StepLR"; }
void check(const StepLROptions& o) {
  if (o.step_size <= 0) throw Error(fmt::format("StepLR: step_size must be positive, got {}", o.step_size));
}
double lr_of(const StepLROptions& o, int64_t epoch, double base_lr) {
  return base_lr * std::pow(o.gamma, double(epoch / o.step_size));
}
std::vector<std::pair<std::string, double>> settings_of(const StepLROptions& o) {
  return {{"step_size", double(o.step_size)}, {"gamma", o.gamma}};
}

const char* name_of(const MultiStepLROptions&) { return "MultiStepLR"; }
void check(const MultiStepLROptions& o) {
  if (!std::is_sorted(o.milestones.begin(), o.milestones.end()))
    throw Error("MultiStepLR: milestones must be increasing");
}
double lr_of(const MultiStepLROptions& o, int64_t epoch, double base_lr) {
  auto passed = std::upper_bound(o.milestones.begin(), o.milestones.end(), epoch) - o.milestones.begin();
  return base_lr * std::pow(o.gamma, double(passed));
}
std::vector<std::pair<std::string, double>> settings_of(const MultiStepLROptions& o) {
  std::vector<std::pair<std::string, double>> out = {{"gamma", o.gamma}, {"milestones", double(o.milestones.size())}};
  for (size_t i = 0; i < o.milestones.size(); ++i) out.emplace_back(fmt::format("milestones.{}", i), double(o.milestones[i]));
  return out;
}

const char* name_of(const CosineAnnealingLROptions&) { return "CosineAnnealingLR"; }
void check(const CosineAnnealingLROptions& o) {
  if (o.T_max <= 0) throw Error(fmt::format("CosineAnnealingLR: T_max must be positive, got {}", o.T_max));
}
double lr_of(const CosineAnnealingLROptions& o, int64_t epoch, double base_lr) {
  double c = std::cos(std::numbers::pi * double(epoch) / double(o.T_max));
  return o.eta_min + (base_lr - o.eta_min) * (1 + c) / 2;
}
std::vector<std::pair<std::string, double>> settings_of(const CosineAnnealingLROptions& o) {
  return {{"T_max", double(o.T_max)}, {"eta_min", o.eta_min}};
}
}  // namespace

template <typename Options>
ClosedFormLR<Options>::ClosedFormLR(Optimizer& opt, Options o) : LRScheduler(opt), options(std::move(o)) {
  check(options);
  start();
}
template <typename Options>
double ClosedFormLR<Options>::lr_at(int64_t epoch, double base_lr, size_t) const {
  return lr_of(options, epoch, base_lr);
}
template <typename Options>
std::string ClosedFormLR<Options>::name() const {
  return name_of(options);
}
template <typename Options>
LRScheduler::Settings ClosedFormLR<Options>::settings() const {
  return settings_of(options);
}
template class ClosedFormLR<StepLROptions>;
template class ClosedFormLR<MultiStepLROptions>;
template class ClosedFormLR<CosineAnnealingLROptions>;

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
LRScheduler::Settings OneCycleLR::settings() const {
  const OneCycleLROptions& o = options;
  return {{"max_lr", o.max_lr}, {"total_steps", double(o.total_steps)}, {"pct_start", o.pct_start},
          {"anneal_strategy", double(o.anneal_strategy)}, {"cycle_momentum", double(o.cycle_momentum)},
          {"base_momentum", o.base_momentum}, {"max_momentum", o.max_momentum}, {"div_factor", o.div_factor},
          {"final_div_factor", o.final_div_factor}, {"three_phase", double(o.three_phase)}};
}
double OneCycleLR::momentum_at(int64_t epoch) const { return interpolate(epoch, true); }

void OneCycleLR::apply(int64_t epoch) {
  LRScheduler::apply(epoch);
  if (!options.cycle_momentum) return;
  double m = momentum_at(epoch);
  for (Group& g : opt_->param_groups()) {
    (g.hyper.betas ? g.hyper.beta1 : g.hyper.momentum) = m;
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

LRScheduler::Settings LinearWarmup::settings() const {
  Settings out = {{"warmup_steps", double(options.warmup_steps)}, {"start_factor", options.start_factor}};
  if (then_) {
    out.emplace_back("then." + then_->name(), 1.0);  // which scheduler follows
    for (const auto& [n, v] : then_->settings()) out.emplace_back("then." + n, v);
  }
  return out;
}

void LinearWarmup::apply(int64_t epoch) {
  if (then_) then_->base_lrs_ = base_lrs_;  // a loaded state may have changed them
  if (then_ && epoch >= options.warmup_steps) then_->apply(epoch - options.warmup_steps);
  else LRScheduler::apply(epoch);
}

}  // namespace reel::optim
