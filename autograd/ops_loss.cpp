// Losses: cross_entropy (one fused kernel each way), nll_loss, mse_loss,
// binary_cross_entropy_with_logits; smooth_l1_loss, kl_div and binary_cross_entropy (below,
// with their rules written out). Each gives per-element losses and then
// reduces them (none / mean / sum) with the ordinary differentiable ops.
//
// Conventions, as PyTorch's, except where said:
// - label_smoothing eps: loss = (1 - eps) nll + eps mean_c(-log p_c);
// - rows whose label is ignore_index give 0 loss and 0 gradient and do not count in
//   the mean's denominator (all rows ignored: the mean is 0/0 = nan, as PyTorch);
// - class weights w: loss_n = w[y_n] nll_n (+ the smoothing term, each class weighted),
//   the mean divides by the sum of w[y_n] over rows not ignored (PyTorch's weighted mean);
// - [N, C, d1, ...] scores with [N, d1, ...] labels are [N d1 ..., C] rows, moved there;
// - an empty batch gives nan for the mean (0/0), 0 for the sum, [0] for none, as PyTorch;
// - mse_loss and binary_cross_entropy_with_logits need input and target of one shape
//   and dtype (no silent broadcast).
#include <cmath>
#include <limits>

#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// Loss weights are constants: as PyTorch, one that asks for a gradient is an Error
// rather than silently getting none.
void check_no_grad_factor(const OpScope& op, const Tensor& f, const char* what) {
  if (grad_enabled() && f.requires_grad())
    fail(op.op, fmt::format("{} gets no gradient, but requires grad: pass it detached", what), op.site);
}

// Checks the [N, C] scores and i64 [N] labels of a classification loss. Returns the
// number of rows not ignored when the labels are on the CPU (read on the host), else -1.
int64_t check_classes(const OpScope& op, const Tensor& scores, const Tensor& labels, const CrossEntropyOptions& opt,
                      const char* what) {
  check_defined(op, scores, what);
  check_defined(op, labels, "the labels");
  check_same_device(op, scores, labels);
  check_floating(op, scores, what);
  if (scores.dim() != 2)
    fail(op.op, fmt::format("expected {} of shape [N, C] or [N, C, d1, ...], got {}", what, scores.shape().str()),
         op.site);
  check_dtype(op, labels, DType::i64, "the labels");
  const int64_t N = scores.shape()[0], C = scores.shape()[1];
  if (labels.dim() != 1 || labels.shape()[0] != N)
    fail(op.op, fmt::format("expected labels of shape [{}] for {} {}, got labels {}", N, what, scores.shape().str(),
                            labels.shape().str()), op.site);
  if (C == 0) fail(op.op, fmt::format("expected at least one class, got {} {}", what, scores.shape().str()), op.site);
  if (!(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0))
    fail(op.op, fmt::format("label_smoothing must be in [0, 1], got {}", opt.label_smoothing), op.site);
  if (opt.weight.defined()) {
    check_same_device(op, scores, opt.weight);
    check_floating(op, opt.weight, "the class weight");
    check_no_grad_factor(op, opt.weight, "the class weight");
    if (opt.weight.dim() != 1 || opt.weight.shape()[0] != C)
      fail(op.op, fmt::format("expected a class weight of shape [{}] for {} {}, got weight {}", C, what,
                              scores.shape().str(), opt.weight.shape().str()), op.site);
  }
  if (!labels.device().is_cpu()) return -1;
  Tensor host = labels.contiguous();
  const int64_t* y = host.data<int64_t>();
  int64_t kept = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (y[n] == opt.ignore_index) continue;
    if (y[n] < 0 || y[n] >= C)
      fail(op.op, fmt::format("label {} (row {}) is out of range for {} classes: expected 0 to {} or ignore_index {}",
                              y[n], n, C, C - 1, opt.ignore_index), op.site);
    ++kept;
  }
  return kept;
}

// Reduces per-row losses [N]; the mean divides by the rows not ignored.
Tensor reduce_rows(const Tensor& losses, const Tensor& labels, const CrossEntropyOptions& opt, int64_t kept) {
  switch (opt.reduction) {
    case Reduction::none: return losses;
    case Reduction::sum: return sum(losses);
    case Reduction::mean: break;
  }
  if (kept == losses.numel()) return mean(losses);
  if (kept >= 0) return mul(sum(losses), kept ? 1.0 / double(kept) : std::nan(""));
  return div(sum(losses), sum(ne(labels, double(opt.ignore_index))).to(losses.dtype()));  // counted on the device
}


// The rows whose label is not ignore_index (valid), and the labels with ignored rows
// pointing at class 0 (safe), so a lookup by label stays in range; callers zero those rows.
struct UsableLabels {
  Tensor valid, safe;
};
UsableLabels usable_labels(const Tensor& labels, int64_t ignore_index) {
  Tensor valid = ne(labels, double(ignore_index));
  return {valid, where(valid, labels, zeros_like(labels))};
}

// [N, C, d1, ...] scores and [N, d1, ...] labels as [N d1 ..., C] rows and [N d1 ...]
// labels (the class dim moved last, copied), for the row-wise losses; the unreduced
// result comes back in the labels' shape.
template <typename RowLoss>
Tensor over_positions(const OpScope& op, const Tensor& scores, const Tensor& labels, CrossEntropyOptions opt,
                      const char* what, RowLoss row_loss) {
  check_defined(op, scores, what);
  check_defined(op, labels, "the labels");
  Dims expect{scores.shape()[0]};
  Dims order{0};
  for (int d = 2; d < scores.dim(); ++d) {
    expect.push_back(scores.shape()[d]);
    order.push_back(d);
  }
  order.push_back(1);
  if (!(labels.shape() == expect))
    fail(op.op, fmt::format("expected labels of shape {} for {} {}, got labels {}", expect.str(), what,
                            scores.shape().str(), labels.shape().str()), op.site);
  const int64_t C = scores.shape()[1];
  Tensor rows = scores.permute(order).reshape({-1, C});
  Tensor losses = row_loss(rows, labels.reshape({-1}), opt);
  return opt.reduction == Reduction::none ? losses.reshape(expect) : losses;
}

// The class-weighted loss from log-probabilities [N, C], composed of differentiable ops:
// loss_n = w[y_n] (-(1-eps) lp[n, y_n]) - (eps/C) sum_c w[c] lp[n, c], 0 on ignored rows;
// the mean divides by sum_n w[y_n] over the rows not ignored, for both terms (PyTorch 1.13).
Tensor weighted_class_loss(const Tensor& lp, const Tensor& labels, const CrossEntropyOptions& opt) {
  const int64_t C = lp.shape()[1];
  const double eps = opt.label_smoothing;
  Tensor w = cast(opt.weight, lp.dtype());
  auto [valid, safe] = usable_labels(labels, opt.ignore_index);
  Tensor wn = mul(index_select(w, 0, safe), valid.to(lp.dtype()));
  Tensor losses = mul(mul(gather(lp, 1, safe.unsqueeze(1)).squeeze(1), wn), eps - 1.0);
  if (eps != 0.0) {
    Tensor smooth = mul(sum(mul(lp, w.unsqueeze(0)), {1}), valid.to(lp.dtype()));
    losses = sub(losses, mul(smooth, eps / double(C)));
  }
  switch (opt.reduction) {
    case Reduction::none: return losses;
    case Reduction::sum: return sum(losses);
    case Reduction::mean: break;
  }
  return div(sum(losses), sum(wn));
}

// cross_entropy's rule in recorded ops, for a create_graph backward (the fused
// kernel's result would have no grad_fn, cutting second derivatives through x and g)
Tensor cross_entropy_composite_grad(const Tensor& g, const Tensor& x, const Tensor& labels, double eps,
                                    int64_t ignore_index) {
  const int64_t C = x.shape()[1];
  auto [valid, safe] = usable_labels(labels, ignore_index);
  Tensor target = add(mul(one_hot(safe, C).to(x.dtype()), 1.0 - eps), eps / double(C));
  return mul(sub(softmax(x, 1), target), mul(g, valid.to(g.dtype())).unsqueeze(1));
}

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

// loss_n = lse_n - (1-eps) x[n, y_n] - (eps/C) sum_c x[n, c];
// dx[n, c] = g_n (softmax(x_n)_c - (1-eps) [c == y_n] - eps/C), 0 on ignored rows
Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels, CrossEntropyOptions opt, Site site) {
  OpScope op("cross_entropy", site);
  const Tensor logits = autocast_f32(logits_in);
  if (logits.defined() && logits.dim() > 2)
    return over_positions(op, logits, labels, opt, "logits", [&](const Tensor& x, const Tensor& y, auto o) {
      return cross_entropy(x, y, o, site);
    });
  int64_t kept = check_classes(op, logits, labels, opt, "logits");
  // class weights: a separate composed path, so the common one stays one fused kernel
  if (opt.weight.defined()) return weighted_class_loss(log_softmax(logits, 1), labels, opt);
  const int64_t N = logits.shape()[0];
  Tensor losses = new_tensor({N}, logits.dtype(), logits.device());
  Tensor lse = new_tensor({N}, logits.dtype(), logits.device());
  if (N > 0)
    backend_of(logits).cross_entropy_forward(losses, lse, logits, labels, opt.label_smoothing, opt.ignore_index);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0), lse = n.saved_tensor(1), y = n.saved_tensor(2);
        const CrossEntropyArgs& a = n.args<CrossEntropyArgs>();
        if (grad_enabled()) {  // create_graph: the rule itself must be differentiable
          gi[0] = cross_entropy_composite_grad(g[0], x, y, a.label_smoothing, a.ignore_index);
          return;
        }
        Tensor gx = new_tensor(x.shape(), x.dtype(), x.device());
        if (gx.numel()) backend_of(x).cross_entropy_backward(gx, g[0], x, lse, y, a.label_smoothing, a.ignore_index);
        gi[0] = gx;
      }, {&logits}, {&losses});
  if (n) {
    n->save(logits);
    n->save(lse);
    n->save(labels);
  }
  keep_args(op, n, CrossEntropyArgs{.label_smoothing = opt.label_smoothing, .ignore_index = opt.ignore_index});
  return reduce_rows(losses, labels, opt, kept);
}

// loss_n = -(1-eps) lp[n, y_n] - (eps/C) sum_c lp[n, c], composed of gather, sum and where
// (their gradients compose to dlp = -g_n ((1-eps) [c == y_n] + eps/C))
Tensor nll_loss(const Tensor& log_probs_in, const Tensor& labels, CrossEntropyOptions opt, Site site) {
  OpScope op("nll_loss", site);
  const Tensor log_probs = autocast_f32(log_probs_in);
  if (log_probs.defined() && log_probs.dim() > 2)
    return over_positions(op, log_probs, labels, opt, "log_probs", [&](const Tensor& x, const Tensor& y, auto o) {
      return nll_loss(x, y, o, site);
    });
  int64_t kept = check_classes(op, log_probs, labels, opt, "log_probs");
  if (opt.weight.defined()) return weighted_class_loss(log_probs, labels, opt);
  const int64_t C = log_probs.shape()[1];
  auto [valid, safe] = usable_labels(labels, opt.ignore_index);
  Tensor losses = mul(gather(log_probs, 1, safe.unsqueeze(1)).squeeze(1), opt.label_smoothing - 1.0);
  if (opt.label_smoothing != 0.0) losses = sub(losses, mul(sum(log_probs, {1}), opt.label_smoothing / double(C)));
  if (kept != log_probs.shape()[0]) losses = where(valid, losses, zeros_like(losses));
  return reduce_rows(losses, labels, opt, kept);
}

// loss = (input - target)^2; composed of sub and square
Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, Site site) {
  OpScope op("mse_loss", site);
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_loss_pair(op, input, target);
  return reduce_losses(square(sub(input, target)), reduction);
}

// loss = w ((1 - t) x + l softplus(-x)), l = 1 + (pw - 1) t (weight w and pos_weight pw
// default to 1), with softplus(-x) = max(-x, 0) + log(1 + e^-|x|), which never exponentiates
// a positive number. dx = g w ((pw t + 1 - t) sigmoid(x) - pw t), dt = g w ((pw - 1) softplus(-x) - x);
// w and pw get no gradient (as in PyTorch).
Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in, BCEWithLogitsOptions opt,
                                        Site site) {
  OpScope op("binary_cross_entropy_with_logits", site);
  const Tensor logits = autocast_f32(logits_in), target = autocast_f32(target_in);
  check_loss_pair(op, logits, target);
  auto check_factor = [&](const Tensor& f, const char* what) {
    if (!f.defined()) return Tensor();
    check_same_device(op, logits, f);
    check_floating(op, f, what);
    check_no_grad_factor(op, f, what);
    if (!(broadcast_shapes(op.op, f.shape(), logits.shape(), op.site) == logits.shape()))
      fail(op.op, fmt::format("expected {} broadcastable to the input {}, got {}", what, logits.shape().str(),
                              f.shape().str()), op.site);
    return cast(f, logits.dtype());
  };
  Tensor w = check_factor(opt.weight, "the weight"), pw = check_factor(opt.pos_weight, "the pos_weight");
  Tensor losses;
  {
    NoGradGuard forward_only;  // the rule below is the whole gradient
    Tensor e = exp(neg(abs(logits)));
    Tensor log1p_e = new_like(e);
    if (e.numel()) backend_of(e).unary(UnaryOp::log1p, log1p_e, e);
    if (!pw.defined()) {
      losses = add(sub(relu(logits), mul(logits, target)), log1p_e);  // the same, with (1 - t) x + softplus(-x) folded
    } else {
      Tensor softplus_neg = add(relu(neg(logits)), log1p_e);
      Tensor l = add(mul(sub(pw, 1.0), target), 1.0);
      losses = add(mul(1.0 - target, logits), mul(l, softplus_neg));
    }
    if (w.defined()) losses = mul(losses, w);
  }
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0), t = n.saved_tensor(1), w = n.saved_tensor(2), pw = n.saved_tensor(3);
        Tensor gw = w.defined() ? mul(g[0], w) : g[0];
        if (n.needs_grad(0)) {
          if (!pw.defined()) {
            gi[0] = mul(gw, sub(sigmoid(x), t));
          } else {
            Tensor pt = mul(pw, t);
            gi[0] = mul(gw, sub(mul(add(sub(pt, t), 1.0), sigmoid(x)), pt));
          }
        }
        if (n.needs_grad(1)) {
          if (!pw.defined()) {
            gi[1] = neg(mul(gw, x));
          } else {  // recorded ops (a create_graph backward differentiates them), stable for any x
            Tensor softplus_neg = add(relu(neg(x)), log(add(exp(neg(abs(x))), 1.0)));
            gi[1] = mul(gw, sub(mul(sub(pw, 1.0), softplus_neg), x));
          }
        }
      }, {&logits, &target}, {&losses})) {
    n->save(logits);
    n->save(target);
    n->save(w);
    n->save(pw);
  }
  return reduce_losses(losses, opt.reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction,
                                        Site site) {
  return binary_cross_entropy_with_logits(logits, target, BCEWithLogitsOptions{.reduction = reduction}, site);
}

// ---- the losses whose rules are written out (nn::functional names them, nn/losses.h):
// PyTorch's gradient is not the composite's: binary_cross_entropy (the clamped logs'
// composite gradient is 0/0 at x = 0 or 1, where PyTorch's is finite), kl_div (NaN for the
// target at t = 0) and smooth_l1_loss at beta = 0 (-g at x = t).
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

// ---- shared by the losses here and in nn/losses.cpp (declared in op_support.h)
Tensor reduce_losses(const Tensor& losses, Reduction r) {
  switch (r) {
    case Reduction::none: return losses;
    case Reduction::sum: return sum(losses);
    case Reduction::mean: break;
  }
  return mean(losses);
}

void check_loss_pair(const OpScope& op, const Tensor& input, const Tensor& target) {
  check_defined(op, input, "the input");
  check_defined(op, target, "the target");
  check_same_device(op, input, target);
  check_floating(op, input, "the input");
  if (!(input.shape() == target.shape()))
    fail(op.op, fmt::format("expected input and target of one shape, got input {} and target {}",
                            input.shape().str(), target.shape().str()), op.site);
  if (input.dtype() != target.dtype())
    fail(op.op, fmt::format("expected input and target of one dtype, got input {} and target {}", describe(input),
                            describe(target)), op.site);
}

}  // namespace reel
