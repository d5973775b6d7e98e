// nn::functional's fused layer ops: conv2d_relu and linear_relu under PyTorch users'
// names, each in its own op scope so that an error names the op the user called.
#include "functional.h"

#include "../autograd/op_support.h"

namespace reel::nn::functional {

Tensor conv2d_bias_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, reel::Conv2dOptions opt, Site site) {
  OpScope op("conv2d_bias_relu", site);
  return conv2d_relu(x, weight, bias, std::move(opt));
}

Tensor linear_bias_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Site site) {
  OpScope op("linear_bias_relu", site);
  return linear_relu(x, weight, bias);
}

}  // namespace reel::nn::functional
