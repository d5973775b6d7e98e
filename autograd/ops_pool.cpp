// Pooling, NCHW: max_pool2d, avg_pool2d, adaptive_avg_pool2d. x [N, C, H, W] ->
// y [N, C, OH, OW], OH = (H + 2 pad - dil (kernel - 1) - 1) / stride + 1 (adaptive: any
// OH, OW), or with ceil_mode rounded up, less a last window that would start in the right
// padding (PyTorch's rule). Every window then holds at least one input element, so the
// backend kernels, which clip windows to the input, need nothing more for ceil_mode. An
// unbatched [C, H, W] input runs as a batch of one. Dilated max pooling and avg pooling's
// divisor_override are composed above the backend (its kernels have neither).
#include <algorithm>
#include <limits>

#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// The strides of a pooling's output (or input gradient) of `shape` read from t: channels-last
// where t is a channels-last tensor of a dtype the backend keeps so, which the next
// convolution then reads without a reorder; else contiguous
Dims pool_layout(const Tensor& t, const Dims& shape) {
  const bool cl = backend_of(t).channels_last(t.dtype()) && is_channels_last(t.shape(), t.strides());
  return cl ? channels_last_strides(shape) : contiguous_strides(shape);
}

void check_input(const OpScope& op, const Tensor& x) {
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  if (x.dim() != 3 && x.dim() != 4)
    fail(op.op, fmt::format("expected the input [N, C, H, W] or [C, H, W], got {}", x.shape().str()), op.site);
}

// As PyTorch's pooling_output_shape: the outputs along one dim.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode, int64_t dil = 1) {
  int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  int64_t out = (ceil_mode ? span + s - 1 : span) / s + 1;  // span >= 0 here (checked)
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

// Checks the options against x; returns the backend's parameters and y's shape.
PoolParams plan(const OpScope& op, const Tensor& x, const Pool2dOptions& o, Dims& shape) {
  check_input(op, x);
  PoolParams p = pool_params(o);
  for (int i = 0; i < 2; ++i) {
    if (p.kernel[i] < 1 || p.stride[i] < 1 || p.padding[i] < 0 || 2 * p.padding[i] > p.kernel[i])
      fail(op.op, fmt::format("expected kernel >= 1, stride >= 1 and 0 <= padding <= kernel / 2, got kernel [{}, {}], "
                              "stride [{}, {}], padding [{}, {}]", p.kernel[0], p.kernel[1], p.stride[0], p.stride[1],
                              p.padding[0], p.padding[1]), op.site);
  }
  if (o.dilation.h < 1 || o.dilation.w < 1)
    fail(op.op, fmt::format("expected dilation >= 1, got [{}, {}]", o.dilation.h, o.dilation.w), op.site);
  if (o.divisor_override < 0)
    fail(op.op, fmt::format("expected divisor_override > 0 (or 0: none), got {}", o.divisor_override), op.site);
  check_dim(op, x, 4, "the input [N, C, H, W]");
  shape = {x.size(0), x.size(1), 0, 0};
  for (int i = 0; i < 2; ++i) {
    int64_t padded = x.size(2 + i) + 2 * p.padding[i], extent = o.dilation[i] * (p.kernel[i] - 1) + 1;
    if (extent > padded)
      fail(op.op, fmt::format("the kernel [{}, {}] (dilation [{}, {}]) is larger than the padded input [{}, {}] "
                              "(input {}, padding [{}, {}])", p.kernel[0], p.kernel[1], o.dilation[0], o.dilation[1],
                              x.size(2) + 2 * p.padding[0], x.size(3) + 2 * p.padding[1], x.shape().str(),
                              p.padding[0], p.padding[1]), op.site);
    shape[2 + i] = pooled_size(x.size(2 + i), p.kernel[i], p.stride[i], p.padding[i], o.ceil_mode, o.dilation[i]);
  }
  return p;
}

// Dilated max pooling, composed: x padded with -inf to cover every window, each window's
// elements gathered (index_select along W, then H) into a last dim of KH * KW in row-major
// order, and max over it, whose gradient goes to the first maximum: PyTorch's kernel's
// choice. The indices are the winners' flat h * W + w in x.
PoolWithIndices dilated_max_pool2d(const Tensor& x, const PoolParams& p, const Size2& dil, const Dims& shape) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), OH = shape[2], OW = shape[3];
  const int64_t KH = p.kernel[0], KW = p.kernel[1];
  const int64_t end_h = (OH - 1) * p.stride[0] + dil.h * (KH - 1) + 1,
                end_w = (OW - 1) * p.stride[1] + dil.w * (KW - 1) + 1;  // in padded coordinates
  const Tensor xp = pad(x, {p.padding[1], end_w - p.padding[1] - W, p.padding[0], end_h - p.padding[0] - H},
                        {.value = -std::numeric_limits<double>::infinity()});
  std::vector<int64_t> rows, cols, flat;  // padded coordinates of each window element; flat: x's
  for (int64_t o = 0; o < OH; ++o)
    for (int64_t k = 0; k < KH; ++k) rows.push_back(o * p.stride[0] + k * dil.h);
  for (int64_t o = 0; o < OW; ++o)
    for (int64_t k = 0; k < KW; ++k) cols.push_back(o * p.stride[1] + k * dil.w);
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ++ow)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw)
          flat.push_back((rows[oh * KH + kh] - p.padding[0]) * W + cols[ow * KW + kw] - p.padding[1]);
  const Options on{.dtype = DType::i64, .device = x.device()};
  Tensor windows = index_select(index_select(xp, 3, from_vector(cols, {OW * KW}, on)), 2,
                                from_vector(rows, {OH * KH}, on));  // [N, C, OH KH, OW KW]
  windows = windows.reshape({N, C, OH, KH, OW, KW}).permute({0, 1, 2, 4, 3, 5}).reshape({N, C, OH, OW, KH * KW});
  auto [values, k] = max(windows, -1);
  NoGradGuard no_grad;
  Tensor where_in_x = from_vector(flat, {1, 1, OH, OW, KH * KW}, on).expand({N, C, OH, OW, KH * KW});
  return {values, gather(where_in_x, 4, k.unsqueeze(4)).squeeze(4)};
}

// avg pooling with divisor_override: the mean with padding counted (divisor clipped to the
// padded input, as PyTorch's pool_size), rescaled to sum / divisor
Tensor avg_pool2d_divided(const Tensor& x, const PoolParams& p, bool ceil_mode, int64_t divisor, const Dims& shape) {
  Pool2dOptions counted{.kernel = {p.kernel[0], p.kernel[1]}, .stride = {p.stride[0], p.stride[1]},
                        .padding = {p.padding[0], p.padding[1]}, .count_include_pad = true, .ceil_mode = ceil_mode};
  std::vector<double> scale;
  for (int64_t oh = 0; oh < shape[2]; ++oh)
    for (int64_t ow = 0; ow < shape[3]; ++ow) {
      int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
      int64_t h1 = std::min(h0 + p.kernel[0], x.size(2) + p.padding[0]);
      int64_t w1 = std::min(w0 + p.kernel[1], x.size(3) + p.padding[1]);
      scale.push_back(double((h1 - h0) * (w1 - w0)) / double(divisor));
    }
  Tensor s = from_vector(scale, {shape[2], shape[3]}, {.dtype = x.dtype(), .device = x.device()});
  return mul(avg_pool2d(x, counted), s);
}

// What a pooling entry keeps: the window, and ceil_mode as the output shape tells it (a
// re-pooling in the create_graph rule needs it)
PoolArgs pool_args(const PoolParams& p, const Dims& x_shape, const Dims& y_shape) {
  PoolArgs a{p};
  for (int i = 0; i < 2; ++i)
    if (pooled_size(x_shape[2 + i], p.kernel[i], p.stride[i], p.padding[i], false) != y_shape[2 + i]) a.ceil_mode = true;
  return a;
}

Pool2dOptions options_of(const PoolParams& p, bool ceil_mode) {
  return {.kernel = {p.kernel[0], p.kernel[1]},
          .stride = {p.stride[0], p.stride[1]},
          .padding = {p.padding[0], p.padding[1]},
          .count_include_pad = p.count_include_pad,
          .ceil_mode = ceil_mode};
}

// ---- the input gradients as recorded ops, for a create_graph backward. Each is
// linear in g, and its own rule is its adjoint: max pooling's scatter to the argmax
// is undone by a gather there, average pooling's spread by average pooling again.

// gx = g routed to the saved argmax of each window; dg = gg gathered at the argmax
Tensor max_pool2d_input_grad(const Tensor& g, const Tensor& indices, const Dims& x_shape, const PoolParams& p) {
  OpScope op("max_pool2d_backward", {});
  // indices are channels-last where the forward's x was (max_pool2d_with_indices)
  const bool cl = backend_of(g).channels_last(g.dtype()) && is_channels_last(indices.shape(), indices.strides());
  Tensor gx = new_tensor(x_shape, g.dtype(), g.device(), cl ? channels_last_strides(x_shape) : contiguous_strides(x_shape));
  if (gx.numel()) backend_of(gx).max_pool2d_backward(gx, g, indices, p);
  Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        const Dims& s = n.input_shape(0);
        Tensor idx = n.saved_tensor(0).reshape({s[0] * s[1], s[2] * s[3]});
        gi[0] = gather(gg[0].reshape({s[0] * s[1], -1}), 1, idx).reshape(s);
      }, {&g}, {&gx});
  if (n) n->save(indices);
  keep_args(op, n, pool_args(p, x_shape, g.shape()));
  return gx;
}

// gx = g / count spread over each window; dg = avg_pool2d(gg)
Tensor avg_pool2d_input_grad(const Tensor& g, const Dims& x_shape, const PoolParams& p) {
  OpScope op("avg_pool2d_backward", {});
  Tensor gx = new_tensor(x_shape, g.dtype(), g.device(), pool_layout(g, x_shape));
  if (gx.numel()) backend_of(gx).avg_pool2d_backward(gx, g, p);
  Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        const PoolArgs& a = n.args<PoolArgs>();
        gi[0] = avg_pool2d(gg[0], options_of(a, a.ceil_mode));
      }, {&g}, {&gx});
  keep_args(op, n, pool_args(p, x_shape, g.shape()));
  return gx;
}

// gx = g / window size spread over each window; dg = adaptive_avg_pool2d(gg)
Tensor adaptive_avg_pool2d_input_grad(const Tensor& g, const Dims& x_shape) {
  OpScope op("adaptive_avg_pool2d_backward", {});
  Tensor gx = new_tensor(x_shape, g.dtype(), g.device());
  if (gx.numel()) backend_of(gx).adaptive_avg_pool2d_backward(gx, g);
  record(op, [](Node& n, const Grads& gg, Grads& gi) {
    gi[0] = adaptive_avg_pool2d(gg[0], n.input_shape(0)[2], n.input_shape(0)[3]);
  }, {&g}, {&gx});
  return gx;
}

}  // namespace

PoolParams pool_params(const Pool2dOptions& o) {
  PoolParams p;
  for (int i = 0; i < 2; ++i) {
    p.kernel[i] = o.kernel[i];
    p.stride[i] = o.stride[i] == 0 ? o.kernel[i] : o.stride[i];
    p.padding[i] = o.padding[i];
  }
  p.count_include_pad = o.count_include_pad;
  return p;
}

// y = max over each window (argmax saved as flat h*W+w); dx = g routed to the argmax
PoolWithIndices max_pool2d_with_indices(const Tensor& x, Pool2dOptions opt, Site site) {
  OpScope op("max_pool2d", site);
  check_input(op, x);
  if (x.dim() == 3) {  // unbatched: a batch of one
    PoolWithIndices r = max_pool2d_with_indices(x.unsqueeze(0), opt, site);
    return {r.values.squeeze(0), r.indices.squeeze(0)};
  }
  Dims shape;
  PoolParams p = plan(op, x, opt, shape);
  if (opt.divisor_override)
    fail(op.op, fmt::format("divisor_override is avg pooling's; got {}", opt.divisor_override), op.site);
  if (opt.dilation.h != 1 || opt.dilation.w != 1) return dilated_max_pool2d(x, p, opt.dilation, shape);
  const Dims strides = pool_layout(x, shape);
  Tensor y = new_tensor(shape, x.dtype(), x.device(), strides), indices = new_tensor(shape, DType::i64, x.device(), strides);
  if (y.numel()) backend_of(x).max_pool2d_forward(y, indices, x, p);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = max_pool2d_input_grad(g[0], n.saved_tensor(0), n.input_shape(0), n.args<PoolArgs>());
      }, {&x}, {&y});
  if (n) {
    n->save(indices);
  }
  keep_args(op, n, pool_args(p, x.shape(), y.shape()));
  return {y, indices};
}

Tensor max_pool2d(const Tensor& x, Pool2dOptions opt, Site site) { return max_pool2d_with_indices(x, opt, site).values; }

// y = mean over each window (count_include_pad: padding counts in the divisor);
// dx = g / count spread over the window
Tensor avg_pool2d(const Tensor& x, Pool2dOptions opt, Site site) {
  OpScope op("avg_pool2d", site);
  check_input(op, x);
  if (x.dim() == 3) return avg_pool2d(x.unsqueeze(0), opt, site).squeeze(0);  // unbatched: a batch of one
  Dims shape;
  PoolParams p = plan(op, x, opt, shape);
  if (opt.dilation.h != 1 || opt.dilation.w != 1)
    fail(op.op, fmt::format("dilation is max pooling's (PyTorch's avg_pool2d has none); got [{}, {}]", opt.dilation.h,
                            opt.dilation.w), op.site);
  if (opt.divisor_override) return avg_pool2d_divided(x, p, opt.ceil_mode, opt.divisor_override, shape);
  Tensor y = new_tensor(shape, x.dtype(), x.device(), pool_layout(x, shape));
  if (y.numel()) backend_of(x).avg_pool2d_forward(y, x, p);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = avg_pool2d_input_grad(g[0], n.input_shape(0), n.args<PoolArgs>());
      }, {&x}, {&y});
  keep_args(op, n, pool_args(p, x.shape(), y.shape()));
  return y;
}

// y[i, j] = mean of x over rows [floor(i H / oh), ceil((i+1) H / oh)) and likewise
// columns; dx = g / window size spread over each window
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w, Site site) {
  OpScope op("adaptive_avg_pool2d", site);
  check_input(op, x);
  if (x.dim() == 3) return adaptive_avg_pool2d(x.unsqueeze(0), out_h, out_w, site).squeeze(0);
  if (out_h < 1 || out_w < 1)
    fail(op.op, fmt::format("expected an output size of at least [1, 1], got [{}, {}]", out_h, out_w), op.site);
  if (x.size(2) < 1 || x.size(3) < 1)
    fail(op.op, fmt::format("expected an input of at least 1x1 pixels, got {}", x.shape().str()), op.site);
  Tensor y = new_tensor({x.size(0), x.size(1), out_h, out_w}, x.dtype(), x.device());
  if (y.numel()) backend_of(x).adaptive_avg_pool2d_forward(y, x);
  record(op, [](Node& n, const Grads& g, Grads& gi) { gi[0] = adaptive_avg_pool2d_input_grad(g[0], n.input_shape(0)); },
         {&x}, {&y});
  return y;
}

}  // namespace reel
