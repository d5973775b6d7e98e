// AveragedModel: PyTorch 1.13's update_parameters, with its default SWA avg_fn or the
// EMA one (decay avg + (1 - decay) w).
#include "averaged_model.h"

#include <fmt/format.h>

#include "../autograd/grad_mode.h"
#include "../autograd/ops.h"

namespace reel::optim {

AveragedModel::AveragedModel(const NamedTensors& weights, AveragedModelOptions opt) : options(opt) {
  if (opt.ema_decay && !(*opt.ema_decay >= 0 && *opt.ema_decay <= 1))
    throw Error(fmt::format("AveragedModel: ema_decay must be in [0, 1], got {}", *opt.ema_decay));
  NoGradGuard no_grad;
  for (const auto& [name, w] : weights) {
    if (!w.defined()) throw Error(fmt::format("AveragedModel: \"{}\" is undefined", name));
    if (!w.is_floating_point()) continue;  // integer buffers (counters) are not averaged
    avg_.emplace_back(name, zeros_like(w.detach()));
  }
}

void AveragedModel::update(const NamedTensors& weights) {
  if (weights.size() < avg_.size())
    throw Error(fmt::format("AveragedModel: update: got {} tensors, expected the {} averaged ones", weights.size(),
                            avg_.size()));
  // matched by name, all checked before any average changes
  std::vector<Tensor> src(avg_.size());
  size_t k = 0;
  for (const auto& [name, w] : weights) {
    if (k < avg_.size() && name == avg_[k].first) {
      if (!w.defined() || !(w.shape() == avg_[k].second.shape()))
        throw Error(fmt::format("AveragedModel: update: \"{}\" is {}, the average is {}", name,
                                w.defined() ? w.shape().str() : "undefined", avg_[k].second.shape().str()));
      src[k++] = w;
    }
  }
  if (k != avg_.size())
    throw Error(fmt::format("AveragedModel: update: \"{}\" is missing or out of order", avg_[k].first));
  NoGradGuard no_grad;
  for (size_t i = 0; i < avg_.size(); ++i) {
    Tensor& a = avg_[i].second;
    Tensor w = src[i].detach().to(a.device()).to(a.dtype());
    if (n_ == 0) a.copy_(w);
    else if (options.ema_decay) a.copy_(add(mul(a, *options.ema_decay), mul(w, 1 - *options.ema_decay)));
    else a.copy_(add(a, div(sub(w, a), double(n_ + 1))));
  }
  ++n_;
}

}  // namespace reel::optim
