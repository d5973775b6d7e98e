// Normalisation: batch_norm over [N, C, *] (per-channel statistics) and layer_norm
// over trailing dims. Both save the mean and invstd = 1 / sqrt(var + eps) they used.
#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// An optional per-feature tensor (weight, bias, running statistic) of `shape`.
void check_param(const OpScope& op, const Tensor& x, const Tensor& p, const Dims& shape, const char* what) {
  if (!p.defined()) return;
  check_same_device(op, x, p);
  if (p.dtype() != x.dtype() || !(p.shape() == shape))
    fail(op.op, fmt::format("expected {} of shape {} and dtype {} for the input {}, got {}", what, shape.str(),
                            dtype_name(x.dtype()), x.shape().str(), describe(p)), op.site);
}

// ---- the rules as recorded ops, for a create_graph backward: batch statistics are
// recomputed from x with recorded ops so that second derivatives pass through them.
// `red` are the dims the statistics reduce over, `param_red` those the weight's
// gradient reduces over; `shape` broadcasts a statistic or the weight to x.
struct NormGrads {
  Tensor gx, gw, gb;
};
NormGrads composite_grads(const Node& n, const Tensor& g, const Dims& red, const Dims& param_red, const Dims& shape,
                          bool batch_stats) {
  Tensor x = n.saved_tensor(0), w = n.saved_tensor(1), mu, invstd;
  if (batch_stats) {
    mu = mean(x, red, true);
    invstd = rsqrt(add(mean(square(sub(x, mu)), red, true), n.scalars[0]));
  } else {  // the running statistics: constants
    mu = n.saved_tensor(2).reshape(shape);
    invstd = n.saved_tensor(3).reshape(shape);
  }
  Tensor xhat = mul(sub(x, mu), invstd);
  Tensor h = w.defined() ? mul(g, w.reshape(shape)) : g;
  NormGrads r;
  if (n.needs_grad(0))
    r.gx = batch_stats ? mul(invstd, sub(sub(h, mean(h, red, true)), mul(xhat, mean(mul(h, xhat), red, true))))
                       : mul(invstd, h);
  auto to_param = [&](const Tensor& t) { return param_red.size() ? sum(t, param_red) : t; };  // {}: sum all
  if (n.needs_grad(1)) r.gw = to_param(mul(g, xhat));
  if (n.needs_grad(2)) r.gb = to_param(g);
  return r;
}

}  // namespace

// training: y = (x - mean) invstd w + b with batch statistics, running stats updated
// (momentum, unbiased variance); eval: the running statistics instead.
// training: dx = w invstd (g - mean(g) - xhat mean(g xhat)); eval: dx = w invstd g;
// dw = sum g xhat, db = sum g (per channel, over N and *)
Tensor batch_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps, Site site) {
  OpScope op("batch_norm", site);
  // the running statistics are updated in place: never copies of them
  const Tensor x = autocast_f32(x_in), weight = autocast_f32(weight_in), bias = autocast_f32(bias_in);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  if (x.dim() < 2) fail(op.op, fmt::format("expected an input [N, C, *] of at least 2 dims, got {}", describe(x)), op.site);
  Dims channels{x.size(1)};
  check_param(op, x, weight, channels, "a weight");
  check_param(op, x, bias, channels, "a bias");
  check_param(op, x, running_mean, channels, "a running_mean");
  check_param(op, x, running_var, channels, "a running_var");
  if (running_mean.defined() != running_var.defined())
    fail(op.op, "expected both running_mean and running_var or neither", op.site);
  if (!training && !running_mean.defined())
    fail(op.op, fmt::format("evaluation mode (training = false) needs running_mean and running_var (input {})",
                            x.shape().str()), op.site);
  if (eps <= 0) fail(op.op, fmt::format("expected eps > 0, got {}", eps), op.site);
  int64_t count = x.numel() / std::max<int64_t>(x.size(1), 1);
  if (training && count < 2 && x.numel() > 0)
    fail(op.op, fmt::format("expected more than 1 value per channel when training, got input {}", x.shape().str()),
         op.site);
  Tensor y = new_like(x);
  Tensor mean = new_tensor(channels, x.dtype(), x.device()), invstd = new_tensor(channels, x.dtype(), x.device());
  if (x.numel()) {
    backend_of(x).batch_norm_forward(y, mean, invstd, x, weight, bias, running_mean, running_var, training, momentum,
                                     eps);
    if (training && running_mean.defined()) {
      running_mean.storage()->bump_version();
      running_var.storage()->bump_version();
    }
  }
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0);
        if (grad_enabled() && x.numel()) {  // create_graph
          Dims red{0}, shape = Dims::filled(x.dim(), 1);
          for (int k = 2; k < x.dim(); ++k) red.push_back(k);
          shape[1] = x.size(1);
          NormGrads r = composite_grads(n, g[0], red, red, shape, n.ints[0] != 0);
          gi = {r.gx, r.gw, r.gb};
          return;
        }
        Tensor gx = new_like(x);
        Tensor gw = n.needs_grad(1) ? new_tensor(n.input_shape(1), x.dtype(), x.device()) : Tensor();
        Tensor gb = n.needs_grad(2) ? new_tensor(n.input_shape(2), x.dtype(), x.device()) : Tensor();
        if (x.numel()) {
          backend_of(x).batch_norm_backward(gx, gw, gb, g[0], x, n.saved_tensor(1), n.saved_tensor(2),
                                            n.saved_tensor(3), n.ints[0] != 0);
        } else {
          if (gw.defined()) backend_of(x).fill(gw, 0);
          if (gb.defined()) backend_of(x).fill(gb, 0);
        }
        gi[0] = n.needs_grad(0) ? gx : Tensor();
        gi[1] = gw;
        gi[2] = gb;
      }, {&x, &weight, &bias}, {&y})) {
    n->save(x);
    n->save(weight);
    n->save(mean);
    n->save(invstd);
    n->ints[0] = training;
    n->scalars[0] = eps;
  }
  return y;
}

// y = (x - mean) invstd w + b over the trailing dims; with h = g w:
// dx = invstd (h - mean(h) - xhat mean(h xhat)), dw = sum_rows g xhat, db = sum_rows g
Tensor layer_norm(const Tensor& x_in, const Dims& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps, Site site) {
  OpScope op("layer_norm", site);
  const Tensor x = autocast_f32(x_in), weight = autocast_f32(weight_in), bias = autocast_f32(bias_in);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  int k = normalized_shape.size(), lead = x.dim() - k;
  bool fits = k > 0 && lead >= 0;
  for (int i = 0; fits && i < k; ++i) fits = x.shape()[lead + i] == normalized_shape[i];
  if (!fits)
    fail(op.op, fmt::format("expected an input whose trailing dims are normalized_shape {}, got {}",
                            normalized_shape.str(), x.shape().str()), op.site);
  if (numel_of(normalized_shape) == 0)
    fail(op.op, fmt::format("expected a non-empty normalized_shape, got {}", normalized_shape.str()), op.site);
  check_param(op, x, weight, normalized_shape, "a weight");
  check_param(op, x, bias, normalized_shape, "a bias");
  if (eps <= 0) fail(op.op, fmt::format("expected eps > 0, got {}", eps), op.site);
  Dims rows_shape{x.numel() / numel_of(normalized_shape)};
  Tensor y = new_like(x);
  Tensor mean = new_tensor(rows_shape, x.dtype(), x.device()), invstd = new_tensor(rows_shape, x.dtype(), x.device());
  if (x.numel()) backend_of(x).layer_norm_forward(y, mean, invstd, x, weight, bias, eps);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0);
        if (grad_enabled() && x.numel()) {  // create_graph
          Dims red, rows;
          for (int k = 0; k < x.dim(); ++k) (k < n.ints[0] ? rows : red).push_back(k);
          NormGrads r = composite_grads(n, g[0], red, rows, n.input_shape(1), true);
          gi = {r.gx, r.gw, r.gb};
          return;
        }
        Tensor gx = new_like(x);
        Tensor gw = n.needs_grad(1) ? new_tensor(n.input_shape(1), x.dtype(), x.device()) : Tensor();
        Tensor gb = n.needs_grad(2) ? new_tensor(n.input_shape(2), x.dtype(), x.device()) : Tensor();
        if (x.numel()) {
          backend_of(x).layer_norm_backward(gx, gw, gb, g[0], x, n.saved_tensor(1), n.saved_tensor(2),
                                            n.saved_tensor(3));
        } else {
          if (gw.defined()) backend_of(x).fill(gw, 0);
          if (gb.defined()) backend_of(x).fill(gb, 0);
        }
        gi[0] = n.needs_grad(0) ? gx : Tensor();
        gi[1] = gw;
        gi[2] = gb;
      }, {&x, &weight, &bias}, {&y})) {
    n->save(x);
    n->save(weight);
    n->save(mean);
    n->save(invstd);
    n->ints[0] = lead;
    n->scalars[0] = eps;
  }
  return y;
}

}  // namespace reel
