// Normalisation: batch_norm over [N, C, *] (per-channel statistics) and layer_norm
// over trailing dims. Both save the mean and invstd = 1 / sqrt(var + eps) they used.
#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// An optional per-feature tensor (weight, bias, running statistic) of `shape` and dtype.
// x: a tensor of the input's device; input: the input's shape (for the message)
void check_param(const OpScope& op, const Tensor& x, DType dtype, const Dims& input, const Tensor& p,
                 const Dims& shape, const char* what) {
  if (!p.defined()) return;
  check_same_device(op, x, p);
  if (p.dtype() != dtype || !(p.shape() == shape))
    fail(op.op, fmt::format("expected {} of shape {} and dtype {} for the input {}, got {}", what, shape.str(),
                            dtype_name(dtype), input.str(), describe(p)), op.site);
}
void check_param(const OpScope& op, const Tensor& x, const Dims& input, const Tensor& p, const Dims& shape,
                 const char* what) {
  check_param(op, x, x.dtype(), input, p, shape, what);
}

// Under autocast a batch norm computes in f32 (docs/amp.md). bf16 (or f16) activations the
// backend takes in the mixed form (Backend::mixed_batch_norm: those it keeps channels-last,
// bf16 on AMX CPUs and both halves on CUDA under REEL_CUDA_CHANNELS_LAST=on, and on CUDA
// with REEL_CUDA_HALF_NORM=cudnn row-major ones too) stay in their dtype in and out, with
// f32 parameters and statistics and f32 arithmetic inside (PyTorch's mixed batch norm):
// the layout and half the bytes survive the norm, where casts would cost a conversion
// each way (and a transpose, channels-last). Other inputs are cast to f32.
struct NormInput {
  std::vector<Tensor> xs;
  bool mixed = false;  // xs bf16/f16, parameters and statistics f32
};
NormInput norm_input(const std::vector<Tensor>& xs, bool allow_mixed = true) {
  NormInput r;
  r.mixed = allow_mixed && !xs.empty();
  for (const Tensor& t : xs)
    r.mixed = r.mixed && t.defined() && is_low_precision(t.dtype()) && autocast_active(t) &&
              backend_of(t).mixed_batch_norm(t.dtype(), is_channels_last(t.shape(), t.strides()));
  for (const Tensor& t : xs) r.xs.push_back(r.mixed ? t : autocast_f32(t));
  return r;
}
// a fresh tensor for the output or a gradient of a norm: of x's dtype, and in x's layout when
// mixed (channels-last or row-major, as x is)
Tensor new_like_layout(const Tensor& x, const Dims& shape, bool mixed) {
  return mixed && is_channels_last(x.shape(), x.strides())
             ? new_tensor(shape, x.dtype(), x.device(), channels_last_strides(shape))
             : new_tensor(shape, x.dtype(), x.device());
}

// The arguments of a batch norm over an input of `shape` (first: a tensor of its device;
// param_dtype: the parameters' and statistics' dtype, the input's unless mixed).
void check_bn_args(const OpScope& op, const Dims& shape, const Tensor& first, DType param_dtype, const Tensor& weight,
                   const Tensor& bias, const Tensor& running_mean, const Tensor& running_var, bool training,
                   double eps) {
  Dims channels{shape[1]};
  check_param(op, first, param_dtype, shape, weight, channels, "a weight");
  check_param(op, first, param_dtype, shape, bias, channels, "a bias");
  check_param(op, first, param_dtype, shape, running_mean, channels, "a running_mean");
  check_param(op, first, param_dtype, shape, running_var, channels, "a running_var");
  if (running_mean.defined() != running_var.defined())
    fail(op.op, "expected both running_mean and running_var or neither", op.site);
  if (!training && !running_mean.defined())
    fail(op.op, fmt::format("evaluation mode (training = false) needs running_mean and running_var (input {})",
                            shape.str()), op.site);
  if (eps <= 0) fail(op.op, fmt::format("expected eps > 0, got {}", eps), op.site);
  int64_t numel = numel_of(shape), count = numel / std::max<int64_t>(shape[1], 1);
  if (training && count < 2 && numel > 0)
    fail(op.op, fmt::format("expected more than 1 value per channel when training, got input {}", shape.str()),
         op.site);
}

// ---- the rules as recorded ops, for a create_graph backward: batch statistics are
// recomputed from x with recorded ops so that second derivatives pass through them.
// `red` are the dims the statistics reduce over, `param_red` those the weight's
// gradient reduces over; `shape` broadcasts a statistic or the weight to x.
struct NormGrads {
  Tensor gx, gw, gb;
};
// What a rule saved: the input, the weight (may be undefined), the statistics it used,
// eps; and which gradients are wanted.
struct NormSaved {
  Tensor x, w, mean, invstd;
  double eps;
  bool want_x, want_w, want_b;
};
NormGrads composite_grads(const NormSaved& a, const Tensor& g_in, const Dims& red, const Dims& param_red,
                          const Dims& shape, bool batch_stats) {
  // a mixed norm (bf16/f16 x, f32 statistics): the rule in f32, dx back in x's dtype
  const DType compute = a.mean.dtype();
  const Tensor x = a.x.dtype() == compute ? a.x : a.x.to(compute);
  const Tensor g = g_in.dtype() == compute ? g_in : g_in.to(compute);
  Tensor mu, invstd;
  if (batch_stats) {
    mu = mean(x, red, true);
    invstd = rsqrt(add(mean(square(sub(x, mu)), red, true), a.eps));
  } else {  // the running statistics: constants
    mu = a.mean.reshape(shape);
    invstd = a.invstd.reshape(shape);
  }
  Tensor xhat = mul(sub(x, mu), invstd);
  Tensor h = a.w.defined() ? mul(g, a.w.reshape(shape)) : g;
  NormGrads r;
  if (a.want_x)
    r.gx = batch_stats ? mul(invstd, sub(sub(h, mean(h, red, true)), mul(xhat, mean(mul(h, xhat), red, true))))
                       : mul(invstd, h);
  auto to_param = [&](const Tensor& t) { return param_red.size() ? sum(t, param_red) : t; };  // {}: sum all
  if (a.want_w) r.gw = to_param(mul(g, xhat));
  if (a.want_b) r.gb = to_param(g);
  if (r.gx.defined() && r.gx.dtype() != a.x.dtype()) r.gx = r.gx.to(a.x.dtype());
  return r;
}
// The saved state of a rule that saved x, w, mean, invstd at 0..3 for inputs x, w, b.
NormSaved saved_xw(const Node& n, double eps) {
  return {n.saved_tensor(0), n.saved_tensor(1), n.saved_tensor(2), n.saved_tensor(3), eps,
          n.needs_grad(0), n.needs_grad(1), n.needs_grad(2)};
}
// Dims a per-channel statistic of x [N, C, *] reduces over, and its broadcast shape
void channel_dims(const Dims& x, Dims& red, Dims& shape) {
  red = Dims{0};
  shape = Dims::filled(x.size(), 1);
  for (int k = 2; k < x.size(); ++k) red.push_back(k);
  shape[1] = x[1];
}

// After a training forward wrote the running statistics in place: their new versions, so
// that a saved copy read later is caught (batch_norm and the fused batch_norm_relu forms)
void mark_running_stats_updated(bool training, const Tensor& running_mean, const Tensor& running_var) {
  if (!training || !running_mean.defined()) return;
  running_mean.storage()->bump_version();
  running_var.storage()->bump_version();
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
  check_defined(op, x_in, "the input");
  const NormInput in = norm_input({x_in});
  const Tensor x = in.xs[0], weight = autocast_f32(weight_in), bias = autocast_f32(bias_in);
  check_floating(op, x, "the input");
  if (x.dim() < 2) fail(op.op, fmt::format("expected an input [N, C, *] of at least 2 dims, got {}", describe(x)), op.site);
  const DType stats = in.mixed ? DType::f32 : x.dtype();
  check_bn_args(op, x.shape(), x, stats, weight, bias, running_mean, running_var, training, eps);
  Dims channels{x.size(1)};
  Tensor y = new_like_layout(x, x.shape(), in.mixed);
  Tensor mean = new_tensor(channels, stats, x.device()), invstd = new_tensor(channels, stats, x.device());
  if (x.numel()) {
    backend_of(x).batch_norm_forward(y, mean, invstd, x, weight, bias, running_mean, running_var, training, momentum,
                                     eps);
    mark_running_stats_updated(training, running_mean, running_var);
  }
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0);
        if (grad_enabled() && x.numel()) {  // create_graph
          Dims red, shape;
          channel_dims(x.shape(), red, shape);
          const BatchNormArgs& a = n.args<BatchNormArgs>();
          NormGrads r = composite_grads(saved_xw(n, a.eps), g[0], red, red, shape, a.training);
          gi = {r.gx, r.gw, r.gb};
          return;
        }
        const DType stats = n.saved_tensor(2).dtype();
        Tensor gx = new_like_layout(x, x.shape(), stats != x.dtype());
        Tensor gw = n.needs_grad(1) ? new_tensor(n.input_shape(1), stats, x.device()) : Tensor();
        Tensor gb = n.needs_grad(2) ? new_tensor(n.input_shape(2), stats, x.device()) : Tensor();
        if (x.numel()) {
          backend_of(x).batch_norm_backward(gx, gw, gb, g[0], x, n.saved_tensor(1), n.saved_tensor(2),
                                            n.saved_tensor(3), n.args<BatchNormArgs>().training);
        } else {
          if (gw.defined()) backend_of(x).fill(gw, 0);
          if (gb.defined()) backend_of(x).fill(gb, 0);
        }
        gi[0] = n.needs_grad(0) ? gx : Tensor();
        gi[1] = gw;
        gi[2] = gb;
      }, {&x, &weight, &bias}, {&y});
  if (n) {
    n->save(x);
    n->save(weight);
    n->save(mean);
    n->save(invstd);
  }
  keep_args(op, n, BatchNormArgs{.training = training, .eps = eps});
  return y;
}

// batch_norm_relu's gradients as recorded ops, for a create_graph backward: batch_norm's
// composite rule on g (y > 0), the mask a constant; y and g plain [N, C, *]
namespace {
void relu_norm_graph_grads(Node& n, const std::vector<Tensor>& xs, const Tensor& y, const Tensor& g, Grads& gi) {
  const size_t k = xs.size();
  Tensor x = k == 1 ? xs[0] : cat(xs, 1);
  Dims red, shape;
  channel_dims(x.shape(), red, shape);
  bool want_x = false;
  for (size_t j = 0; j < k; ++j) want_x = want_x || n.needs_grad(j);
  const BatchNormArgs& args = n.args<BatchNormArgs>();
  NormSaved a{x, n.saved_tensor(k), n.saved_tensor(k + 1), n.saved_tensor(k + 2), args.eps,
              want_x, n.needs_grad(k), n.needs_grad(k + 1)};
  Tensor mask = gt(y.detach(), 0.0).to(y.dtype());
  NormGrads r = composite_grads(a, mul(g, mask), red, red, shape, args.training);
  int64_t c0 = 0;
  for (size_t j = 0; j < k; ++j) {
    if (n.needs_grad(j)) gi[j] = r.gx.narrow(1, c0, xs[j].size(1));
    c0 += xs[j].size(1);
  }
  gi[k] = r.gw;
  gi[k + 1] = r.gb;
}

// batch_norm_relu's inputs checked (as cat(xs, 1) and batch_norm would) and autocast:
// the pieces, weight and bias in the compute dtype, and the shape of their concatenation
struct NormReluInputs {
  std::vector<Tensor> xs;
  Tensor weight, bias;
  Dims shape;
  bool mixed = false;  // bf16/f16 channels-last pieces, f32 parameters and statistics (norm_input)
  DType stats() const { return mixed ? DType::f32 : xs[0].dtype(); }
};
NormReluInputs norm_relu_inputs(const OpScope& op, const std::vector<Tensor>& xs_in, const Tensor& weight,
                                const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                                bool training, double eps, bool allow_mixed) {
  // cast before checking: under autocast a DenseNet's pieces may mix f32 and bf16, and
  // then all of them compute in f32
  NormReluInputs r;
  NormInput in = norm_input(xs_in, allow_mixed);
  r.xs = std::move(in.xs);
  r.mixed = in.mixed;
  check_joinable(op, r.xs, 1);
  r.weight = autocast_f32(weight), r.bias = autocast_f32(bias);
  const Tensor& x0 = r.xs[0];
  check_floating(op, x0, "the input");
  if (x0.dim() < 2)
    fail(op.op, fmt::format("expected inputs [N, C, *] of at least 2 dims, got {}", describe(x0)), op.site);
  r.shape = x0.shape();
  for (size_t j = 1; j < r.xs.size(); ++j) r.shape[1] += r.xs[j].shape()[1];
  check_bn_args(op, r.shape, x0, r.stats(), r.weight, r.bias, running_mean, running_var, training, eps);
  return r;
}

// what batch_norm_relu and its blocked form save: pieces, weight, mean, invstd, output
void save_norm_relu(Node& n, const NormReluInputs& in, const Tensor& mean, const Tensor& invstd, const Tensor& y) {
  for (const Tensor& t : in.xs) n.save(t);
  n.save(in.weight);
  n.save(mean);
  n.save(invstd);
  n.save(y);
}

std::vector<const Tensor*> norm_relu_tape_inputs(const NormReluInputs& in) {
  std::vector<const Tensor*> inputs;
  for (const Tensor& t : in.xs) inputs.push_back(&t);
  inputs.push_back(&in.weight);
  inputs.push_back(&in.bias);
  return inputs;
}
// The backward of batch_norm_relu (blocked: of its blocked form, where the output y and
// g are [N, C/B, H, W, B]): the backend's fused kernel, or recorded ops under create_graph
void norm_relu_grads(Node& n, const Tensor& g, Grads& gi, bool blocked) {
  const BatchNormArgs& args = n.args<BatchNormArgs>();
  const size_t k = size_t(args.pieces);  // inputs 0..k-1, then weight and bias
  std::vector<Tensor> xs;
  for (size_t j = 0; j < k; ++j) xs.push_back(n.saved_tensor(j));
  const Tensor y = n.saved_tensor(k + 3), w = n.saved_tensor(k), mean = n.saved_tensor(k + 1),
               invstd = n.saved_tensor(k + 2);
  const bool training = args.training;
  if (grad_enabled() && y.numel())
    return blocked ? relu_norm_graph_grads(n, xs, from_channel_blocks(y), from_channel_blocks(g), gi)
                   : relu_norm_graph_grads(n, xs, y, g, gi);
  const DType stats = mean.dtype();
  const bool mixed = stats != y.dtype();
  std::vector<Tensor> gxs(k);
  for (size_t j = 0; j < k; ++j)
    if (n.needs_grad(j)) gxs[j] = new_like_layout(xs[j], xs[j].shape(), mixed);
  Tensor gw = n.needs_grad(k) ? new_tensor(n.input_shape(k), stats, y.device()) : Tensor();
  Tensor gb = n.needs_grad(k + 1) ? new_tensor(n.input_shape(k + 1), stats, y.device()) : Tensor();
  Backend& be = backend_of(y);
  if (y.numel() && blocked) {
    be.batch_norm_relu_blocked_backward(gxs, gw, gb, g, xs, y, w, mean, invstd, training);
  } else if (y.numel()) {
    be.batch_norm_relu_backward(gxs, gw, gb, g, xs, y, w, mean, invstd, training);
  } else {  // no elements (then every piece is empty too): zero parameter gradients
    if (gw.defined()) be.fill(gw, 0);
    if (gb.defined()) be.fill(gb, 0);
  }
  for (size_t j = 0; j < k; ++j) gi[j] = gxs[j];
  gi[k] = gw;
  gi[k + 1] = gb;
}
}  // namespace

// y = relu(batch_norm(x)) with x = cat(xs, 1) never made. Saves the pieces and y: with
// g' = g (y > 0), the rule is batch_norm's on g', each piece taking its channels of dx.
Tensor batch_norm_relu(const std::vector<Tensor>& xs_in, const Tensor& weight_in, const Tensor& bias_in,
                       const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                       double eps, Site site) {
  OpScope op("batch_norm_relu", site);
  const NormReluInputs in =
      norm_relu_inputs(op, xs_in, weight_in, bias_in, running_mean, running_var, training, eps, true);
  const Tensor& x0 = in.xs[0];
  Tensor y = new_like_layout(x0, in.shape, in.mixed);
  Tensor mean = new_tensor({in.shape[1]}, in.stats(), x0.device()), invstd = new_like(mean);
  if (y.numel()) {
    backend_of(x0).batch_norm_relu_forward(y, mean, invstd, in.xs, in.weight, in.bias, running_mean, running_var,
                                           training, momentum, eps);
    mark_running_stats_updated(training, running_mean, running_var);
  }
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        norm_relu_grads(n, g[0], gi, false);
      }, norm_relu_tape_inputs(in), {&y});
  if (n) save_norm_relu(*n, in, mean, invstd, y);
  keep_args(op, n, BatchNormArgs{.training = training, .eps = eps, .pieces = int64_t(in.xs.size())});
  return y;
}

// batch_norm_relu with z written channel-blocked [N, C/B, H, W, B] by the backend's
// fused kernel; the backward unblocks gz while applying relu's mask (z > 0)
Tensor batch_norm_relu_blocked(const std::vector<Tensor>& xs_in, const Tensor& weight_in, const Tensor& bias_in,
                               const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                               double eps, int64_t block, Site site) {
  OpScope op("batch_norm_relu_blocked", site);
  const NormReluInputs in =
      norm_relu_inputs(op, xs_in, weight_in, bias_in, running_mean, running_var, training, eps, false);
  const Tensor& x0 = in.xs[0];
  if (x0.dim() != 4) fail(op.op, fmt::format("expected pieces [N, C, H, W], got {}", describe(x0)), op.site);
  if (block != 8 && block != 16) fail(op.op, fmt::format("expected a channel block of 8 or 16, got {}", block), op.site);
  const Dims& s = in.shape;
  if (s[1] % block != 0)
    fail(op.op, fmt::format("expected channels divisible by the block {}, got {} (pieces joined: {})", block, s[1],
                            s.str()), op.site);
  Tensor z = new_tensor({s[0], s[1] / block, s[2], s[3], block}, x0.dtype(), x0.device());
  Tensor mean = new_tensor({s[1]}, x0.dtype(), x0.device()), invstd = new_like(mean);
  if (z.numel()) {
    backend_of(x0).batch_norm_relu_blocked_forward(z, mean, invstd, in.xs, in.weight, in.bias, running_mean,
                                                   running_var, training, momentum, eps);
    mark_running_stats_updated(training, running_mean, running_var);
  }
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        norm_relu_grads(n, g[0], gi, true);
      }, norm_relu_tape_inputs(in), {&z});
  if (n) save_norm_relu(*n, in, mean, invstd, z);
  keep_args(op, n, BatchNormArgs{.training = training, .eps = eps, .pieces = int64_t(in.xs.size())});
  return z;
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
  check_param(op, x, x.shape(), weight, normalized_shape, "a weight");
  check_param(op, x, x.shape(), bias, normalized_shape, "a bias");
  if (eps <= 0) fail(op.op, fmt::format("expected eps > 0, got {}", eps), op.site);
  Dims rows_shape{x.numel() / numel_of(normalized_shape)};
  Tensor y = new_like(x);
  Tensor mean = new_tensor(rows_shape, x.dtype(), x.device()), invstd = new_tensor(rows_shape, x.dtype(), x.device());
  if (x.numel()) backend_of(x).layer_norm_forward(y, mean, invstd, x, weight, bias, eps);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0);
        if (grad_enabled() && x.numel()) {  // create_graph
          Dims red, rows;
          const LayerNormArgs& a = n.args<LayerNormArgs>();
          for (int k = 0; k < x.dim(); ++k) (k < a.lead ? rows : red).push_back(k);
          NormGrads r = composite_grads(saved_xw(n, a.eps), g[0], red, rows, n.input_shape(1), true);
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
      }, {&x, &weight, &bias}, {&y});
  if (n) {
    n->save(x);
    n->save(weight);
    n->save(mean);
    n->save(invstd);
  }
  keep_args(op, n, LayerNormArgs{.lead = lead, .eps = eps});
  return y;
}

}  // namespace reel
