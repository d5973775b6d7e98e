// Tensor's in-place methods under libtorch's spellings (eq_, sub_, clamp_, uniform_, ...).
// Each computes the out-of-place op off the tape and writes the result into this tensor
// through copy_, so it is checked, versioned and refused on a leaf that requires grad
// exactly as copy_ is; the result must have this tensor's shape (PyTorch refuses
// x.add_(y) where the broadcast would grow x, as copy_ does).
#include "op_support.h"
#include "ops.h"

namespace reel {

namespace {
// The rule of every in-place write (tensor.h), checked under the method's own name.
void check_writable(const OpScope& op, const Tensor& t) {
  check_defined(op, t, "the tensor");
  if (grad_enabled() && t.requires_grad() && t.is_leaf())
    fail(op.op, fmt::format("a leaf tensor {} that requires grad is written in place while grad mode is on; "
                            "wrap the update in reel::NoGradGuard", t.shape().str()), op.site);
}

// Writes `compute()` into t as t's dtype. The op runs off the tape: in-place methods are
// not recorded (tensor.h), and a recorded intermediate would only be freed again.
template <typename F>
Tensor& write_into(Tensor& t, const char* name, Site site, F compute) {
  OpScope op(name, site);
  check_writable(op, t);
  Tensor r;
  {
    NoGradGuard off_tape;
    r = compute();
  }
  if (!(r.shape() == t.shape()))
    fail(name, fmt::format("the result's shape {} is not the tensor's {}; an in-place op cannot grow its tensor",
                           r.shape().str(), t.shape().str()), op.site);
  if (r.dtype() != t.dtype()) r = r.to(t.dtype());
  return t.copy_(r);
}
}  // namespace

Tensor& Tensor::eq_(const Tensor& o, Site site) { return write_into(*this, "eq_", site, [&] { return eq(o); }); }
Tensor& Tensor::ne_(const Tensor& o, Site site) { return write_into(*this, "ne_", site, [&] { return ne(o); }); }
Tensor& Tensor::lt_(const Tensor& o, Site site) { return write_into(*this, "lt_", site, [&] { return lt(o); }); }
Tensor& Tensor::le_(const Tensor& o, Site site) { return write_into(*this, "le_", site, [&] { return le(o); }); }
Tensor& Tensor::gt_(const Tensor& o, Site site) { return write_into(*this, "gt_", site, [&] { return gt(o); }); }
Tensor& Tensor::ge_(const Tensor& o, Site site) { return write_into(*this, "ge_", site, [&] { return ge(o); }); }
Tensor& Tensor::eq_(double o, Site site) { return write_into(*this, "eq_", site, [&] { return eq(o); }); }
Tensor& Tensor::ne_(double o, Site site) { return write_into(*this, "ne_", site, [&] { return ne(o); }); }
Tensor& Tensor::lt_(double o, Site site) { return write_into(*this, "lt_", site, [&] { return lt(o); }); }
Tensor& Tensor::le_(double o, Site site) { return write_into(*this, "le_", site, [&] { return le(o); }); }
Tensor& Tensor::gt_(double o, Site site) { return write_into(*this, "gt_", site, [&] { return gt(o); }); }
Tensor& Tensor::ge_(double o, Site site) { return write_into(*this, "ge_", site, [&] { return ge(o); }); }

Tensor& Tensor::add_(double o, Site site) { return write_into(*this, "add_", site, [&] { return add(o); }); }
Tensor& Tensor::sub_(const Tensor& o, double alpha, Site site) {
  OpScope op("sub_", site);
  check_writable(op, *this);
  return add_(o, -alpha);  // add_'s one pass (axpy), under sub_'s scope
}
Tensor& Tensor::sub_(double o, Site site) { return write_into(*this, "sub_", site, [&] { return sub(o); }); }
Tensor& Tensor::mul_(const Tensor& o, Site site) { return write_into(*this, "mul_", site, [&] { return mul(o); }); }
Tensor& Tensor::div_(const Tensor& o, Site site) { return write_into(*this, "div_", site, [&] { return div(o); }); }
Tensor& Tensor::div_(double o, Site site) { return write_into(*this, "div_", site, [&] { return div(o); }); }
Tensor& Tensor::pow_(double e, Site site) { return write_into(*this, "pow_", site, [&] { return pow(e); }); }
Tensor& Tensor::neg_(Site site) { return write_into(*this, "neg_", site, [&] { return neg(); }); }
Tensor& Tensor::abs_(Site site) { return write_into(*this, "abs_", site, [&] { return abs(); }); }
Tensor& Tensor::exp_(Site site) { return write_into(*this, "exp_", site, [&] { return exp(); }); }
Tensor& Tensor::log_(Site site) { return write_into(*this, "log_", site, [&] { return log(); }); }
Tensor& Tensor::sqrt_(Site site) { return write_into(*this, "sqrt_", site, [&] { return sqrt(); }); }
Tensor& Tensor::relu_(Site site) { return write_into(*this, "relu_", site, [&] { return relu(); }); }
Tensor& Tensor::sigmoid_(Site site) { return write_into(*this, "sigmoid_", site, [&] { return sigmoid(); }); }
Tensor& Tensor::tanh_(Site site) { return write_into(*this, "tanh_", site, [&] { return tanh(); }); }
Tensor& Tensor::clamp_(double low, double high, Site site) {
  return write_into(*this, "clamp_", site, [&] { return clamp(low, high); });
}
Tensor& Tensor::clamp_min_(double low, Site site) {
  return write_into(*this, "clamp_min_", site, [&] { return clamp_min(low); });
}
Tensor& Tensor::clamp_max_(double high, Site site) {
  return write_into(*this, "clamp_max_", site, [&] { return clamp_max(high); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value, Site site) {
  return write_into(*this, "masked_fill_", site, [&] { return masked_fill(mask, value); });
}
// x[..., index[i], ...] = value along dim: a scatter of value over whole slices
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, double value, Site site) {
  return write_into(*this, "index_fill_", site, [&] {
    Tensor picked = reel::index_select(zeros_like(*this), dim, index);
    Tensor marks = reel::index_add(zeros_like(*this), dim, index, ones_like(picked));  // > 0 on the named slices
    return reel::where(reel::gt(marks, 0.5), full_like(*this, value), *this);
  });
}

// The fills as methods refuse what every in-place method refuses (the free uniform_ and
// normal_ are what nn::init calls on parameters under its own no-grad scope).
namespace {
void check_fill(const char* name, const Tensor& t, Site site) {
  OpScope op(name, site);
  check_writable(op, t);
}
}  // namespace
Tensor& Tensor::uniform_(double low, double high, Site site) {
  check_fill("uniform_", *this, site);
  return reel::uniform_(*this, low, high, site);
}
Tensor& Tensor::uniform_(double low, double high, Generator& gen, Site site) {
  check_fill("uniform_", *this, site);
  return reel::uniform_(*this, low, high, gen, site);
}
Tensor& Tensor::normal_(double mean, double std, Site site) {
  check_fill("normal_", *this, site);
  return reel::normal_(*this, mean, std, site);
}
Tensor& Tensor::normal_(double mean, double std, Generator& gen, Site site) {
  check_fill("normal_", *this, site);
  return reel::normal_(*this, mean, std, gen, site);
}

}  // namespace reel
