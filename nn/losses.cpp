// The losses of nn/losses.h, each composed of recorded ops, so its gradient (and a
// create_graph gradient) follows from theirs. The losses whose rules are written out
// because PyTorch's gradient is not the composite's (smooth_l1_loss at beta = 0, kl_div,
// binary_cross_entropy) are autograd ops, in autograd/ops_loss.cpp.
#include "../autograd/autocast.h"
#include "losses.h"

#include <limits>

#include "../autograd/op_support.h"

namespace reel::nn::functional {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, Site site) {
  OpScope op("l1_loss", site);
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_loss_pair(op, input, target);
  return reduce_losses(abs(sub(input, target)), reduction);
}

Tensor huber_loss(const Tensor& input_in, const Tensor& target_in, HuberOptions opt, Site site) {
  OpScope op("huber_loss", site);
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_loss_pair(op, input, target);
  if (!(opt.delta > 0)) fail(op.op, fmt::format("expected delta > 0, got {}", opt.delta), op.site);
  Tensor d = abs(sub(input, target));
  Tensor linear = mul(sub(d, 0.5 * opt.delta), opt.delta);
  return reduce_losses(where(lt(d, opt.delta), mul(square(d), 0.5), linear), opt.reduction);
}

Tensor cosine_embedding_loss(const Tensor& x1_in, const Tensor& x2_in, const Tensor& y_in, CosineEmbeddingOptions opt,
                             Site site) {
  OpScope op("cosine_embedding_loss", site);
  const Tensor x1 = autocast_f32(x1_in), x2 = autocast_f32(x2_in), y = autocast_f32(y_in);
  check_defined(op, x1, "input1");
  check_defined(op, x2, "input2");
  check_defined(op, y, "the target");
  check_same_device(op, x1, x2);
  check_same_device(op, x1, y);
  check_floating(op, x1, "input1");
  if (!(x1.shape() == x2.shape()) || (x1.dim() != 1 && x1.dim() != 2))
    fail(op.op, fmt::format("expected input1 and input2 of one shape, [N, D] or [D], got {} and {}",
                            x1.shape().str(), x2.shape().str()), op.site);
  Dims expected_y = x1.dim() == 2 ? Dims{x1.shape()[0]} : Dims{};
  if (!(y.shape() == Shape(expected_y)))
    fail(op.op, fmt::format("expected a target of shape {} for inputs {}, got {}", Shape(expected_y).str(),
                            x1.shape().str(), y.shape().str()), op.site);
  const int64_t d = x1.dim() - 1;
  constexpr double kEps = 1e-12;  // PyTorch's EPSILON
  Tensor dot = sum(mul(x1, x2), {d});
  Tensor mag1 = add(sum(square(x1), {d}), kEps), mag2 = add(sum(square(x2), {d}), kEps);
  Tensor cos = div(dot, sqrt(mul(mag1, mag2)));
  Tensor zero = zeros_like(cos);
  Tensor yy = y.dtype() == cos.dtype() ? y : y.to(cos.dtype());
  Tensor pos = where(eq(yy, 1.0), 1.0 - cos, zero);
  Tensor neg_part = where(eq(yy, -1.0), clamp(sub(cos, opt.margin), 0.0, kInf), zero);
  return reduce_losses(add(pos, neg_part), opt.reduction);
}

}  // namespace reel::nn::functional
