// Averages of a model's weights over training, as torch.optim.swa_utils.AveragedModel:
// an equal-weight running average (SWA, the default) or an exponential moving
// average (ema_decay). It holds its own copies of the tensors it averages, by name;
// load them into a model of the same structure to evaluate the average.
//
//   optim::AveragedModel ema(model.named_parameters(), {.ema_decay = 0.999});
//   for (...) { ...; opt.step(); ema.update(model.named_parameters()); }
//   eval_model.load_state_dict(ema.averaged(), /*strict=*/false);
#pragma once
#include <optional>

#include "optimizer.h"

namespace reel::optim {

// The first update copies the weights; update n + 1 then sets
// SWA: avg += (w - avg) / (n + 1);  EMA: avg = decay avg + (1 - decay) w.
struct AveragedModelOptions {
  std::optional<double> ema_decay = std::nullopt;  // in [0, 1]
};
class AveragedModel {
 public:
  // `weights`: what update() will be given (usually model.named_parameters(), or
  // state_dict() to average the floating-point buffers too): fixes names and shapes.
  explicit AveragedModel(const NamedTensors& weights, AveragedModelOptions opt = {});
  // Folds in the current weights (same names, shapes; any device: the averages stay
  // where they were made). Under no-grad.
  void update(const NamedTensors& weights);
  // The averages, by name (undefined values never: zeros before the first update).
  const NamedTensors& averaged() const { return avg_; }
  int64_t n_averaged() const { return n_; }
  AveragedModelOptions options;

 private:
  NamedTensors avg_;
  int64_t n_ = 0;
};

}  // namespace reel::optim
