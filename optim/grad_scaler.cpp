// GradScaler: PyTorch 1.13's torch.cuda.amp.GradScaler control flow (stages per optimizer,
// found_inf per device, the skip, the update) over two backend calls per device,
// Backend::amp_unscale and Backend::amp_update_scale.
#include "grad_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "../autograd/grad_mode.h"
#include "../autograd/ops.h"
#include "../tensor/backend.h"

namespace reel::optim {

namespace {
constexpr const char* kName = "GradScaler";

void check_options(const GradScalerOptions& o) {
  auto bad = [](const std::string& what) { throw Error(fmt::format("{}: {}", kName, what)); };
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale))
    bad(fmt::format("init_scale is {}, expected a positive finite number", o.init_scale));
  if (!(o.growth_factor > 1)) bad(fmt::format("growth_factor is {}, expected > 1", o.growth_factor));
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    bad(fmt::format("backoff_factor is {}, expected in (0, 1)", o.backoff_factor));
  if (o.growth_interval < 1) bad(fmt::format("growth_interval is {}, expected >= 1", o.growth_interval));
}
}  // namespace

GradScaler::GradScaler(Options opt) : opt_(opt) {
  if (opt_.enabled) check_options(opt_);
}

void GradScaler::need_scale(const char* op, const Site& site) const {
  if (!scale_.defined())
    fail(op, "there is no scale yet: call scale(loss) and backward() on it earlier in the iteration", site);
}

Tensor GradScaler::scale(const Tensor& loss, Site site) {
  SiteScope scope(site);
  if (!opt_.enabled) return loss;
  if (!loss.defined()) fail("GradScaler::scale", "the loss is undefined", site);
  if (!loss.is_floating_point())
    fail("GradScaler::scale",
         fmt::format("expected a floating-point loss, got {} {}", dtype_name(loss.dtype()), loss.shape().str()), site);
  if (!scale_.defined()) {
    NoGradGuard guard;
    scale_ = full({}, opt_.init_scale, {.dtype = DType::f32, .device = loss.device()});
    tracker_ = full({}, double(init_tracker_), {.dtype = DType::i32, .device = loss.device()});
  }
  Tensor s = scale_.device() == loss.device() ? scale_ : scale_.to(loss.device());
  // loss * S: f64 stays f64 (S is a power of two by default: exact), f16/bf16 -> f32
  if (loss.dtype() == DType::f64) return mul(loss, s.to(DType::f64));
  if (loss.dtype() != DType::f32) return mul(loss.to(DType::f32), s);
  return mul(loss, s);
}

void GradScaler::unscale(Optimizer& opt, Site site) {
  SiteScope scope(site);
  if (!opt_.enabled) return;
  need_scale("GradScaler::unscale", site);
  PerOptimizer& st = per_optimizer_[&opt];
  if (st.stage == Stage::unscaled)
    fail("GradScaler::unscale",
         fmt::format("unscale() has already been called on this optimizer ({}) since the last update(); expected "
                     "once per iteration",
                     opt.name()),
         site);
  if (st.stage == Stage::stepped)
    fail("GradScaler::unscale",
         fmt::format("unscale() is being called after step() on this optimizer ({}); expected unscale, step, "
                     "update in each iteration",
                     opt.name()),
         site);
  NoGradGuard guard;
  // Every gradient by device, checked before any is changed.
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  auto& groups = opt.param_groups();
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (size_t i = 0; i < groups[gi].params.size(); ++i) {
      Tensor& p = groups[gi].params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (g.dtype() == DType::f16)
        fail("GradScaler::unscale",
             fmt::format("parameter {} of group {} has an f16 gradient; expected f32, f64 or bf16 (attempting to "
                         "unscale f16 gradients, which PyTorch refuses too: keep the parameters in f32 and run "
                         "the model in f16)",
                         i, gi),
             site);
      if (!g.is_floating_point())
        fail("GradScaler::unscale",
             fmt::format("parameter {} of group {} has a {} gradient, expected floating point", i, gi,
                         dtype_name(g.dtype())),
             site);
      if (!g.is_contiguous()) {  // the backend works in place on dense memory
        g = g.contiguous();
        p.set_grad(g);
      }
      Device dev = g.device();
      auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == dev; });
      if (it != by_device.end()) it->second.push_back(g);
      else by_device.emplace_back(dev, std::vector<Tensor>{g});
    }
  // 1 / S in f64, rounded to f32 (PyTorch's scale.double().reciprocal().float())
  Tensor inv = reciprocal(scale_.to(DType::f64)).to(DType::f32);
  st.found_inf.clear();
  for (auto& [dev, grads] : by_device) {
    Tensor found = zeros({}, {.dtype = DType::f32, .device = dev});
    Tensor inv_here = inv.device() == dev ? inv : inv.to(dev);
    backend_for(dev).amp_unscale(grads, found, inv_here);
    for (Tensor& g : grads) g.storage()->bump_version();
    st.found_inf.push_back(found);
  }
  st.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& opt, Site site) {
  SiteScope scope(site);
  if (!opt_.enabled) {
    opt.step(site);
    return true;
  }
  need_scale("GradScaler::step", site);
  if (per_optimizer_[&opt].stage == Stage::stepped)
    fail("GradScaler::step",
         fmt::format("step() has already been called on this optimizer ({}) since the last update(); expected one "
                     "step per iteration",
                     opt.name()),
         site);
  if (per_optimizer_[&opt].stage == Stage::ready) unscale(opt, site);
  PerOptimizer& st = per_optimizer_[&opt];
  if (st.found_inf.empty())
    fail("GradScaler::step",
         fmt::format("no inf checks were recorded for this optimizer ({}): none of its parameters has a gradient",
                     opt.name()),
         site);
  double found = 0;
  for (const Tensor& f : st.found_inf) found += f.item<float>();  // the one read back per device
  bool stepped = found == 0;
  if (stepped) opt.step(site);
  st.stage = Stage::stepped;
  return stepped;
}

void GradScaler::update(Site site) {
  SiteScope scope(site);
  if (!opt_.enabled) return;
  need_scale("GradScaler::update", site);
  NoGradGuard guard;
  Tensor combined;
  for (const auto& [o, st] : per_optimizer_)
    for (const Tensor& f : st.found_inf) {
      Tensor here = f.device() == scale_.device() ? f : f.to(scale_.device());
      combined = combined.defined() ? combined + here : here;
    }
  if (!combined.defined())
    fail("GradScaler::update", "no inf checks were recorded before update(): call step(optimizer) first", site);
  backend_for(scale_.device())
      .amp_update_scale(scale_, tracker_, combined, opt_.growth_factor, opt_.backoff_factor, opt_.growth_interval);
  scale_.storage()->bump_version();
  tracker_.storage()->bump_version();
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale, Site site) {
  SiteScope scope(site);
  if (!opt_.enabled) return;
  need_scale("GradScaler::update", site);
  if (!(new_scale > 0) || !std::isfinite(new_scale))
    fail("GradScaler::update", fmt::format("new_scale is {}, expected a positive finite number", new_scale), site);
  NoGradGuard guard;
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!opt_.enabled) return 1.0;
  return scale_.defined() ? double(scale_.item<float>()) : opt_.init_scale;
}

int64_t GradScaler::growth_tracker() const {
  if (!opt_.enabled) return 0;
  return tracker_.defined() ? int64_t(tracker_.item<int32_t>()) : init_tracker_;
}

// ---- state
NamedTensors GradScaler::state_dict() const {
  NamedTensors out;
  if (!opt_.enabled) return out;
  auto f64 = [](double v) { return scalar_tensor(v, {.dtype = DType::f64}); };
  auto i64 = [](int64_t v) { return scalar_tensor(double(v), {.dtype = DType::i64}); };
  out.emplace_back("scale", f64(get_scale()));
  out.emplace_back("growth_factor", f64(opt_.growth_factor));
  out.emplace_back("backoff_factor", f64(opt_.backoff_factor));
  out.emplace_back("growth_interval", i64(opt_.growth_interval));
  out.emplace_back("growth_tracker", i64(growth_tracker()));
  return out;
}

GradScaler::Loaded GradScaler::parse_state_dict(const NamedTensors& state, const std::string& source) const {
  auto bad = [&](const std::string& what) {
    throw Error(fmt::format("{}: load from {}: {}; nothing was loaded", kName, source, what));
  };
  if (state.empty())
    bad("the state is empty, possibly because it was saved from a disabled GradScaler (expected scale, "
        "growth_factor, backoff_factor, growth_interval and growth_tracker)");
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) {
    if (!t.defined()) bad(fmt::format("\"{}\" is undefined", n));
    if (!given.emplace(n, &t).second) bad(fmt::format("\"{}\" appears twice", n));
  }
  auto value = [&](const char* n, bool integral) {
    auto it = given.find(n);
    if (it == given.end()) bad(fmt::format("\"{}\" is missing", n));
    const Tensor& t = *it->second;
    if (t.numel() != 1) bad(fmt::format("\"{}\" has shape {}, expected []", n, t.shape().str()));
    if (t.dtype() == DType::boolean) bad(fmt::format("\"{}\" is bool, expected a number", n));
    double v = t.item<double>();
    if (integral && (t.is_floating_point() || v != std::floor(v)))
      bad(fmt::format("\"{}\" is {} {}, expected an integer", n, dtype_name(t.dtype()), v));
    return v;
  };
  Loaded s{value("scale", false), value("growth_factor", false), value("backoff_factor", false),
           int64_t(value("growth_interval", true)), int64_t(value("growth_tracker", true))};
  for (const auto& [n, t] : given)
    if (n != "scale" && n != "growth_factor" && n != "backoff_factor" && n != "growth_interval" &&
        n != "growth_tracker")
      bad(fmt::format("unexpected \"{}\" (a GradScaler's state holds scale, growth_factor, backoff_factor, "
                      "growth_interval and growth_tracker)",
                      n));
  if (!(s.scale > 0) || !std::isfinite(s.scale)) bad(fmt::format("scale is {}, expected a positive finite number", s.scale));
  if (!(s.growth_factor > 1)) bad(fmt::format("growth_factor is {}, expected > 1", s.growth_factor));
  if (!(s.backoff_factor > 0 && s.backoff_factor < 1))
    bad(fmt::format("backoff_factor is {}, expected in (0, 1)", s.backoff_factor));
  if (s.growth_interval < 1) bad(fmt::format("growth_interval is {}, expected >= 1", s.growth_interval));
  if (s.growth_tracker < 0 || s.growth_tracker >= s.growth_interval)
    bad(fmt::format("growth_tracker is {}, expected in [0, growth_interval = {})", s.growth_tracker,
                    s.growth_interval));
  return s;
}

void GradScaler::check_state_dict(const NamedTensors& state, const std::string& source) const {
  if (opt_.enabled) parse_state_dict(state, source);
}

void GradScaler::load_state_dict(const NamedTensors& state, const std::string& source) {
  if (!opt_.enabled) return;  // as PyTorch: a disabled scaler has no state to restore
  Loaded s = parse_state_dict(state, source);
  opt_.init_scale = s.scale;
  opt_.growth_factor = s.growth_factor;
  opt_.backoff_factor = s.backoff_factor;
  opt_.growth_interval = s.growth_interval;
  init_tracker_ = s.growth_tracker;
  NoGradGuard guard;
  if (scale_.defined()) scale_.fill_(s.scale);
  if (tracker_.defined()) tracker_.fill_(double(s.growth_tracker));
}

}  // namespace reel::optim
