// 1-d convolution and pooling: the 2-d ops on [N, C, 1, L] (a unit height), so they run
// on the same oneDNN/cuDNN kernels and their gradients are the 2-d rules. The unsqueeze
// and squeeze around them are views.
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {
void check_1d(const OpScope& op, const Tensor& x) {
  check_defined(op, x, "the input");
  check_dim(op, x, 3, "the input [N, C, L]");
}
}  // namespace

// y [N, O, OL] = conv2d(x [N, C, 1, L], w [O, C/g, 1, K]), OL = (L + 2 pad - dil (K - 1) - 1) / stride + 1
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv1dOptions opt, Site site) {
  OpScope op("conv1d", site);
  check_1d(op, x);
  check_defined(op, weight, "the weight");
  check_dim(op, weight, 3, "the weight [O, C/groups, K]");
  Tensor y = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias,
                    {.stride = {1, opt.stride}, .padding = {0, opt.padding}, .dilation = {1, opt.dilation},
                     .groups = opt.groups});
  return y.squeeze(2);
}

Tensor max_pool1d(const Tensor& x, Pool1dOptions opt, Site site) {
  OpScope op("max_pool1d", site);
  check_1d(op, x);
  return max_pool2d(x.unsqueeze(2), {.kernel = {1, opt.kernel}, .stride = {1, opt.stride == 0 ? opt.kernel : opt.stride},
                                     .padding = {0, opt.padding}}).squeeze(2);
}

Tensor avg_pool1d(const Tensor& x, Pool1dOptions opt, Site site) {
  OpScope op("avg_pool1d", site);
  check_1d(op, x);
  return avg_pool2d(x.unsqueeze(2), {.kernel = {1, opt.kernel}, .stride = {1, opt.stride == 0 ? opt.kernel : opt.stride},
                                     .padding = {0, opt.padding}, .count_include_pad = opt.count_include_pad})
      .squeeze(2);
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t out_l, Site site) {
  OpScope op("adaptive_avg_pool1d", site);
  check_1d(op, x);
  return adaptive_avg_pool2d(x.unsqueeze(2), 1, out_l).squeeze(2);
}

}  // namespace reel
