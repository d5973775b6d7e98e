// The built-in optimizers: option checks (PyTorch's), their updates in tensor ops (the
// reference: PyTorch 1.13's single-tensor rules), and the step that hands each device's
// parameters to the backend's fused pass (Backend::optim_step), or runs update() per parameter.
#include "optimizers.h"

#include <fmt/format.h>

#include <algorithm>

#include "../autograd/autocast.h"
#include "../autograd/grad_mode.h"
#include "../autograd/ops.h"
#include "../tensor/optim_step.h"

namespace reel::optim {

namespace {
void check(bool ok, const char* opt, const char* what, double v) {
  if (!ok) throw Error(fmt::format("{}: invalid {} {}", opt, what, v));
}
void check_betas(const char* opt, std::pair<double, double> b) {
  check(b.first >= 0 && b.first < 1, opt, "beta1 (expected in [0, 1))", b.first);
  check(b.second >= 0 && b.second < 1, opt, "beta2 (expected in [0, 1))", b.second);
}

Hyper sgd(const SGDOptions& o) {
  check(o.lr >= 0, "SGD", "lr", o.lr);
  check(o.momentum >= 0, "SGD", "momentum", o.momentum);
  check(o.weight_decay >= 0, "SGD", "weight_decay", o.weight_decay);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw Error(fmt::format("SGD: nesterov needs momentum > 0 and dampening 0, got momentum {} and dampening {}",
                            o.momentum, o.dampening));
  return {.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening, .weight_decay = o.weight_decay,
          .nesterov = o.nesterov, .maximize = o.maximize};
}

template <typename Options>
Hyper adam_like(const char* name, const Options& o) {
  check(o.lr >= 0, name, "lr", o.lr);
  check(o.eps >= 0, name, "eps", o.eps);
  check(o.weight_decay >= 0, name, "weight_decay", o.weight_decay);
  check_betas(name, o.betas);
  return {.lr = o.lr, .weight_decay = o.weight_decay, .beta1 = o.betas.first, .beta2 = o.betas.second, .eps = o.eps,
          .maximize = o.maximize, .betas = true};
}

Hyper rmsprop(const RMSpropOptions& o) {
  check(o.lr >= 0, "RMSprop", "lr", o.lr);
  check(o.eps >= 0, "RMSprop", "eps", o.eps);
  check(o.momentum >= 0, "RMSprop", "momentum", o.momentum);
  check(o.weight_decay >= 0, "RMSprop", "weight_decay", o.weight_decay);
  check(o.alpha >= 0, "RMSprop", "alpha", o.alpha);
  return {.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay, .eps = o.eps, .alpha = o.alpha,
          .maximize = o.maximize, .centered = o.centered};
}

Hyper adagrad(const AdagradOptions& o) {
  check(o.lr >= 0, "Adagrad", "lr", o.lr);
  check(o.lr_decay >= 0, "Adagrad", "lr_decay", o.lr_decay);
  check(o.weight_decay >= 0, "Adagrad", "weight_decay", o.weight_decay);
  check(o.initial_accumulator_value >= 0, "Adagrad", "initial_accumulator_value", o.initial_accumulator_value);
  check(o.eps >= 0, "Adagrad", "eps", o.eps);
  return {.lr = o.lr, .weight_decay = o.weight_decay, .eps = o.eps, .maximize = o.maximize,
          .extra = {{"lr_decay", o.lr_decay}, {"initial_accumulator_value", o.initial_accumulator_value}}};
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> g(1);
  g[0].params = std::move(params);
  return g;
}
}  // namespace

// ---- the step: the fused pass per device and group, or update() per parameter

namespace {
// The state tensors of each kind, in Backend::optim_step's order: the names a checkpoint
// keeps them under (PyTorch's).
const char* state_name(OptimStep::Kind kind, int slot) {
  switch (kind) {
    case OptimStep::sgd: return slot == 0 ? "momentum_buffer" : nullptr;
    case OptimStep::adam:
    case OptimStep::adamw: return slot == 0 ? "exp_avg" : slot == 1 ? "exp_avg_sq" : nullptr;
    case OptimStep::adamax: return slot == 0 ? "exp_avg" : slot == 1 ? "exp_inf" : nullptr;
    case OptimStep::rmsprop: return slot == 0 ? "square_avg" : slot == 1 ? "grad_avg" : "momentum_buffer";
    case OptimStep::adagrad: return slot == 0 ? "sum" : nullptr;
  }
  return nullptr;
}
}  // namespace

BuiltinOptimizer::BuiltinOptimizer(std::string name, OptimStep::Kind kind, std::vector<ParamGroup> groups,
                                   const Hyper& defaults)
    : Optimizer(std::move(name), std::move(groups), defaults), kind_(kind) {}

OptimStep BuiltinOptimizer::step_of(const Hyper& h) const {
  OptimStep s;
  s.kind = kind_;
  s.lr = h.lr, s.momentum = h.momentum, s.dampening = h.dampening, s.weight_decay = h.weight_decay;
  s.nesterov = h.nesterov, s.maximize = h.maximize;
  s.beta1 = h.beta1, s.beta2 = h.beta2, s.eps = h.eps, s.alpha = h.alpha, s.centered = h.centered;
  if (kind_ == OptimStep::adagrad) s.lr_decay = h.get("lr_decay"), s.initial_accumulator = h.get("initial_accumulator_value");
  return s;
}

void BuiltinOptimizer::step(Site site) {
  SiteScope scope(site);
  NoGradGuard guard;
  struct Bucket {
    Device device;
    int64_t step;
    bool fresh;  // SGD: momentum buffers created now (PyTorch's "buffer is None")
    std::vector<Tensor> p, g, s1, s2, s3;
  };
  check_gradients(site);  // before anything changes: a bad gradient leaves every parameter and state as it was
  auto& groups = param_groups();
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& grp = groups[gi];
    const OptimStep h = step_of(grp.hyper);
    std::vector<Bucket> buckets;
    buckets.reserve(2);
    for (size_t i = 0; i < grp.params.size(); ++i) {
      const Tensor& p = grp.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (!g.is_contiguous()) g = g.contiguous();
      ParamState& st = state(gi, i);
      Tensor* slot[3] = {};
      bool fresh = false;
      for (int k = 0; k < 3; ++k) {
        if (!optim_uses_state(h, k)) continue;
        const char* name = state_name(kind_, k);
        fresh |= kind_ == OptimStep::sgd && !st.find(name);
        slot[k] = &st.buffer(name, [&] {
          return kind_ == OptimStep::adagrad ? full_like(p, h.initial_accumulator) : zeros_like(p);
        });
      }
      for (auto& [n, t] : st.buffers)
        if (t.defined() && !(t.device() == p.device())) t = t.to(p.device());  // the module moved
      ++st.step;
      Bucket* b = nullptr;
      for (Bucket& x : buckets)
        if (x.device == p.device() && x.step == st.step && x.fresh == fresh) b = &x;
      if (!b) {
        b = &buckets.emplace_back(Bucket{p.device(), st.step, fresh, {}, {}, {}, {}, {}});
        for (std::vector<Tensor>* v : {&b->p, &b->g, &b->s1, &b->s2, &b->s3}) v->reserve(grp.params.size());
      }
      b->p.push_back(p);
      b->g.push_back(g);
      if (slot[0]) b->s1.push_back(*slot[0]);
      if (slot[1]) b->s2.push_back(*slot[1]);
      if (slot[2]) b->s3.push_back(*slot[2]);
    }
    for (Bucket& b : buckets) {
      OptimStep s = optim_at_step(h, b.step);
      s.first_step = b.fresh;
      // autocast's copies of the parameters a forward read, rounded in the same pass
      std::vector<Tensor> rounded;
      bool any_rounded = false;
      for (const Tensor& p : b.p) any_rounded |= rounded.emplace_back(autocast_copy_target(p)).defined();
      Backend& be = backend_for(b.device);
      bool wrote = fused_ && any_rounded && be.optim_step_rounded(s, b.p, b.g, b.s1, b.s2, b.s3, rounded);
      if (fused_) {
        if (!wrote) be.optim_step(s, b.p, b.g, b.s1, b.s2, b.s3);
        for (Tensor& p : b.p) p.storage()->bump_version();
      } else {
        for (size_t k = 0; k < b.p.size(); ++k) {
          Tensor t1 = b.s1.empty() ? Tensor() : b.s1[k], t2 = b.s2.empty() ? Tensor() : b.s2[k],
                 t3 = b.s3.empty() ? Tensor() : b.s3[k];
          Tensor* const st[3] = {&t1, &t2, &t3};
          update(b.p[k], b.g[k], st, s);
        }
      }
      for (size_t k = 0; k < rounded.size(); ++k)
        if (rounded[k].defined()) {
          if (wrote) autocast_copy_written(b.p[k], rounded[k]);
          else autocast_copy_drop(b.p[k]);
        }
    }
  }
  count_step();
}

NamedTensors BuiltinOptimizer::state_dict() const {
  NamedTensors out = Optimizer::state_dict();
  out.insert(out.begin(), {"kind", scalar_tensor(double(kind_), {.dtype = DType::i64})});
  return out;
}

void BuiltinOptimizer::load_state_dict(const NamedTensors& state, const std::string& source) {
  auto bad = [&](const std::string& what) {
    throw Error(fmt::format("{}: load from {}: {}; nothing was loaded", name(), source, what));
  };
  // The kind first: a state of another optimizer says so before its names differ.
  auto kind = std::find_if(state.begin(), state.end(), [](const auto& e) { return e.first == "kind"; });
  if (kind == state.end()) bad("\"kind\" is missing");
  if (!kind->second.defined() || kind->second.numel() != 1) bad("\"kind\" is not a [] tensor");
  if (int64_t k = kind->second.item<int64_t>(); k != int64_t(kind_))
    bad(fmt::format("it holds the state of another kind of optimizer (kind {}, this is {} = {})", k, name(),
                    int64_t(kind_)));
  NamedTensors rest;
  rest.reserve(state.size());
  for (const auto& [n, t] : state) {
    if (n != "kind") {
      // a state tensor ("<group>.<index>.<name>") must be one of this kind's
      size_t d1 = n.find('.'), d2 = d1 == std::string::npos ? d1 : n.find('.', d1 + 1);
      if (d2 != std::string::npos) {
        std::string bn = n.substr(d2 + 1);
        bool known = bn == "step";
        for (int k = 0; k < 3; ++k) known |= state_name(kind_, k) && bn == state_name(kind_, k);
        if (!known) bad(fmt::format("unexpected \"{}\" (parameter counts or optimizer kinds differ)", n));
      }
      rest.emplace_back(n, t);
    }
  }
  Optimizer::load_state_dict(rest, source);
}

// ---- the updates in tensor ops (PyTorch 1.13's _single_tensor_* rules); g is a fresh
// tensor or the gradient itself, never written in place

void SGD::update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const {
  if (s.maximize) g = -g;
  if (s.weight_decay != 0) g = g + p * s.weight_decay;
  if (s.momentum != 0) {
    Tensor& b = *state[0];
    if (s.first_step) b.copy_(g);
    else b.mul_(s.momentum).add_(g, 1 - s.dampening);
    g = s.nesterov ? g + b * s.momentum : b;
  }
  p.sub_(g, s.lr);
}

namespace {
// Adam's and AdamW's shared moments and step (AdamW decays p before).
void adam_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const OptimStep& s) {
  m.mul_(s.beta1).add_(g, 1 - s.beta1);
  v.mul_(s.beta2).add_(g * g, 1 - s.beta2);
  Tensor denom = sqrt(v) / std::sqrt(s.bias_correction2) + s.eps;
  p.sub_(m / denom, s.lr / s.bias_correction1);
}
}  // namespace

void Adam::update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const {
  if (s.maximize) g = -g;
  if (s.weight_decay != 0) g = g + p * s.weight_decay;
  adam_update(p, g, *state[0], *state[1], s);
}

void AdamW::update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const {
  if (s.maximize) g = -g;
  p.mul_(1 - s.lr * s.weight_decay);
  adam_update(p, g, *state[0], *state[1], s);
}

void Adamax::update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const {
  if (s.maximize) g = -g;
  if (s.weight_decay != 0) g = g + p * s.weight_decay;
  Tensor &m = *state[0], &u = *state[1];
  m.mul_(s.beta1).add_(g, 1 - s.beta1);
  u.copy_(maximum(u * s.beta2, abs(g) + s.eps));
  p.sub_(m / u, s.lr / s.bias_correction1);
}

void RMSprop::update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const {
  if (s.maximize) g = -g;
  if (s.weight_decay != 0) g = g + p * s.weight_decay;
  Tensor& v = *state[0];
  v.mul_(s.alpha).add_(g * g, 1 - s.alpha);
  Tensor avg;
  if (s.centered) {
    Tensor& a = *state[1];
    a.mul_(s.alpha).add_(g, 1 - s.alpha);
    avg = sqrt(v - a * a) + s.eps;
  } else {
    avg = sqrt(v) + s.eps;
  }
  if (s.momentum > 0) {
    Tensor& b = *state[2];
    b.mul_(s.momentum).add_(g / avg);
    p.sub_(b, s.lr);
  } else {
    p.sub_(g / avg, s.lr);
  }
}

void Adagrad::update(Tensor& p, Tensor g, Tensor* const state[3], const OptimStep& s) const {
  if (s.maximize) g = -g;
  if (s.weight_decay != 0) g = g + p * s.weight_decay;
  Tensor& sum = *state[0];
  sum.add_(g * g);
  p.sub_(g / (sqrt(sum) + s.eps), s.lr / s.bias_correction1);
}

// ---- constructors

SGD::SGD(std::vector<Tensor> params, SGDOptions opt) : SGD(one_group(std::move(params)), opt) {}
SGD::SGD(std::vector<ParamGroup> groups, SGDOptions opt) : BuiltinOptimizer("SGD", OptimStep::sgd, std::move(groups), sgd(opt)) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions opt) : Adam(one_group(std::move(params)), opt) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions opt)
    : BuiltinOptimizer("Adam", OptimStep::adam, std::move(groups), adam_like("Adam", opt)) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions opt) : AdamW(one_group(std::move(params)), opt) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions opt)
    : BuiltinOptimizer("AdamW", OptimStep::adamw, std::move(groups), adam_like("AdamW", opt)) {}

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions opt) : Adamax(one_group(std::move(params)), opt) {}
Adamax::Adamax(std::vector<ParamGroup> groups, AdamaxOptions opt)
    : BuiltinOptimizer("Adamax", OptimStep::adamax, std::move(groups), adam_like("Adamax", opt)) {}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions opt) : RMSprop(one_group(std::move(params)), opt) {}
RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions opt)
    : BuiltinOptimizer("RMSprop", OptimStep::rmsprop, std::move(groups), rmsprop(opt)) {}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions opt) : Adagrad(one_group(std::move(params)), opt) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions opt)
    : BuiltinOptimizer("Adagrad", OptimStep::adagrad, std::move(groups), adagrad(opt)) {}

}  // namespace reel::optim
