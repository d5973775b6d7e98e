// Linear algebra: matmul with NumPy semantics, bmm, linear and linear_relu. Every
// product goes to Backend::matmul on strided [B, M, K] views: transposes, broadcast
// batch dims and 1-D operands become strides, not copies.
#include "autocast.h"
#include "grad_buffer.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

void check_operands(const OpScope& op, const Tensor& a, const Tensor& b, const char* what_a, const char* what_b) {
  check_defined(op, a, what_a);
  check_defined(op, b, what_b);
  check_same_device(op, a, b);
  check_floating(op, a, what_a);
  check_floating(op, b, what_b);
  if (a.dtype() != b.dtype())
    fail(op.op, fmt::format("expected {} and {} of one dtype, got {} and {}", what_a, what_b, describe(a), describe(b)),
         op.site);
}

// The stride that steps through dims [from, to) of a tensor as through one merged
// dim, or false when their strides do not line up (size-1 dims are free).
bool merged_stride(const Dims& shape, const Dims& strides, int from, int to, int64_t& stride) {
  stride = 0;
  int inner = -1;
  for (int d = to - 1; d >= from; --d) {
    if (shape[d] == 1) continue;
    if (inner < 0) stride = strides[d];
    else if (strides[d] != strides[inner] * shape[inner]) return false;
    inner = d;
  }
  return true;
}

// A contiguous copy, not recorded (the op that asks records itself).
Tensor copy_of(const Tensor& t) {
  Tensor c = new_like(t);
  if (c.numel()) backend_of(t).copy(c, t);
  return c;
}

// t [..., R, C] broadcast to `batch` and seen as [B, R, C]: a view when the batch dims
// merge into one stride (contiguous or broadcast ones always do), else a copy.
Tensor as_batched(const Tensor& t, const Dims& batch) {
  int nb = batch.size();
  Dims shape = batch;
  shape.push_back(t.size(-2));
  shape.push_back(t.size(-1));
  Tensor e = expand_view(t, shape);
  int64_t stride;
  if (!merged_stride(e.shape(), e.strides(), 0, nb, stride)) {
    e = copy_of(e);
    stride = shape[nb] * shape[nb + 1];
  }
  return make_view(e, {numel_of(batch), shape[nb], shape[nb + 1]}, {stride, e.strides()[nb], e.strides()[nb + 1]},
                   e.offset());
}

// The broadcast of the batch dims (all but the last two) of a and b.
Dims batch_shape(const OpScope& op, const Dims& a, const Dims& b) {
  int na = a.size() - 2, nb = b.size() - 2, n = std::max(na, nb);
  Dims out = Dims::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int64_t x = i - (n - na) >= 0 ? a[i - (n - na)] : 1, y = i - (n - nb) >= 0 ? b[i - (n - nb)] : 1;
    if (x != y && x != 1 && y != 1)
      fail(op.op, fmt::format("batch dims of {} and {} do not broadcast", a.str(), b.str()), op.site);
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// y [batch..., M, N] = a [..., M, K] @ b [..., K, N], both at least 2-D and checked
// y = a @ b over `batch` into a contiguous y (a fresh tensor, or a leaf's gradient buffer)
void product_into(const Tensor& y, const Tensor& a, const Tensor& b, const Dims& batch) {
  if (y.numel() == 0) return;
  Dims flat{numel_of(batch), a.size(-2), b.size(-1)};
  backend_of(a).matmul(make_view(y, flat, contiguous_strides(flat), y.offset()), as_batched(a, batch),
                       as_batched(b, batch), Tensor(), false);
}

Tensor batched_product(const OpScope& op, const Tensor& a, const Tensor& b) {
  Dims batch = batch_shape(op, a.shape(), b.shape());
  Dims shape = batch;
  shape.push_back(a.size(-2));
  shape.push_back(b.size(-1));
  Tensor y = new_tensor(shape, a.dtype(), a.device());
  product_into(y, a, b, batch);
  return y;
}

// Rows of x [*, in] as a [1, rows, in] view (a copy when the leading dims do not merge).
Tensor rows_of(const Tensor& x) {
  int64_t in = x.size(-1), rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.shape()[d];
  int64_t stride;
  Tensor s = x;
  if (!merged_stride(x.shape(), x.strides(), 0, x.dim() - 1, stride)) {
    s = copy_of(x);
    stride = in;
  }
  return make_view(s, {1, rows, in}, {0, stride, s.strides()[s.dim() - 1]}, s.offset());
}

void check_linear(const OpScope& op, const Tensor& x, const Tensor& w, const Tensor& b) {
  check_operands(op, x, w, "the input", "the weight");
  check_dim(op, w, 2, "the weight [out, in]");
  if (x.dim() < 1) fail(op.op, fmt::format("expected an input [*, in] of at least 1 dim, got {}", describe(x)), op.site);
  if (x.size(-1) != w.size(1))
    fail(op.op, fmt::format("the input {} has {} features but the weight {} expects {}", x.shape().str(), x.size(-1),
                            w.shape().str(), w.size(1)), op.site);
  if (b.defined()) {
    check_operands(op, x, b, "the input", "the bias");
    if (b.dim() != 1 || b.size(0) != w.size(0))
      fail(op.op, fmt::format("expected a bias of shape [{}] for the weight {}, got {}", w.size(0), w.shape().str(),
                              b.shape().str()), op.site);
  }
}

// y = x W^T (+ b) (then relu), fused in one backend call
Tensor linear_forward(const OpScope& op, const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  check_linear(op, x, w, b);
  int64_t in = w.size(1), out = w.size(0);
  Dims shape = x.shape();
  shape[shape.size() - 1] = out;
  Tensor y = new_tensor(shape, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  Tensor x3 = rows_of(x);
  Dims flat{1, x3.size(1), out};
  backend_of(x).matmul(make_view(y, flat, contiguous_strides(flat), 0), x3,
                       make_view(w, {1, in, out}, {0, w.stride(1), w.stride(0)}, w.offset()), b, relu);
  return y;
}

// a [M, K] @ b [K, N] with the result in `dtype`: an autocast product's gradient for an
// f32 input comes straight out of the f16/bf16 product, accumulated in f32 (no rounding
// to 8 mantissa bits and no conversion pass). Recorded ops under create_graph. `into`: a
// leaf's gradient buffer to write it in (autograd/grad_buffer.h), else a new tensor; the
// same kernel call as matmul()'s either way, so the same bits.
Tensor product_as(DType dtype, const Tensor& a, const Tensor& b, const Tensor& into = {}) {
  if (grad_enabled() || (dtype == a.dtype() && !into.defined())) return matmul(a, b);
  Tensor y = into.defined() ? into : new_tensor({a.size(0), b.size(1)}, dtype, a.device());
  if (y.numel() == 0) return y;
  if (dtype == a.dtype())  // matmul()'s own call
    product_into(y, a, b, {});
  else
    backend_of(a).matmul(make_view(y, {1, a.size(0), b.size(1)}, {0, b.size(1), 1}, y.offset()),
                         make_view(a, {1, a.size(0), a.size(1)}, {0, a.stride(0), a.stride(1)}, a.offset()),
                         make_view(b, {1, b.size(0), b.size(1)}, {0, b.stride(0), b.stride(1)}, b.offset()), Tensor(),
                         false);
  return y;
}

// dx = g W, dW = g^T x, db = sum_rows g, for g [*, out] (already masked by relu); each in
// its input's dtype (the saved x and W are the autocast copies under autocast)
void linear_grads(Node& n, const Tensor& g, Grads& gi) {
  int64_t out = n.input_shape(1)[0], in = n.input_shape(1)[1];
  // the rows counted, not inferred: -1 is ambiguous when in or out is 0
  const Dims& xs = n.input_shape(0);
  int64_t rows = 1;
  for (int d = 0; d + 1 < xs.size(); ++d) rows *= xs[d];
  Tensor g2 = g.reshape({rows, out});
  if (n.needs_grad(0)) gi[0] = product_as(n.inputs[0].dtype, g2, n.saved_tensor(1)).reshape(xs);
  if (n.needs_grad(1))  // (into DistributedDataParallel's bucket where it asked: no copy there)
    gi[1] = product_as(n.inputs[1].dtype, g2.t(), n.saved_tensor(0).reshape({rows, in}),
                       autograd::internal::grad_buffer_for(n, 1, n.inputs[1].dtype));
  if (n.needs_grad(2)) gi[2] = sum(g2.to(n.inputs[2].dtype), {0});
}

}  // namespace

// y = a @ b, NumPy semantics (a 1-D operand gains a unit dim that the result drops);
// da = g b^T, db = a^T g, each summed over the batch dims it was broadcast along
Tensor matmul(const Tensor& a_in, const Tensor& b_in, Site site) {
  OpScope op("matmul", site);
  const Tensor a = autocast_lower(a_in), b = autocast_lower(b_in);
  check_operands(op, a, b, "the first operand", "the second operand");
  if (a.dim() == 0 || b.dim() == 0)
    fail(op.op, fmt::format("expected operands of at least 1 dim, got {} and {}", a.shape().str(), b.shape().str()),
         op.site);
  Tensor a2 = a.dim() == 1 ? make_view(a, {1, a.size(0)}, {0, a.stride(0)}, a.offset()) : a;
  Tensor b2 = b.dim() == 1 ? make_view(b, {b.size(0), 1}, {b.stride(0), 0}, b.offset()) : b;
  if (a2.size(-1) != b2.size(-2))
    fail(op.op, fmt::format("inner dims do not match: {} @ {} ({} columns against {} rows)", a.shape().str(),
                            b.shape().str(), a2.size(-1), b2.size(-2)), op.site);
  Tensor y = batched_product(op, a2, b2);
  if (a.dim() == 1 || b.dim() == 1) {
    Dims s = y.shape();
    if (b.dim() == 1) s.erase(s.size() - 1);
    if (a.dim() == 1) s.erase(s.size() - (b.dim() == 1 ? 1 : 2));
    y = make_view(y, s, contiguous_strides(s), 0);
  }
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        const Dims &as = n.input_shape(0), &bs = n.input_shape(1);
        Dims a2s = as, b2s = bs, gs = g[0].shape();  // put the dropped unit dims back
        if (bs.size() == 1) b2s.push_back(1), gs.push_back(1);
        if (as.size() == 1) a2s.insert(0, 1), gs.insert(gs.size() - 1, 1);
        Tensor g2 = g[0].reshape(gs);
        if (n.needs_grad(0)) {
          Tensor b2 = n.saved_tensor(1).reshape(b2s);
          gi[0] = sum_to(matmul(g2, b2.transpose(-1, -2)), a2s).reshape(as);
        }
        if (n.needs_grad(1)) {
          Tensor a2 = n.saved_tensor(0).reshape(a2s);
          Tensor gb = b2s.size() == 2 && a2s.size() > 2
                          // a batch against one matrix: fold the batch into rows, one product
                          ? matmul(a2.reshape({-1, a2s.back()}).t(), g2.reshape({-1, gs.back()}))
                          : sum_to(matmul(a2.transpose(-1, -2), g2), b2s);
          gi[1] = gb.reshape(bs);
        }
      }, {&a_in, &b_in}, {&y})) {
    n->save(n->needs_grad(1) ? a : Tensor());
    n->save(n->needs_grad(0) ? b : Tensor());
  }
  return y;
}

// y[i] = a[i] @ b[i]; da = g b^T, db = a^T g
Tensor bmm(const Tensor& a_in, const Tensor& b_in, Site site) {
  OpScope op("bmm", site);
  const Tensor a = autocast_lower(a_in), b = autocast_lower(b_in);
  check_operands(op, a, b, "the first operand", "the second operand");
  check_dim(op, a, 3, "the first operand [B, M, K]");
  check_dim(op, b, 3, "the second operand [B, K, N]");
  if (a.size(0) != b.size(0) || a.size(2) != b.size(1))
    fail(op.op, fmt::format("expected [B, M, K] @ [B, K, N], got {} @ {}", a.shape().str(), b.shape().str()), op.site);
  Tensor y = new_tensor({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  if (y.numel()) backend_of(a).matmul(y, a, b, Tensor(), false);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        if (n.needs_grad(0)) gi[0] = bmm(g[0], n.saved_tensor(1).transpose(1, 2));
        if (n.needs_grad(1)) gi[1] = bmm(n.saved_tensor(0).transpose(1, 2), g[0]);
      }, {&a_in, &b_in}, {&y})) {
    n->save(n->needs_grad(1) ? a : Tensor());
    n->save(n->needs_grad(0) ? b : Tensor());
  }
  return y;
}

// y = x W^T + b; dx = g W, dW = g^T x, db = sum_rows g
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Site site) {
  OpScope op("linear", site);
  const Tensor xc = autocast_lower(x), wc = autocast_lower(weight), bc = autocast_lower(bias);
  Tensor y = linear_forward(op, xc, wc, bc, false);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { linear_grads(n, g[0], gi); },
                       {&x, &weight, &bias}, {&y})) {
    n->save(n->needs_grad(1) ? xc : Tensor());
    n->save(n->needs_grad(0) ? wc : Tensor());
  }
  return y;
}

// y = relu(x W^T + b); with m = g (y > 0): dx = m W, dW = m^T x, db = sum_rows m
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Site site) {
  OpScope op("linear_relu", site);
  const Tensor xc = autocast_lower(x), wc = autocast_lower(weight), bc = autocast_lower(bias);
  Tensor y = linear_forward(op, xc, wc, bc, true);
  if (Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        linear_grads(n, relu_grad(g[0], n.saved_tensor(2)), gi);
      }, {&x, &weight, &bias}, {&y})) {
    n->save(n->needs_grad(1) ? xc : Tensor());
    n->save(n->needs_grad(0) ? wc : Tensor());
    n->save(y);
  }
  return y;
}

}  // namespace reel
