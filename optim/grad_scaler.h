// GradScaler: loss scaling for mixed-precision training, PyTorch's torch.cuda.amp.GradScaler
// (1.13) on every device. The loss is multiplied by a scale S before backward, so that small
// gradients of f16/bf16 activations do not flush to zero; step() divides the gradients by S
// again and skips the optimizer's step when any of them overflowed (inf or NaN); update()
// halves S after an overflow and doubles it after growth_interval clean steps in a row.
//
//   optim::GradScaler scaler({.init_scale = 65536.0, .growth_interval = 2000});
//   for (auto [x, y] : loader) {
//     opt.zero_grad();
//     scaler.scale(cross_entropy(model(x), y)).backward();  // gradients are S times too large
//     scaler.unscale(opt);                                  // optional: true gradients, to clip
//     optim::clip_grad_norm(model.parameters(), 1.0);
//     scaler.step(opt);                                     // unscales unless done; may skip
//     scaler.update();                                      // S for the next iteration
//   }
//
// S lives as a [] f32 tensor on the device of the first loss scaled (made at that first
// scale()), the growth tracker as a [] i32 beside it. unscale() is one fused pass per device
// (Backend::amp_unscale) and update() one more backend call (Backend::amp_update_scale):
// neither waits for the GPU. step() reads the found-inf flag of each device once (it has to
// decide whether to step, as PyTorch's does); get_scale() and growth_tracker() read too.
// Each iteration: scale, backward, [unscale], step for every optimizer, then update.
// Disabled ({.enabled = false}): scale() returns the loss itself, step() steps, the rest do nothing.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "optimizer.h"

namespace reel::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;   // 2^16; positive and finite
  double growth_factor = 2.0;    // > 1
  double backoff_factor = 0.5;   // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before S grows; >= 1
  bool enabled = true;
};

class GradScaler {
 public:
  using Options = GradScalerOptions;
  // Throws Error for options out of range (when enabled, as PyTorch checks them).
  explicit GradScaler(Options opt = {});
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  // loss * S, recorded on the tape, so backward() gives S times the gradients. The result
  // has the loss's shape; its dtype is f32 for f16/bf16 losses (PyTorch's promotion against
  // the f32 scale: S = 65536 overflows f16), the loss's own otherwise. The first call makes
  // S on the loss's device. Disabled: the loss itself.
  Tensor scale(const Tensor& loss, Site site = {});
  // Divides the gradients of opt's parameters by S in place (parameters without one are
  // skipped) and records, per device, whether any was inf or NaN. At most once per
  // optimizer per iteration (Error on a second call, or after step(), until update()).
  // f16 gradients are refused, as PyTorch does ("keep f32 master weights").
  void unscale(Optimizer& opt, Site site = {});
  // unscale(opt) unless already done this iteration, then opt.step() unless a gradient
  // was inf or NaN. Returns whether opt stepped. Once per optimizer per iteration.
  // Disabled: opt.step(), and true.
  bool step(Optimizer& opt, Site site = {});
  // After every optimizer's step: S *= backoff_factor and tracker = 0 when any step of
  // the iteration found inf/NaN; else tracker += 1, and on reaching growth_interval
  // S *= growth_factor (unless that overflows f32) and tracker = 0.
  void update(Site site = {});
  // Sets S to new_scale (positive, finite) instead; the tracker is left as it is.
  void update(double new_scale, Site site = {});

  // S (1.0 when disabled; init_scale before the first scale()). Reads it back from the GPU.
  double get_scale() const;
  // Clean steps since the last growth or backoff (0 when disabled). Reads it back too.
  int64_t growth_tracker() const;
  bool is_enabled() const { return opt_.enabled; }
  const Options& options() const { return opt_; }
  // S as a tensor ([] f32), undefined before the first scale() and when disabled.
  const Tensor& scale_tensor() const { return scale_; }

  // ---- state: "scale" and "growth_factor", "backoff_factor" (f64 []), "growth_interval"
  // and "growth_tracker" (i64 []), PyTorch's state_dict (there "_growth_tracker"). Empty
  // when disabled, as in PyTorch.
  NamedTensors state_dict() const;
  // Checks everything (every entry present, one element each, values in range, nothing
  // else) before changing anything; throws Error naming `source` and the mismatch. A
  // disabled scaler ignores the state; an enabled one refuses an empty state.
  void load_state_dict(const NamedTensors& state, const std::string& source = "state dict");
  // The checks of load_state_dict alone (checkpoint::load runs them before it restores anything).
  void check_state_dict(const NamedTensors& state, const std::string& source = "state dict") const;

 private:
  enum class Stage : uint8_t { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    std::vector<Tensor> found_inf;  // [] f32 per device of the optimizer's gradients
  };
  struct Loaded {
    double scale, growth_factor, backoff_factor;
    int64_t growth_interval, growth_tracker;
  };
  Loaded parse_state_dict(const NamedTensors& state, const std::string& source) const;
  void need_scale(const char* op, const Site& site) const;

  Options opt_;
  int64_t init_tracker_ = 0;  // the tracker S starts with (load_state_dict before the first scale())
  Tensor scale_;    // [] f32
  Tensor tracker_;  // [] i32, on scale_'s device
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;  // this iteration's
};

}  // namespace reel::optim
