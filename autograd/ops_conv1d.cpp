// 1-d convolution and pooling: the 2-d ops on [N, C, 1, L] (a unit height), so they run
// on the same oneDNN/cuDNN kernels and their gradients are the 2-d rules. The unsqueeze
// and squeeze around them are views. Each checks its arguments first, so its errors name
// it and the shapes the user gave, not the 4-d ones the 2-d op sees.
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {
void check_1d(const OpScope& op, const Tensor& x) {
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  check_dim(op, x, 3, "the input [N, C, L]");
}

// As conv2d's checks (autograd/ops_conv.cpp), in the 1-d shapes; returns the padding,
// with "same"'s extra element at the end (an odd total dil (K - 1)) in `extra`.
int64_t check_conv1d(const OpScope& op, const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dOptions& o,
                     int64_t& extra) {
  check_1d(op, x);
  check_defined(op, w, "the weight");
  check_same_device(op, x, w);
  check_dim(op, w, 3, "the weight [O, C/groups, K]");
  if (x.dtype() != w.dtype())
    fail(op.op, fmt::format("expected the input and the weight of one dtype, got {} and {}", describe(x), describe(w)),
         op.site);
  if (o.stride < 1 || o.dilation < 1 || (o.padding.mode.empty() && o.padding.size < 0))
    fail(op.op, fmt::format("expected stride >= 1, dilation >= 1 and padding >= 0, got stride {}, dilation {}, "
                            "padding {}", o.stride, o.dilation, o.padding.size), op.site);
  const int64_t C = x.size(1), O = w.size(0), g = o.groups, K = w.size(2);
  if (g < 1 || C % g != 0 || O % g != 0)
    fail(op.op, fmt::format("groups = {} must divide the input's {} channels and the weight's {} output channels "
                            "(input {}, weight {})", g, C, O, x.shape().str(), w.shape().str()), op.site);
  if (w.size(1) * g != C)
    fail(op.op, fmt::format("the input {} has {} channels but the weight {} with groups = {} expects {}",
                            x.shape().str(), C, w.shape().str(), g, w.size(1) * g), op.site);
  if (C == 0 || O == 0 || K == 0)
    fail(op.op, fmt::format("expected at least one input channel, output channel and kernel element, got input {} "
                            "and weight {}", x.shape().str(), w.shape().str()), op.site);
  if (b.defined()) {
    check_same_device(op, x, b);
    if (b.dtype() != x.dtype() || b.dim() != 1 || b.size(0) != O)
      fail(op.op, fmt::format("expected a bias [{}] {} for the weight {}, got {}", O, dtype_name(x.dtype()),
                              w.shape().str(), describe(b)), op.site);
  }
  int64_t padding = o.padding.size;
  extra = 0;
  if (!o.padding.mode.empty()) {
    const std::string& mode = o.padding.mode;
    if (mode == "valid") {
      padding = 0;
    } else if (mode == "same") {
      if (o.stride != 1)
        fail(op.op, fmt::format("padding \"same\" needs stride 1 (PyTorch's rule), got stride {}", o.stride), op.site);
      const int64_t total = o.dilation * (K - 1);
      padding = total / 2;
      extra = total % 2;
    } else {
      fail(op.op, fmt::format("expected padding \"same\", \"valid\" or an amount, got \"{}\"", mode), op.site);
    }
  }
  const int64_t extent = o.dilation * (K - 1) + 1, padded = x.size(2) + 2 * padding + extra;
  if (extent > padded)
    fail(op.op, fmt::format("the kernel {} (dilation {}) is longer than the padded input {} (input {}, padding {})", K,
                            o.dilation, padded, x.shape().str(), padding), op.site);
  return padding;
}

// As max/avg pooling's checks (autograd/ops_pool.cpp), in the 1-d shapes
void check_pool1d(const OpScope& op, const Tensor& x, const Pool1dOptions& o) {
  check_1d(op, x);
  const int64_t stride = o.stride == 0 ? o.kernel : o.stride;
  if (o.kernel < 1 || stride < 1 || o.padding < 0 || 2 * o.padding > o.kernel || o.dilation < 1)
    fail(op.op, fmt::format("expected kernel >= 1, stride >= 1, dilation >= 1 and 0 <= padding <= kernel / 2, got "
                            "kernel {}, stride {}, dilation {}, padding {}", o.kernel, stride, o.dilation, o.padding),
         op.site);
  const int64_t extent = o.dilation * (o.kernel - 1) + 1, padded = x.size(2) + 2 * o.padding;
  if (extent > padded)
    fail(op.op, fmt::format("the kernel {} (dilation {}) is longer than the padded input {} (input {}, padding {})",
                            o.kernel, o.dilation, padded, x.shape().str(), o.padding), op.site);
}

Pool2dOptions as_2d(const Pool1dOptions& o) {
  return {.kernel = {1, o.kernel}, .stride = {1, o.stride == 0 ? o.kernel : o.stride}, .padding = {0, o.padding},
          .count_include_pad = o.count_include_pad, .ceil_mode = o.ceil_mode, .dilation = {1, o.dilation}};
}
}  // namespace

// y [N, O, OL] = conv2d(x [N, C, 1, L], w [O, C/g, 1, K]), OL = (L + 2 pad - dil (K - 1) - 1) / stride + 1;
// "same" with an odd dil (K - 1) pads x by one more at the end first, as PyTorch
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv1dOptions opt, Site site) {
  OpScope op("conv1d", site);
  int64_t extra = 0;
  const int64_t padding = check_conv1d(op, x, weight, bias, opt, extra);
  const Tensor xs = extra ? pad(x, {0, extra}) : x;
  Tensor y = conv2d(xs.unsqueeze(2), weight.unsqueeze(2), bias,
                    {.stride = {1, opt.stride}, .padding = {0, padding}, .dilation = {1, opt.dilation},
                     .groups = opt.groups});
  return y.squeeze(2);
}

Tensor max_pool1d(const Tensor& x, Pool1dOptions opt, Site site) {
  OpScope op("max_pool1d", site);
  check_pool1d(op, x, opt);
  return max_pool2d(x.unsqueeze(2), as_2d(opt)).squeeze(2);
}

Tensor avg_pool1d(const Tensor& x, Pool1dOptions opt, Site site) {
  OpScope op("avg_pool1d", site);
  check_pool1d(op, x, opt);
  if (opt.dilation != 1)
    fail(op.op, fmt::format("dilation is max pooling's (PyTorch's avg_pool1d has none); got {}", opt.dilation),
         op.site);
  return avg_pool2d(x.unsqueeze(2), as_2d(opt)).squeeze(2);
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t out_l, Site site) {
  OpScope op("adaptive_avg_pool1d", site);
  check_1d(op, x);
  if (out_l < 1) fail(op.op, fmt::format("expected an output size of at least 1, got {}", out_l), op.site);
  if (x.size(2) < 1) fail(op.op, fmt::format("expected an input of at least 1 element, got {}", x.shape().str()), op.site);
  return adaptive_avg_pool2d(x.unsqueeze(2), 1, out_l).squeeze(2);
}

}  // namespace reel
