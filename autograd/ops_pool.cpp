// Pooling, NCHW: max_pool2d, avg_pool2d, adaptive_avg_pool2d. x [N, C, H, W] ->
// y [N, C, OH, OW], OH = (H + 2 pad - kernel) / stride + 1 (adaptive: any OH, OW), or
// with ceil_mode rounded up, less a last window that would start in the right padding
// (PyTorch's rule). Every window then holds at least one input element, so the backend
// kernels, which clip windows to the input, need nothing more for ceil_mode. An unbatched
// [C, H, W] input runs as a batch of one.
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

void check_input(const OpScope& op, const Tensor& x) {
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  if (x.dim() != 3 && x.dim() != 4)
    fail(op.op, fmt::format("expected the input [N, C, H, W] or [C, H, W], got {}", x.shape().str()), op.site);
}

// As PyTorch's pooling_output_shape: the outputs along one dim.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  int64_t span = in + 2 * pad - k;
  int64_t out = (ceil_mode ? span + s - 1 : span) / s + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

// Checks the options against x; returns the backend's parameters and y's shape.
PoolParams plan(const OpScope& op, const Tensor& x, const Pool2dOptions& o, Dims& shape) {
  check_input(op, x);
  PoolParams p;
  for (int i = 0; i < 2; ++i) {
    p.kernel[i] = o.kernel[i];
    p.stride[i] = o.stride[i] == 0 ? o.kernel[i] : o.stride[i];
    p.padding[i] = o.padding[i];
  }
  p.count_include_pad = o.count_include_pad;
  for (int i = 0; i < 2; ++i) {
    if (p.kernel[i] < 1 || p.stride[i] < 1 || p.padding[i] < 0 || 2 * p.padding[i] > p.kernel[i])
      fail(op.op, fmt::format("expected kernel >= 1, stride >= 1 and 0 <= padding <= kernel / 2, got kernel [{}, {}], "
                              "stride [{}, {}], padding [{}, {}]", p.kernel[0], p.kernel[1], p.stride[0], p.stride[1],
                              p.padding[0], p.padding[1]), op.site);
  }
  check_dim(op, x, 4, "the input [N, C, H, W]");
  shape = {x.size(0), x.size(1), 0, 0};
  for (int i = 0; i < 2; ++i) {
    int64_t padded = x.size(2 + i) + 2 * p.padding[i];
    if (p.kernel[i] > padded)
      fail(op.op, fmt::format("the kernel [{}, {}] is larger than the padded input [{}, {}] (input {}, padding [{}, {}])",
                              p.kernel[0], p.kernel[1], x.size(2) + 2 * p.padding[0], x.size(3) + 2 * p.padding[1],
                              x.shape().str(), p.padding[0], p.padding[1]), op.site);
    shape[2 + i] = pooled_size(x.size(2 + i), p.kernel[i], p.stride[i], p.padding[i], o.ceil_mode);
  }
  return p;
}

void remember(Node* n, const PoolParams& p) {
  for (int i = 0; i < 2; ++i) {
    n->ints[i] = p.kernel[i];
    n->ints[2 + i] = p.stride[i];
    n->ints[4 + i] = p.padding[i];
  }
  n->ints[6] = p.count_include_pad;
}
// The output shape decides ceil_mode for a re-pooling in the create_graph rule.
void remember_ceil(Node* n, const Dims& x_shape, const Dims& y_shape, const PoolParams& p) {
  n->ints[7] = 0;
  for (int i = 0; i < 2; ++i)
    if (pooled_size(x_shape[2 + i], p.kernel[i], p.stride[i], p.padding[i], false) != y_shape[2 + i]) n->ints[7] = 1;
}

PoolParams recall(const Node& n) {
  PoolParams p;
  for (int i = 0; i < 2; ++i) {
    p.kernel[i] = n.ints[i];
    p.stride[i] = n.ints[2 + i];
    p.padding[i] = n.ints[4 + i];
  }
  p.count_include_pad = n.ints[6] != 0;
  return p;
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
  Tensor gx = new_tensor(x_shape, g.dtype(), g.device());
  if (gx.numel()) backend_of(gx).max_pool2d_backward(gx, g, indices, p);
  if (Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        const Dims& s = n.input_shape(0);
        Tensor idx = n.saved_tensor(0).reshape({s[0] * s[1], s[2] * s[3]});
        gi[0] = gather(gg[0].reshape({s[0] * s[1], -1}), 1, idx).reshape(s);
      }, {&g}, {&gx}))
    n->save(indices);
  return gx;
}

// gx = g / count spread over each window; dg = avg_pool2d(gg)
Tensor avg_pool2d_input_grad(const Tensor& g, const Dims& x_shape, const PoolParams& p) {
  OpScope op("avg_pool2d_backward", {});
  Tensor gx = new_tensor(x_shape, g.dtype(), g.device());
  if (gx.numel()) backend_of(gx).avg_pool2d_backward(gx, g, p);
  if (Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        gi[0] = avg_pool2d(gg[0], options_of(recall(n), n.ints[7] != 0));
      }, {&g}, {&gx})) {
    remember(n, p);
    remember_ceil(n, x_shape, g.shape(), p);
  }
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
  Tensor y = new_tensor(shape, x.dtype(), x.device());
  Tensor indices = new_tensor(shape, DType::i64, x.device());
  if (y.numel()) backend_of(x).max_pool2d_forward(y, indices, x, p);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = max_pool2d_input_grad(g[0], n.saved_tensor(0), n.input_shape(0), recall(n));
      }, {&x}, {&y})) {
    n->save(indices);
    remember(n, p);
  }
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
  Tensor y = new_tensor(shape, x.dtype(), x.device());
  if (y.numel()) backend_of(x).avg_pool2d_forward(y, x, p);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = avg_pool2d_input_grad(g[0], n.input_shape(0), recall(n));
      }, {&x}, {&y}))
    remember(n, p);
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
