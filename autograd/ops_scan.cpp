// Running sums and products along one dim (Backend::cumulative). cumsum's gradient is
// the reverse running sum of g, a recorded op of the same kind, so every order of
// derivative exists. cumprod's is composed from cumsum, cumprod and where, exact when
// x has zeros (the rule PyTorch uses): see cumprod_grad.
#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

Tensor cumsum_dir(const Tensor& x, int d, bool reverse);

// y = running sum of x along d (from the end when reverse); dx = the running sum of g the other way
Tensor cumsum_dir(const Tensor& x, int d, bool reverse) {
  OpScope op(reverse ? "cumsum_reverse" : "cumsum", {});
  Tensor in = x.is_floating_point() ? x : cast(x, DType::i64);
  Tensor y = new_like(in);
  if (y.numel()) backend_of(in).cumulative(ScanOp::sum, y, in, d, reverse);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = cumsum_dir(g[0], int(n.args<ScanArgs>().dim), !n.args<ScanArgs>().reverse);
      }, {&x}, {&y});
  keep_args(op, n, ScanArgs{.dim = d, .reverse = reverse});
  return y;
}

Tensor cumprod_grad(const Tensor& g, const Tensor& x, const Tensor& y, int d);

// y_i = prod_{j <= i} x_j along d; dx by cumprod_grad
Tensor cumprod_raw(const Tensor& x, int d) {
  OpScope op("cumprod", {});
  Tensor in = x.is_floating_point() ? x : cast(x, DType::i64);
  Tensor y = new_like(in);
  if (y.numel()) backend_of(in).cumulative(ScanOp::prod, y, in, d, false);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = cumprod_grad(g[0], n.saved_tensor(0), n.saved_tensor(1), int(n.args<ScanArgs>().dim));
      }, {&x}, {&y});
  if (n) {
    n->save(x);
    n->save(y);
  }
  keep_args(op, n, ScanArgs{.dim = d});
  return y;
}

// dx_i = sum_{j >= i} g_j dy_j/dx_i. Before a line's first zero (k) that is
// revcumsum(g y)_i / x_i; at k it is sum_{j >= k} g_j z_j with z the cumprod of x with
// x_k set to 1; after k it is 0 (every product through k and i holds the zero x_k).
Tensor cumprod_grad(const Tensor& g, const Tensor& x, const Tensor& y, int d) {
  Tensor first, before;
  {
    NoGradGuard guard;
    Tensor is_zero = eq(x, 0.0);
    Tensor zeros_so_far = cumsum_dir(is_zero, d, false);
    before = eq(zeros_so_far, 0.0);
    first = logical_and(is_zero, eq(zeros_so_far, 1.0));
  }
  Tensor one = full({}, 1.0, {.dtype = x.dtype(), .device = x.device()});
  Tensor nought = full({}, 0.0, {.dtype = x.dtype(), .device = x.device()});
  Tensor gx = where(before, div(cumsum_dir(mul(g, y), d, true), where(before, x, one)), nought);
  Tensor z = cumprod_raw(where(first, one, x), d);
  return where(first, cumsum_dir(mul(g, z), d, true), gx);
}

}  // namespace

Tensor cumsum(const Tensor& x_in, int64_t dim, Site site) {
  OpScope op("cumsum", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  int d = wrap_dim(op.op, dim, std::max(x.dim(), 1), op.site);
  if (x.dim() == 0) return cumsum_dir(x.reshape({1}), 0, false).reshape({});
  return cumsum_dir(x, d, false);
}

Tensor cumprod(const Tensor& x_in, int64_t dim, Site site) {
  OpScope op("cumprod", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  int d = wrap_dim(op.op, dim, std::max(x.dim(), 1), op.site);
  if (x.dim() == 0) return cumprod_raw(x.reshape({1}), 0).reshape({});
  return cumprod_raw(x, d);
}

}  // namespace reel
