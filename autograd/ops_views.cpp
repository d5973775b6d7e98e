// Views (shared storage; differentiable), copies between devices and dtypes,
// and the autograd methods of Tensor.
#include "inplace.h"
#include "op_support.h"
#include "ops.h"

namespace reel {

// ---- conversion and copies

// y = x on another device; dy/dx = identity, copied back
Tensor Tensor::to(Device device, Site site) const {
  OpScope op("to", site);
  check_defined(op, *this, "the tensor");
  if (this->device() == device) return *this;
  Tensor out = new_tensor(shape(), dtype(), device);
  // the CUDA backend copies both ways; the CPU backend never sees a CUDA tensor
  Backend& be = this->device().is_cpu() ? backend_for(device) : backend_of(*this);
  if (numel()) be.copy(out, *this);
  if (Node* n = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        gi[0] = g[0].to(n.inputs[0].device);
      }, {this}, {&out}))
    (void)n;
  return out;
}

// y = x as another dtype; dy/dx = identity, cast back
Tensor Tensor::to(DType dtype, Site site) const {
  OpScope op("to", site);
  check_defined(op, *this, "the tensor");
  if (this->dtype() == dtype) return *this;
  Tensor out = cast(*this, dtype);
  if (is_floating(dtype) && is_floating_point())
    record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
      gi[0] = g[0].to(n.inputs[0].dtype);
    }, {this}, {&out});
  return out;
}

// y = x with contiguous row-major strides (a copy only when needed)
Tensor Tensor::contiguous(Site site) const {
  if (is_contiguous()) return *this;
  return clone(site);
}

// y = copy of x; dy/dx = identity
Tensor Tensor::clone(Site site) const {
  OpScope op("clone", site);
  check_defined(op, *this, "the tensor");
  Tensor out = new_like(*this);
  if (numel()) backend_of(*this).copy(out, *this);
  record(op, [](Node&, const std::vector<Tensor>& g, std::vector<Tensor>& gi) { gi[0] = g[0]; }, {this}, {&out});
  return out;
}

// ---- views
namespace {
// The strides that view `t` with `shape` without a copy, or an empty Dims if it cannot.
bool view_strides(const Tensor& t, const Dims& shape, Dims& out) {
  if (t.is_contiguous()) {
    out = contiguous_strides(shape);
    return true;
  }
  // Walk chunks of t's dims that are contiguous with each other (as PyTorch's computeStride).
  const Dims& os = t.shape();
  const Dims& ost = t.strides();
  out = Dims::filled(shape.size(), 0);
  int view_d = shape.size() - 1;
  int64_t chunk_base_stride = ost.size() ? ost.back() : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = os.size() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= os[tensor_d];
    if (tensor_d == 0 || (os[tensor_d - 1] != 1 && ost[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = ost[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Dims infer_shape(const OpScope& op, const Tensor& t, const Dims& shape) {
  Dims s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) fail(op.op, fmt::format("only one dim may be -1, got {}", shape.str()), op.site);
      infer = i;
    } else if (s[i] < 0) {
      fail(op.op, fmt::format("invalid shape {}", shape.str()), op.site);
    } else if (__builtin_mul_overflow(known, s[i], &known)) {
      fail(op.op, fmt::format("shape {} is too large: its element count overflows int64", shape.str()), op.site);
    }
  }
  if (infer >= 0) {
    if (known == 0 || t.numel() % known != 0)
      fail(op.op, fmt::format("shape {} is invalid for a tensor of {} elements (shape {})", shape.str(), t.numel(),
                              t.shape().str()), op.site);
    s[infer] = t.numel() / known;
  }
  if (check_shape(op.op, s, int64_t(t.element_size()), op.site) != t.numel())
    fail(op.op, fmt::format("shape {} is invalid for a tensor of {} elements (shape {})", shape.str(), t.numel(),
                            t.shape().str()), op.site);
  return s;
}

void reshape_backward(Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
  gi[0] = g[0].reshape(n.inputs[0].shape);
}
}  // namespace

// y = x viewed (or copied, when strides forbid a view) with a new shape; dy/dx = reshape back
Tensor Tensor::reshape(const Dims& shape, Site site) const {
  OpScope op("reshape", site);
  check_defined(op, *this, "the tensor");
  Dims s = infer_shape(op, *this, shape);
  Dims strides;
  const bool is_view = view_strides(*this, s, strides);
  Tensor out = is_view ? make_view(*this, s, strides, offset()) : make_view(contiguous(), s, contiguous_strides(s), 0);
  record(op, reshape_backward, {this}, {&out});
  if (is_view) mark_view(out, *this);
  return out;
}

// y = x viewed with a new shape; throws when the strides need a copy
Tensor Tensor::view(const Dims& shape, Site site) const {
  OpScope op("view", site);
  check_defined(op, *this, "the tensor");
  Dims s = infer_shape(op, *this, shape);
  Dims strides;
  if (!view_strides(*this, s, strides))
    fail("view", fmt::format("a tensor of shape {} and strides {} cannot be viewed as {}; use reshape()",
                             this->shape().str(), this->strides().str(), s.str()), op.site);
  Tensor out = make_view(*this, s, strides, offset());
  record(op, reshape_backward, {this}, {&out});
  mark_view(out, *this);
  return out;
}

// y = x with dims d0 and d1 swapped; dy/dx = the same swap
Tensor Tensor::transpose(int64_t d0, int64_t d1, Site site) const {
  OpScope op("transpose", site);
  check_defined(op, *this, "the tensor");
  int a = wrap_dim("transpose", d0, dim(), op.site), b = wrap_dim("transpose", d1, dim(), op.site);
  Dims s = shape(), st = strides();
  if (dim() > 0) {
    std::swap(s[a], s[b]);
    std::swap(st[a], st[b]);
  }
  Tensor out = make_view(*this, s, st, offset());
  Node* n = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        gi[0] = g[0].transpose(n.args<TransposeArgs>().dim0, n.args<TransposeArgs>().dim1);
      }, {this}, {&out});
  keep_args(op, n, TransposeArgs{.dim0 = a, .dim1 = b});
  mark_view(out, *this);
  return out;
}

Tensor Tensor::t(Site site) const {
  if (dim() != 2) fail("t", fmt::format("expected a 2-D tensor, got shape {}", shape().str()), site);
  return transpose(0, 1, site);
}

// y = x with dims reordered; dy/dx = the inverse order
Tensor Tensor::permute(const Dims& order, Site site) const {
  OpScope op("permute", site);
  check_defined(op, *this, "the tensor");
  if (order.size() != dim())
    fail("permute", fmt::format("order {} has {} dims, the tensor {} has {}", order.str(), order.size(),
                                shape().str(), dim()), op.site);
  Dims s = shape(), st = strides(), inverse = Dims::filled(dim(), -1), wrapped = order;
  for (int i = 0; i < dim(); ++i) {
    int d = wrap_dim("permute", order[i], dim(), op.site);
    if (inverse[d] != -1) fail("permute", fmt::format("order {} repeats dim {}", order.str(), d), op.site);
    inverse[d] = i;
    wrapped[i] = d;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = make_view(*this, s, st, offset());
  Node* n = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        gi[0] = g[0].permute(n.args<PermuteArgs>().inverse());
      }, {this}, {&out});
  keep_args(op, n, PermuteArgs{.order = wrapped});
  mark_view(out, *this);
  return out;
}

// y = x[start : start + length] along dim (a negative start counts from the end, as
// PyTorch); checked here so that errors name narrow, then a slice
Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length, Site site) const {
  OpScope op("narrow", site);
  check_defined(op, *this, "the tensor");
  if (dim() == 0) fail("narrow", "cannot narrow a 0-d tensor", op.site);
  int d = wrap_dim("narrow", dim_, dim(), op.site);
  int64_t n = shape()[d];
  if (start < -n || start > n)
    fail("narrow", fmt::format("start {} is out of range for dim {} of size {} (shape {}): expected -{} to {}", start,
                               d, n, shape().str(), n, n), op.site);
  if (start < 0) start += n;
  if (length < 0) fail("narrow", fmt::format("expected length >= 0, got {}", length), op.site);
  if (length > n - start)
    fail("narrow", fmt::format("start {} + length {} exceeds dim {} of size {} (shape {})", start, length, d, n,
                               shape().str()), op.site);
  return slice(d, start, start + length, 1, site);
}

// y = x[start:end:step] along dim (negative start/end count from the end)
Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step, Site site) const {
  OpScope op("slice", site);
  check_defined(op, *this, "the tensor");
  if (dim() == 0) fail("slice", "cannot slice a 0-d tensor", op.site);
  int d = wrap_dim("slice", dim_, dim(), op.site);
  int64_t n = shape()[d];
  if (step <= 0) fail("slice", fmt::format("step must be positive, got {}", step), op.site);
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0 || start > n || end < start || end > n)
    fail("slice", fmt::format("range [{}, {}) is out of bounds for dim {} of size {} (shape {})", start, end, d, n,
                              shape().str()), op.site);
  Dims s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  Tensor out = make_view(*this, s, st, offset() + start * strides()[d]);
  Node* node = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        Tensor gx = zeros(n.inputs[0].shape, {.dtype = g[0].dtype(), .device = g[0].device()});
        const SliceArgs& a = n.args<SliceArgs>();
        int64_t d = a.dim, start = a.start, step = a.step;
        gx.slice(d, start, start + (g[0].shape()[int(d)] - 1) * step + 1, step).copy_(g[0]);
        gi[0] = gx;
      }, {this}, {&out});
  keep_args(op, node, SliceArgs{.dim = d, .start = start, .step = step});
  mark_view(out, *this);
  return out;
}

// y = x[index] along dim, dropping that dim
Tensor Tensor::select(int64_t dim_, int64_t index, Site site) const {
  OpScope op("select", site);
  check_defined(op, *this, "the tensor");
  if (dim() == 0) fail("select", "cannot index a 0-d tensor", op.site);
  int d = wrap_dim("select", dim_, dim(), op.site);
  int64_t n = shape()[d];
  if (index < -n || index >= n)
    fail("select", fmt::format("index {} is out of range for dim {} of size {} (shape {})", index, d, n,
                               shape().str()), op.site);
  if (index < 0) index += n;
  return slice(d, index, index + 1, 1, site).squeeze(d, site);
}

// y = x broadcast to shape (stride 0 on new or size-1 dims); dy/dx sums back
Tensor Tensor::expand(const Dims& shape_, Site site) const {
  OpScope op("expand", site);
  check_defined(op, *this, "the tensor");
  if (shape_.size() < dim())
    fail("expand", fmt::format("cannot expand shape {} to fewer dims {}", shape().str(), shape_.str()), op.site);
  Dims target = shape_;
  int off = target.size() - dim();
  for (int i = 0; i < target.size(); ++i) {
    int64_t have = i >= off ? shape()[i - off] : 1;
    if (target[i] == -1 && i >= off) target[i] = have;
    if (have != target[i] && have != 1)
      fail("expand", fmt::format("cannot expand shape {} to {} (dim {}: {} is not 1)", shape().str(), shape_.str(),
                                 i, have), op.site);
  }
  check_shape("expand", target, int64_t(element_size()), op.site);
  Tensor out = expand_view(*this, target);
  if (out.impl() == impl()) out = make_view(*this, shape(), strides(), offset());
  record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
    gi[0] = sum_to(g[0], n.inputs[0].shape);
  }, {this}, {&out});
  mark_view(out, *this);
  return out;
}

Tensor Tensor::squeeze(Site site) const {
  Dims s;
  for (int64_t v : shape())
    if (v != 1) s.push_back(v);
  return reshape(s, site);
}

Tensor Tensor::squeeze(int64_t dim_, Site site) const {
  int d = wrap_dim("squeeze", dim_, dim(), site);
  if (dim() == 0 || shape()[d] != 1) return reshape(shape(), site);
  Dims s = shape(), st = strides();
  s.erase(d);
  st.erase(d);
  OpScope op("squeeze", site);
  Tensor out = make_view(*this, s, st, offset());
  record(op, reshape_backward, {this}, {&out});
  mark_view(out, *this);
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim_, Site site) const {
  OpScope op("unsqueeze", site);
  check_defined(op, *this, "the tensor");
  int d = wrap_dim("unsqueeze", dim_, dim() + 1, op.site);
  Dims s = shape(), st = strides();
  s.insert(d, 1);
  st.insert(d, d < dim() ? strides()[d] * shape()[d] : 1);
  Tensor out = make_view(*this, s, st, offset());
  record(op, reshape_backward, {this}, {&out});
  mark_view(out, *this);
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim, Site site) const {
  if (dim() == 0) return reshape({1}, site);
  int a = wrap_dim("flatten", start_dim, dim(), site), b = wrap_dim("flatten", end_dim, dim(), site);
  if (a > b) fail("flatten", fmt::format("start_dim {} is after end_dim {}", a, b), site);
  Dims s;
  for (int i = 0; i < a; ++i) s.push_back(shape()[i]);
  int64_t m = 1;
  for (int i = a; i <= b; ++i) m *= shape()[i];
  s.push_back(m);
  for (int i = b + 1; i < dim(); ++i) s.push_back(shape()[i]);
  return reshape(s, site);
}

// ---- autograd state
Tensor& Tensor::requires_grad_(bool on, Site site) {
  if (!defined()) fail("requires_grad_", "the tensor is undefined", site);
  if (on && !is_floating_point())
    fail("requires_grad_", fmt::format("only floating-point tensors can require grad, got {}", dtype_name(dtype())),
         site);
  if (!on && !is_leaf())
    fail("requires_grad_", "cannot turn off requires_grad on a non-leaf tensor; use detach()", site);
  impl_->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  if (!defined() || !impl_->grad) return Tensor();
  return Tensor(impl_->grad);
}

void Tensor::set_grad(const Tensor& g) {
  live("set_grad");
  if (g.defined() && !(g.shape() == shape()))
    fail("set_grad", fmt::format("gradient shape {} does not match the tensor's {}", g.shape().str(), shape().str()),
         Site{nullptr, 0});
  impl_->grad = g.defined() ? Ref<TensorImpl>(g.impl()) : Ref<TensorImpl>();
}

Tensor Tensor::detach() const {
  if (!defined()) return *this;
  return make_view(*this, shape(), strides(), offset());
}

// ---- in place (autograd/inplace.h: recorded when something requires grad, else one pass)
Tensor& Tensor::zero_(Site site) { return fill_(0.0, site); }

// x = value everywhere; no gradient reaches the old x
Tensor& Tensor::fill_(double value, Site site) {
  return run_inplace(
      "fill_", site, *this, {}, [&](const OpScope&) { if (numel()) backend_of(*this).fill(*this, value); },
      [&](const OpScope&) { return full(shape(), value, {.dtype = dtype(), .device = device()}); },
      /*fills=*/true);
}

// x = src broadcast to x's shape, in x's dtype; the gradient goes to src, none to the old x
Tensor& Tensor::copy_(const Tensor& src, Site site) {
  auto check = [&](const OpScope& op) {
    Dims b = broadcast_shapes("copy_", shape(), src.shape(), op.site);
    if (!(b == shape()))
      fail("copy_", fmt::format("source shape {} does not broadcast to destination shape {}", src.shape().str(),
                                shape().str()), op.site);
  };
  return run_inplace(
      "copy_", site, *this, {&src},
      [&](const OpScope& op) {
        check(op);
        Tensor s = expand_view(src, shape());
        if (!numel()) return;
        if (device() == src.device() || src.device().is_cpu()) backend_of(*this).copy(*this, s);
        else backend_of(src).copy(*this, s);
      },
      [&](const OpScope& op) {
        check(op);
        Tensor s = src.device() == device() ? src : src.to(device());
        return s.shape() == shape() ? s : s.expand(shape());
      });
}

void add_scaled_unrecorded(const OpScope& op, Tensor& self, const Tensor& other, double alpha) {
  check_same_device(op, self, other);
  Dims b = broadcast_shapes(op.op, self.shape(), other.shape(), op.site);
  if (!(b == self.shape()))
    fail(op.op, fmt::format("shape {} does not broadcast to the destination's {}", other.shape().str(),
                            self.shape().str()), op.site);
  Backend& be = backend_of(self);
  if (self.is_contiguous() && other.shape() == self.shape() && other.dtype() == self.dtype()) {
    be.axpy(self, other.contiguous(), alpha);
  } else {
    Tensor o = cast(expand_view(other, self.shape()), self.dtype());
    Tensor scaled = new_like(self);
    be.unary(UnaryOp::mul_scalar, scaled, o, alpha);
    be.binary(BinaryOp::add, self, self, scaled);
  }
}

// x = x + alpha other (other broadcast to x's shape)
Tensor& Tensor::add_(const Tensor& other, double alpha, Site site) {
  return run_inplace(
      "add_", site, *this, {&other}, [&](const OpScope& op) { add_scaled_unrecorded(op, *this, other, alpha); },
      [&](const OpScope&) { return alpha == 1.0 ? reel::add(*this, other) : reel::add(*this, other, alpha); });
}

// x = factor x
Tensor& Tensor::mul_(double factor, Site site) {
  return run_inplace(
      "mul_", site, *this, {},
      [&](const OpScope&) { if (numel()) backend_of(*this).unary(UnaryOp::mul_scalar, *this, *this, factor); },
      [&](const OpScope&) { return reel::mul(*this, factor); });
}

// The compound assignments, on a named tensor or on a view made in the same expression
// (y[0] += w, y.narrow(0, 0, 2) *= s): each is the in-place method, at the caller's line.
Tensor& operator+=(Tensor& a, TensorArg b) { return a.add_(b.t, 1.0, b.site); }
Tensor& operator-=(Tensor& a, TensorArg b) { return a.sub_(b.t, 1.0, b.site); }
Tensor& operator*=(Tensor& a, TensorArg b) { return a.mul_(b.t, b.site); }
Tensor& operator/=(Tensor& a, TensorArg b) { return a.div_(b.t, b.site); }
Tensor& operator+=(Tensor& a, ScalarArg b) { return a.add_(b.v, b.site); }
Tensor& operator-=(Tensor& a, ScalarArg b) { return a.sub_(b.v, b.site); }
Tensor& operator*=(Tensor& a, ScalarArg b) { return a.mul_(b.v, b.site); }
Tensor& operator/=(Tensor& a, ScalarArg b) { return a.div_(b.v, b.site); }
Tensor operator+=(Tensor&& a, TensorArg b) { return a += b; }
Tensor operator-=(Tensor&& a, TensorArg b) { return a -= b; }
Tensor operator*=(Tensor&& a, TensorArg b) { return a *= b; }
Tensor operator/=(Tensor&& a, TensorArg b) { return a /= b; }
Tensor operator+=(Tensor&& a, ScalarArg b) { return a += b; }
Tensor operator-=(Tensor&& a, ScalarArg b) { return a -= b; }
Tensor operator*=(Tensor&& a, ScalarArg b) { return a *= b; }
Tensor operator/=(Tensor&& a, ScalarArg b) { return a /= b; }

}  // namespace reel
