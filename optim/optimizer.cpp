// Optimizer base: parameter groups and their hyper-parameters, per-parameter state, the
// loop of a step written in tensor ops (for_each_parameter), state save/load, gradient
// clipping. The built-in optimizers' fused steps are in optim/optimizers.cpp.
#include "optimizer.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "../autograd/grad_mode.h"
#include "../autograd/ops.h"
#include "../formats/safetensors.h"

namespace reel::optim {

namespace {
// The common hyper-parameters a checkpoint records, by name.
struct HyperField {
  const char* name;
  double Hyper::*value;
};
constexpr HyperField kHyper[] = {
    {"lr", &Hyper::lr},     {"momentum", &Hyper::momentum}, {"dampening", &Hyper::dampening},
    {"weight_decay", &Hyper::weight_decay}, {"beta1", &Hyper::beta1}, {"beta2", &Hyper::beta2},
    {"eps", &Hyper::eps},   {"alpha", &Hyper::alpha}};
struct FlagField {
  const char* name;
  bool Hyper::*value;
};
constexpr FlagField kFlags[] = {{"nesterov", &Hyper::nesterov}, {"maximize", &Hyper::maximize},
                                {"centered", &Hyper::centered}};

bool is_common(const std::string& n) {
  for (const HyperField& f : kHyper)
    if (n == f.name) return true;
  for (const FlagField& f : kFlags)
    if (n == f.name) return true;
  return n == "initial_lr";
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> g(1);
  g[0].params = std::move(params);
  return g;
}
}  // namespace

double Hyper::get(const std::string& name) const {
  auto it = extra.find(name);
  if (it == extra.end()) throw Error(fmt::format("optimizer: the parameter group has no hyper-parameter \"{}\"", name));
  return it->second;
}

Tensor* ParamState::find(std::string_view name) {
  for (auto& [n, t] : buffers)
    if (n == name) return &t;
  return nullptr;
}

const Tensor* ParamState::find(std::string_view name) const {
  for (const auto& [n, t] : buffers)
    if (n == name) return &t;
  return nullptr;
}

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, const Hyper& defaults)
    : Optimizer(std::move(name), one_group(std::move(params)), defaults) {}

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, const Hyper& defaults)
    : name_(std::move(name)) {
  for (const auto& [n, v] : defaults.extra)
    if (is_common(n) || n.empty() || n.find('.') != std::string::npos || n == "step")
      throw Error(fmt::format("{}: the hyper-parameter name \"{}\" is taken or not a name (no dots)", name_, n));
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

const ParamState& Optimizer::state(size_t group, size_t index) const {
  if (group >= state_.size() || index >= state_[group].size())
    throw Error(fmt::format("{}: state({}, {}): the optimizer has {} parameter groups{}", name_, group, index,
                            state_.size(),
                            group < state_.size() ? fmt::format(", group {} has {} parameters", group,
                                                                state_[group].size())
                                                  : ""));
  return state_[group][index];
}
ParamState& Optimizer::state(size_t group, size_t index) {
  return const_cast<ParamState&>(std::as_const(*this).state(group, index));
}

std::optional<Dims> Optimizer::state_shape(const std::string&, const Tensor& param) const { return param.shape(); }

void Optimizer::check_gradients(Site site) const {
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
}

void Optimizer::for_each_parameter(Site site, const Update& update) {
  SiteScope scope(site);
  NoGradGuard guard;
  check_gradients(site);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& grp = groups_[gi];
    for (size_t i = 0; i < grp.params.size(); ++i) {
      Tensor& p = grp.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      ParamState& st = state_[gi][i];
      for (auto& [n, t] : st.buffers)
        if (!(t.device() == p.device())) t = t.to(p.device());  // the module moved
      ++st.step;
      update(p, g, st, grp.hyper);
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
  out.emplace_back("steps", scalar_tensor(double(steps_), {.dtype = DType::i64}));
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    for (const HyperField& f : kHyper) out.emplace_back(fmt::format("{}.{}", gi, f.name), scalar(g.hyper.*f.value));
    for (const FlagField& f : kFlags) out.emplace_back(fmt::format("{}.{}", gi, f.name), scalar(g.hyper.*f.value));
    for (const auto& [n, v] : g.hyper.extra) out.emplace_back(fmt::format("{}.{}", gi, n), scalar(v));
    if (g.initial_lr) out.emplace_back(fmt::format("{}.initial_lr", gi), scalar(*g.initial_lr));
    for (size_t i = 0; i < g.params.size(); ++i) {
      const ParamState& st = state_[gi][i];
      if (st.step == 0) continue;
      out.emplace_back(fmt::format("{}.{}.step", gi, i), scalar_tensor(double(st.step), {.dtype = DType::i64}));
      for (const auto& [n, t] : st.buffers)
        if (t.defined()) out.emplace_back(fmt::format("{}.{}.{}", gi, i, n), t);
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
  std::set<std::string> used = {"steps"};
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
    for (auto& [name, v] : g.hyper.extra) {
      std::string n = fmt::format("{}.{}", gi, name);
      v = *scalar(n, true);
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
      // this parameter's tensors: "<gi>.<i>.<name>", in the order given
      std::string prefix = fmt::format("{}.{}.", gi, i);
      for (const auto& [n, t] : state) {
        if (n.compare(0, prefix.size(), prefix) != 0 || n == sn) continue;
        std::string bn = n.substr(prefix.size());
        if (bn.empty() || bn.find('.') != std::string::npos) continue;  // reported as unexpected below
        used.insert(n);
        std::optional<Dims> want = state_shape(bn, p);
        if (want && !(t.shape() == *want))
          bad(fmt::format("\"{}\" has shape {}, but parameter {} of group {} has shape {}", n, t.shape().str(), i, gi,
                          p.shape().str()));
        if (!t.is_floating_point()) bad(fmt::format("\"{}\" is {}, expected floating point", n, dtype_name(t.dtype())));
        st.buffers.emplace_back(bn, t);  // converted below, once everything is validated
      }
      if (st.step == 0 && !st.buffers.empty())
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
      for (auto& [n, t] : new_state[gi][i].buffers) t = t.detach().to(p.dtype()).to(p.device()).clone();
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
  // in place, as PyTorch's g.mul_(clip_coef): one pass a gradient, not a product and a copy
  for (Tensor& g : grads) g.mul_(coef.to(g.dtype()));
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
