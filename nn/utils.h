// nn::utils: libtorch's spellings of gradient clipping, for code ported as written:
//   nn::utils::clip_grad_norm_(model.parameters(), 1.0);
// They are optim::clip_grad_norm and optim::clip_grad_value (optim/optimizer.h), which
// reel's own code calls; clip_grad_norm_ returns the norm as a double as libtorch's does
// (a host sync on the GPU, which optim::clip_grad_norm's [] tensor avoids).
#pragma once
#include <cmath>
#include <vector>

#include "../optim/optimizer.h"

namespace reel::nn::utils {

// Scales the gradients so that their joint norm is at most max_norm; returns the norm
// before. error_if_nonfinite: throw Error (changing nothing) when that norm is nan or inf.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, Site site = {});
inline double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                              bool error_if_nonfinite = false, Site site = {}) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite, site);
}
// Clamps every gradient element into [-clip_value, clip_value].
inline void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value, Site site = {}) {
  optim::clip_grad_value(parameters, clip_value, site);
}

}  // namespace reel::nn::utils
