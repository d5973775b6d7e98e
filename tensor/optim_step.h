// What the built-in optimizers' fused step (OptimStep, Backend::optim_step in backend.h)
// needs besides the hyper-parameters, stated once for optim/optimizers.cpp, the CPU's step
// (cpu/optim.cpp) and the GPU's (cuda/optim.cu): which state vectors a step uses, and the
// bias corrections at step t.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend.h"

namespace reel {

// Whether state vector 0, 1 or 2 of Backend::optim_step is used with these hyper-parameters.
inline bool optim_uses_state(const OptimStep& s, int slot) {
  switch (s.kind) {
    case OptimStep::sgd: return slot == 0 && s.momentum != 0;
    case OptimStep::adam:
    case OptimStep::adamw:
    case OptimStep::adamax: return slot < 2;
    case OptimStep::rmsprop: return slot == 0 || (slot == 1 && s.centered) || (slot == 2 && s.momentum > 0);
    case OptimStep::adagrad: return slot == 0;
  }
  return false;
}

// `s` at step t (from 1): the bias corrections 1 - beta^t (Adagrad's 1 + (t - 1) lr_decay)
// folded in. The one expression of them: an eager step and a CUDA graph's replay round alike.
inline OptimStep optim_at_step(const OptimStep& s, int64_t t) {
  OptimStep r = s;
  r.bias_correction1 = 1 - std::pow(s.beta1, double(t));
  r.bias_correction2 = 1 - std::pow(s.beta2, double(t));
  if (s.kind == OptimStep::adagrad) r.bias_correction1 = 1 + double(t - 1) * s.lr_decay;
  return r;
}

}  // namespace reel
