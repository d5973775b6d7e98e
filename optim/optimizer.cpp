// Optimizer base: parameter groups, lazily created state, the fused step (one
// Backend::optim_step per device and group), state save/load, gradient clipping.
#include "optimizer.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "../autograd/autocast.h"
#include "../autograd/grad_mode.h"
#include "../autograd/ops.h"
#include "../formats/safetensors.h"

namespace reel::optim {

namespace {
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

// The hyper-parameters a checkpoint records, by name.
struct HyperField {
  const char* name;
  double OptimStep::*value;
};
constexpr HyperField kHyper[] = {
    {"lr", &OptimStep::lr},       {"momentum", &OptimStep::momentum}, {"dampening", &OptimStep::dampening},
    {"weight_decay", &OptimStep::weight_decay}, {"beta1", &OptimStep::beta1}, {"beta2", &OptimStep::beta2},
    {"eps", &OptimStep::eps},     {"alpha", &OptimStep::alpha}};
struct FlagField {
  const char* name;
  bool OptimStep::*value;
};
constexpr FlagField kFlags[] = {
    {"nesterov", &OptimStep::nesterov}, {"maximize", &OptimStep::maximize}, {"centered", &OptimStep::centered}};
// Adagrad's own, recorded only by Adagrad (so other optimizers' checkpoints stay as they were).
constexpr HyperField kAdagradHyper[] = {{"lr_decay", &OptimStep::lr_decay},
                                        {"initial_accumulator_value", &OptimStep::initial_accumulator}};
}  // namespace

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, const OptimStep& defaults)
    : name_(std::move(name)) {
  std::set<const TensorImpl*> seen;
  size_t total = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    ParamGroup& pg = groups[gi];
    for (size_t i = 0; i < pg.params.size(); ++i) {
      const Tensor& p = pg.params[i];
      std::string where = fmt::format("parameter {} of group {}", i, gi);
      if (!p.defined()) throw Error(fmt::format("{}: {} is undefined", name_, where));
      if (!p.is_floating_point())
        throw Error(fmt::format("{}: {} is {}, expected a floating-point tensor", name_, where, dtype_name(p.dtype())));
      if (!p.is_leaf()) throw Error(fmt::format("{}: {} is not a leaf (it was computed by an op)", name_, where));
      if (!seen.insert(p.impl()).second)
        throw Error(fmt::format("{}: {} appears more than once; each parameter belongs to one group", name_, where));
    }
    total += pg.params.size();
    Group g{std::move(pg.params), defaults, std::nullopt};
    if (pg.lr) g.hyper.lr = *pg.lr;
    if (pg.weight_decay) g.hyper.weight_decay = *pg.weight_decay;
    if (g.hyper.lr < 0) throw Error(fmt::format("{}: group {} has lr {}, expected >= 0", name_, gi, g.hyper.lr));
    if (g.hyper.weight_decay < 0)
      throw Error(fmt::format("{}: group {} has weight_decay {}, expected >= 0", name_, gi, g.hyper.weight_decay));
    state_.emplace_back(g.params.size());
    groups_.push_back(std::move(g));
  }
  if (total == 0) throw Error(fmt::format("{}: got an empty parameter list", name_));
}

void Optimizer::set_lr(double lr) {
  for (Group& g : groups_) g.hyper.lr = lr;
}

// Whether state slot 0, 1 or 2 is used by a step with these hyper-parameters
// (the contract of Backend::optim_step).
bool Optimizer::needs(const OptimStep& h, int slot) {
  switch (h.kind) {
    case OptimStep::sgd: return slot == 0 && h.momentum != 0;
    case OptimStep::adam:
    case OptimStep::adamw:
    case OptimStep::adamax: return slot < 2;
    case OptimStep::rmsprop: return slot == 0 || (slot == 1 && h.centered) || (slot == 2 && h.momentum > 0);
    case OptimStep::adagrad: return slot == 0;
  }
  return false;
}

void Optimizer::make_state(const Group& g, const Tensor& p, ParamState& st) const {
  Tensor* slots[3] = {&st.s1, &st.s2, &st.s3};
  for (int k = 0; k < 3; ++k) {
    Tensor& s = *slots[k];
    if (needs(g.hyper, k) && !s.defined())
      s = g.hyper.kind == OptimStep::adagrad ? full_like(p, g.hyper.initial_accumulator) : zeros_like(p);
    else if (s.defined() && !(s.device() == p.device())) s = s.to(p.device());  // the module moved
  }
}

void Optimizer::step(Site site) {
  SiteScope scope(site);
  NoGradGuard guard;
  struct Bucket {
    Device device;
    int64_t step;
    bool fresh;  // SGD: momentum buffers created now (PyTorch's "buffer is None")
    std::vector<Tensor> p, g, s1, s2, s3;
  };
  // Checked before anything changes: a bad gradient leaves every parameter and state as it was.
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      const Tensor& p = groups_[gi].params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto where = [&] { return fmt::format("parameter {} of group {}", i, gi); };  // formatted only to fail
      if (!(g.shape() == p.shape()) || g.dtype() != p.dtype() || !(g.device() == p.device()))
        fail(name_.c_str(), fmt::format("{} is {} {} {} but its gradient is {} {} {}", where(), p.shape().str(),
                                        dtype_name(p.dtype()), p.device().str(), g.shape().str(),
                                        dtype_name(g.dtype()), g.device().str()), site);
      if (p.dtype() != DType::f32 && p.dtype() != DType::f64)
        fail(name_.c_str(), fmt::format("{} is {}; optimizers step f32 and f64 parameters", where(),
                                        dtype_name(p.dtype())), site);
      if (!p.is_contiguous()) fail(name_.c_str(), where() + " is not contiguous", site);
    }
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& grp = groups_[gi];
    const OptimStep& h = grp.hyper;
    std::vector<Bucket> buckets;
    buckets.reserve(2);
    for (size_t i = 0; i < grp.params.size(); ++i) {
      const Tensor& p = grp.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (!g.is_contiguous()) g = g.contiguous();
      ParamState& st = state_[gi][i];
      bool fresh = h.kind == OptimStep::sgd && h.momentum != 0 && !st.s1.defined();
      make_state(grp, p, st);
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
      if (needs(h, 0)) b->s1.push_back(st.s1);
      if (needs(h, 1)) b->s2.push_back(st.s2);
      if (needs(h, 2)) b->s3.push_back(st.s3);
    }
    for (Bucket& b : buckets) {
      OptimStep s = h;
      s.first_step = b.fresh;
      s.bias_correction1 = 1 - std::pow(h.beta1, double(b.step));
      s.bias_correction2 = 1 - std::pow(h.beta2, double(b.step));
      if (h.kind == OptimStep::adagrad) s.bias_correction1 = 1 + double(b.step - 1) * h.lr_decay;
      // autocast's copies of the parameters a forward read, rounded in the same pass
      std::vector<Tensor> rounded;
      bool any_rounded = false;
      for (const Tensor& p : b.p) any_rounded |= rounded.emplace_back(autocast_copy_target(p)).defined();
      bool wrote = any_rounded && backend_for(b.device).optim_step_rounded(s, b.p, b.g, b.s1, b.s2, b.s3, rounded);
      if (!wrote) backend_for(b.device).optim_step(s, b.p, b.g, b.s1, b.s2, b.s3);
      for (Tensor& p : b.p) p.storage()->bump_version();
      for (size_t k = 0; k < rounded.size(); ++k)
        if (rounded[k].defined()) {
          if (wrote) autocast_copy_written(b.p[k], rounded[k]);
          else autocast_copy_drop(b.p[k]);
        }
    }
  }
  ++steps_;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard guard;
  for (Group& g : groups_)
    for (Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) p.set_grad(Tensor());
      else grad.zero_();
    }
}

// ---- state
NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  auto scalar = [](double v) { return scalar_tensor(v, {.dtype = DType::f64}); };
  out.emplace_back("kind", scalar_tensor(double(groups_.front().hyper.kind), {.dtype = DType::i64}));
  out.emplace_back("steps", scalar_tensor(double(steps_), {.dtype = DType::i64}));
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    for (const HyperField& f : kHyper) out.emplace_back(fmt::format("{}.{}", gi, f.name), scalar(g.hyper.*f.value));
    for (const FlagField& f : kFlags) out.emplace_back(fmt::format("{}.{}", gi, f.name), scalar(g.hyper.*f.value));
    if (g.hyper.kind == OptimStep::adagrad)
      for (const HyperField& f : kAdagradHyper)
        out.emplace_back(fmt::format("{}.{}", gi, f.name), scalar(g.hyper.*f.value));
    if (g.initial_lr) out.emplace_back(fmt::format("{}.initial_lr", gi), scalar(*g.initial_lr));
    for (size_t i = 0; i < g.params.size(); ++i) {
      const ParamState& st = state_[gi][i];
      if (st.step == 0) continue;
      out.emplace_back(fmt::format("{}.{}.step", gi, i), scalar_tensor(double(st.step), {.dtype = DType::i64}));
      const Tensor* slots[3] = {&st.s1, &st.s2, &st.s3};
      for (int k = 0; k < 3; ++k)
        if (slots[k]->defined()) out.emplace_back(fmt::format("{}.{}.{}", gi, i, state_name(g.hyper.kind, k)), *slots[k]);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state, const std::string& source) {
  auto bad = [&](const std::string& what) {
    throw Error(fmt::format("{}: load from {}: {}; nothing was loaded", name_, source, what));
  };
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) {
    if (!t.defined()) bad(fmt::format("\"{}\" is undefined", n));
    if (!given.emplace(n, &t).second) bad(fmt::format("\"{}\" appears twice", n));
  }
  auto scalar = [&](const std::string& n, bool required) -> std::optional<double> {
    auto it = given.find(n);
    if (it == given.end()) {
      if (required) bad(fmt::format("\"{}\" is missing", n));
      return std::nullopt;
    }
    if (it->second->numel() != 1) bad(fmt::format("\"{}\" has shape {}, expected []", n, it->second->shape().str()));
    return it->second->item<double>();
  };
  std::set<std::string> used = {"kind", "steps"};
  OptimStep::Kind kind = groups_.front().hyper.kind;
  if (int64_t(*scalar("kind", true)) != int64_t(kind))
    bad(fmt::format("it holds the state of another kind of optimizer (kind {}, this is {} = {})",
                    int64_t(*scalar("kind", true)), name_, int64_t(kind)));
  if (given.count(fmt::format("{}.lr", groups_.size())))
    bad(fmt::format("it has more than the optimizer's {} parameter groups", groups_.size()));

  // Everything is read into new values first; the optimizer changes only at the end.
  std::vector<Group> new_groups = groups_;
  std::vector<std::vector<ParamState>> new_state(groups_.size());
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = new_groups[gi];
    for (const HyperField& f : kHyper) {
      std::string n = fmt::format("{}.{}", gi, f.name);
      g.hyper.*f.value = *scalar(n, true);
      used.insert(n);
    }
    for (const FlagField& f : kFlags) {
      std::string n = fmt::format("{}.{}", gi, f.name);
      g.hyper.*f.value = *scalar(n, true) != 0;
      used.insert(n);
    }
    if (kind == OptimStep::adagrad)
      for (const HyperField& f : kAdagradHyper) {
        std::string n = fmt::format("{}.{}", gi, f.name);
        g.hyper.*f.value = *scalar(n, true);
        used.insert(n);
      }
    std::string il = fmt::format("{}.initial_lr", gi);
    g.initial_lr = scalar(il, false);
    used.insert(il);
    new_state[gi].resize(g.params.size());
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      ParamState& st = new_state[gi][i];
      std::string sn = fmt::format("{}.{}.step", gi, i);
      if (auto s = scalar(sn, false)) {
        st.step = int64_t(*s);
        used.insert(sn);
      }
      Tensor* slots[3] = {&st.s1, &st.s2, &st.s3};
      for (int k = 0; k < 3; ++k) {
        const char* bn = state_name(kind, k);
        if (!bn) continue;
        std::string n = fmt::format("{}.{}.{}", gi, i, bn);
        auto it = given.find(n);
        if (it == given.end()) continue;
        used.insert(n);
        const Tensor& t = *it->second;
        if (!(t.shape() == p.shape()))
          bad(fmt::format("\"{}\" has shape {}, but parameter {} of group {} has shape {}", n, t.shape().str(), i, gi,
                          p.shape().str()));
        if (!t.is_floating_point()) bad(fmt::format("\"{}\" is {}, expected floating point", n, dtype_name(t.dtype())));
        *slots[k] = t;  // converted below, once everything is validated
      }
      if (st.step == 0 && (st.s1.defined() || st.s2.defined() || st.s3.defined()))
        bad(fmt::format("\"{}\" is missing for the state of parameter {} of group {}", sn, i, gi));
    }
  }
  for (const auto& [n, t] : given)
    if (!used.count(n)) bad(fmt::format("unexpected \"{}\" (parameter counts or optimizer kinds differ)", n));
  int64_t steps = int64_t(*scalar("steps", true));

  NoGradGuard guard;
  for (size_t gi = 0; gi < new_groups.size(); ++gi)
    for (size_t i = 0; i < new_groups[gi].params.size(); ++i) {
      const Tensor& p = new_groups[gi].params[i];
      for (Tensor* s : {&new_state[gi][i].s1, &new_state[gi][i].s2, &new_state[gi][i].s3})
        if (s->defined()) *s = s->detach().to(p.dtype()).to(p.device()).clone();
    }
  groups_ = std::move(new_groups);
  state_ = std::move(new_state);
  steps_ = steps;
}

void Optimizer::save(const std::string& path) const {
  safetensors::save(path, state_dict(), {{"optimizer", name_}});
}

void Optimizer::load(const std::string& path) {
  safetensors::File f = safetensors::load(path);
  auto it = f.metadata.find("optimizer");
  if (it != f.metadata.end() && it->second != name_)
    throw Error(fmt::format("{}: load from {}: the file holds the state of a {} optimizer; nothing was loaded", name_,
                            path, it->second));
  load_state_dict(f.tensors, path);
}

// ---- gradient clipping
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type, Site site) {
  SiteScope scope(site);
  if (!(norm_type > 0)) fail("clip_grad_norm", fmt::format("norm_type must be positive, got {}", norm_type), site);
  NoGradGuard guard;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return scalar_tensor(0.0);
  DType dt = grads.front().dtype();
  Device dev = grads.front().device();
  Tensor total;
  for (const Tensor& g : grads) {
    if (!(g.device() == dev))
      fail("clip_grad_norm", fmt::format("gradients live on {} and {}", dev.str(), g.device().str()), site);
    Tensor part = std::isinf(norm_type) ? amax(abs(g))
                  : norm_type == 2.0    ? sum(square(g))
                                        : sum(pow(abs(g), norm_type));
    part = part.to(dt);
    total = !total.defined() ? part : std::isinf(norm_type) ? maximum(total, part) : total + part;
  }
  if (!std::isinf(norm_type)) total = norm_type == 2.0 ? sqrt(total) : pow(total, 1.0 / norm_type);
  Tensor coef = clamp(max_norm / (total + 1e-6), -INFINITY, 1.0);
  for (Tensor& g : grads) g.copy_(g * coef.to(g.dtype()));
  return total;
}

void clip_grad_value(const std::vector<Tensor>& params, double clip_value, Site site) {
  SiteScope scope(site);
  if (!(clip_value >= 0))
    fail("clip_grad_value", fmt::format("clip_value must be >= 0, got {}", clip_value), site);
  NoGradGuard guard;
  for (const Tensor& p : params)
    if (p.defined())
      if (Tensor g = p.grad(); g.defined()) g.copy_(clamp(g, -clip_value, clip_value));
}

}  // namespace reel::optim
