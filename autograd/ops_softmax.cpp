// softmax and log_softmax along any dim, numerically stable (the max is subtracted
// first), each saving its output for backward.
#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// The backward rule in recorded ops, for a create_graph backward (the kernel's
// result would have no grad_fn, cutting second derivatives through g and y).
Tensor composite_grad(const Tensor& g, const Tensor& y, int64_t d, bool log) {
  if (log) return sub(g, mul(exp(y), sum(g, {d}, true)));
  return mul(y, sub(g, sum(mul(g, y), {d}, true)));
}

Tensor softmax_op(const OpScope& op, const Tensor& x, int64_t dim, bool log) {
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  // a 0-dim tensor is a row of one element
  Tensor in = x.dim() == 0 ? make_view(x, {1}, {1}, x.offset()) : x;
  int d = wrap_dim(op.op, dim, in.dim(), op.site);
  Tensor y = new_like(in);
  if (y.numel()) backend_of(in).softmax_forward(y, in, d, log);
  if (x.dim() == 0) y = make_view(y, {}, {}, 0);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor y = n.saved_tensor(0);
        if (grad_enabled()) {  // create_graph: the rule itself must be differentiable
          gi[0] = y.dim() == 0 ? zeros_like(y) : composite_grad(g[0], y, n.args<SoftmaxArgs>().dim, n.args<SoftmaxArgs>().log);
          return;
        }
        Tensor yv = y.dim() == 0 ? make_view(y, {1}, {1}, y.offset()) : y;
        Tensor gv = g[0].dim() == 0 ? make_view(g[0], {1}, {1}, g[0].offset()) : g[0];
        Tensor gx = new_like(yv);
        if (gx.numel()) backend_of(gx).softmax_backward(gx, gv, yv, int(n.args<SoftmaxArgs>().dim), n.args<SoftmaxArgs>().log);
        gi[0] = y.dim() == 0 ? make_view(gx, {}, {}, 0) : gx;
      }, {&x}, {&y});
  if (n) {
    n->save(y);
  }
  keep_args(op, n, SoftmaxArgs{.dim = d, .log = log});
  return y;
}

}  // namespace

// y = e^(x - max) / sum e^(x - max) along dim; dx = y (g - sum(g y))
Tensor softmax(const Tensor& x_in, int64_t dim, Site site) {
  OpScope op("softmax", site);
  const Tensor x = autocast_f32(x_in);
  return softmax_op(op, x, dim, false);
}

// y = x - max - log sum e^(x - max) along dim; dx = g - e^y sum(g)
Tensor log_softmax(const Tensor& x_in, int64_t dim, Site site) {
  OpScope op("log_softmax", site);
  const Tensor x = autocast_f32(x_in);
  return softmax_op(op, x, dim, true);
}

}  // namespace reel
