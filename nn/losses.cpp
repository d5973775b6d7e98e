// The losses of nn/losses.h. Each is composed of recorded ops (so its gradient, and
// a create_graph gradient, follow from theirs), except where PyTorch's gradient is not
// the composite's, whose rules are written out: binary_cross_entropy (the clamped logs'
// composite gradient is 0/0 at x = 0 or 1, where PyTorch's is finite), kl_div (NaN for the
// target at t = 0) and smooth_l1_loss at beta = 0 (-g at x = t).
#include "../autograd/autocast.h"
#include "losses.h"

#include <cmath>
#include <limits>

#include "../autograd/op_support.h"

namespace reel::nn::functional {
namespace {

using Grads = std::vector<Tensor>;

constexpr double kInf = std::numeric_limits<double>::infinity();

// max(log(x), -100): PyTorch's clamp of BCE's logs
Tensor clamped_log(const Tensor& x) { return clamp(log(x), -100.0, kInf); }

// smooth_l1_loss at beta = 0, PyTorch's special case: |x - t|, with PyTorch's gradients at
// x = t, where its kernel's first test, d <= -beta, holds: dx = -g, and dt = -g as well (the
// target's rule is the input's with the two swapped). Elsewhere dx = g sign(x - t) = -dt.
Tensor l1_beta0(const OpScope& op, const Tensor& input, const Tensor& target) {
  Tensor losses;
  {
    NoGradGuard forward_only;  // the rule below is the whole gradient
    losses = abs(sub(input, target));
  }
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor d = sub(n.saved_tensor(0), n.saved_tensor(1));
        Tensor minus = neg(g[0]);
        if (n.needs_grad(0)) gi[0] = where(le(d, 0.0), minus, g[0]);
        if (n.needs_grad(1)) gi[1] = where(ge(d, 0.0), minus, g[0]);
      }, {&input, &target}, {&losses})) {
    n->save(input);
    n->save(target);
  }
  return losses;
}

// kl_div's terms xlogy(t, t) - t x, PyTorch 1.13's values and rules: the term is 0 where
// t = 0 and NaN where t < 0; dx = -g t, dt = g (log t + 1 - x), NaN at t = 0 (as PyTorch's).
Tensor kl_div_terms(const OpScope& op, const Tensor& input, const Tensor& target) {
  Tensor losses;
  {
    NoGradGuard forward_only;  // the rule below is the whole gradient
    Tensor xlogy = where(eq(target, 0.0), zeros_like(target), mul(target, log(target)));
    losses = sub(xlogy, mul(target, input));
  }
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0), t = n.saved_tensor(1);
        if (n.needs_grad(0)) gi[0] = neg(mul(g[0], t));
        if (n.needs_grad(1)) {
          Tensor gt = mul(g[0], sub(add(log(t), 1.0), x));
          gi[1] = where(eq(t, 0.0), full_like(gt, std::numeric_limits<double>::quiet_NaN()), gt);
        }
      }, {&input, &target}, {&losses})) {
    n->save(input);
    n->save(target);
  }
  return losses;
}

}  // namespace

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, Site site) {
  OpScope op("l1_loss", site);
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_loss_pair(op, input, target);
  return reduce_losses(abs(sub(input, target)), reduction);
}

Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, SmoothL1Options opt, Site site) {
  OpScope op("smooth_l1_loss", site);
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_loss_pair(op, input, target);
  if (!(opt.beta >= 0)) fail(op.op, fmt::format("expected beta >= 0, got {}", opt.beta), op.site);
  if (opt.beta == 0) return reduce_losses(l1_beta0(op, input, target), opt.reduction);
  Tensor d = abs(sub(input, target));
  Tensor quadratic = mul(square(d), 0.5 / opt.beta);
  return reduce_losses(where(lt(d, opt.beta), quadratic, sub(d, 0.5 * opt.beta)), opt.reduction);
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

Tensor kl_div(const Tensor& input_in, const Tensor& target_in, KLDivOptions opt, Site site) {
  OpScope op("kl_div", site);
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_loss_pair(op, input, target);
  Tensor losses = opt.log_target ? mul(exp(target), sub(target, input)) : kl_div_terms(op, input, target);
  switch (opt.reduction) {
    case KLDivReduction::none: return losses;
    case KLDivReduction::sum: return sum(losses);
    case KLDivReduction::mean: return mean(losses);
    case KLDivReduction::batchmean: break;
  }
  Tensor total = sum(losses);
  return input.dim() == 0 ? total : div(total, double(input.shape()[0]));
}

// loss = -(t log x + (1 - t) log(1 - x)), logs clamped at -100; PyTorch 1.13's rules:
// dx = g (x - t) / max(x (1 - x), EPSILON), EPSILON the float 1e-12 (so 9.9999999600419e-13
// in f64 too), and dt = -g logit(x) = g (log(1 - x) - log x), unclamped (+-inf at 0 and 1).
// An input outside [0, 1] (NaN too) is refused on the CPU, as PyTorch does; on the GPU
// checking would cost a device-to-host copy per call, so there it gives NaN (docs/cuda.md).
Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, BCEOptions opt, Site site) {
  OpScope op("binary_cross_entropy", site);
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_loss_pair(op, input, target);
  if (input.device().is_cpu() && input.numel()) {
    NoGradGuard no_grad;
    Tensor outside = logical_not(logical_and(ge(input, 0.0), le(input, 1.0)));
    if (any(outside).item<bool>()) {
      int64_t at = argmax(outside.to(DType::u8)).item<int64_t>();
      double v = input.reshape({-1}).to(DType::f64).to_vector<double>()[size_t(at)];
      fail(op.op, fmt::format("expected every element of the input between 0 and 1 (probabilities), got {} at flat "
                              "index {} of {}", v, at, describe(input)), op.site);
    }
  }
  if (opt.weight.defined()) {
    check_same_device(op, input, opt.weight);
    if (opt.weight.dim() > input.dim())
      fail(op.op, fmt::format("expected a weight broadcastable to the input {}, got weight {}", input.shape().str(),
                              opt.weight.shape().str()), op.site);
  }
  Tensor losses;
  {
    NoGradGuard forward_only;  // the rule below is the whole gradient
    Tensor one_minus_t = 1.0 - target;
    losses = neg(add(mul(target, clamped_log(input)), mul(one_minus_t, clamped_log(1.0 - input))));
  }
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0), t = n.saved_tensor(1);
        constexpr double kEpsilon = double(1e-12f);  // PyTorch's EPSILON is a float
        if (n.needs_grad(0))
          gi[0] = mul(g[0], div(sub(x, t), clamp(mul(x, 1.0 - x), kEpsilon, kInf)));
        if (n.needs_grad(1)) gi[1] = mul(g[0], sub(log(1.0 - x), log(x)));
      }, {&input, &target}, {&losses})) {
    n->save(input);
    n->save(target);
  }
  if (opt.weight.defined()) losses = mul(losses, opt.weight);
  return reduce_losses(losses, opt.reduction);
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
