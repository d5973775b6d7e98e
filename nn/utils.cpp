// nn::utils (utils.h): libtorch's clip_grad_norm_, on optim::clip_grad_norm.
#include "utils.h"

#include <fmt/format.h>

#include "../autograd/grad_mode.h"
#include "../autograd/ops.h"

namespace reel::nn::utils {

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite, Site site) {
  if (error_if_nonfinite) {  // the norm first, so that nothing is scaled when it is refused
    NoGradGuard off_tape;
    std::vector<Tensor> norms;
    for (const Tensor& p : parameters)
      if (p.defined() && p.grad().defined()) norms.push_back(reel::norm(p.grad().to(DType::f64), norm_type));
    double total = norms.empty() ? 0.0 : reel::norm(stack(norms), norm_type).item<double>();
    if (!std::isfinite(total))
      throw Error(fmt::format("clip_grad_norm_: the total norm of order {} of the gradients is {}; set "
                              "error_if_nonfinite = false to clip anyway (at {})",
                              norm_type, total, site.str()));
  }
  return optim::clip_grad_norm(parameters, max_norm, norm_type, site).item<double>();
}

}  // namespace reel::nn::utils
