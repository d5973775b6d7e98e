// Tensor's in-place methods under libtorch's spellings (eq_, sub_, clamp_, uniform_, ...).
// Each is the out-of-place op written into this tensor (autograd/inplace.h): off the tape
// in one write when nothing requires grad, else recorded as this tensor's new history.
// The result must have this tensor's shape (PyTorch refuses x.add_(y) where the
// broadcast would grow x).
#include "inplace.h"
#include "ops.h"

namespace reel {

namespace {
// compute() off the tape, checked against t's shape (an in-place op cannot grow its
// tensor), cast to t's dtype and copied into t: the two-pass form of an in-place write.
template <typename F>
void copy_result_into(Tensor& t, const char* name, const OpScope& op, F compute) {
  Tensor r;
  {
    NoGradGuard off_tape;
    r = compute();
  }
  if (!(r.shape() == t.shape()))
    fail(name, fmt::format("the result's shape {} is not the tensor's {}; an in-place op cannot grow its "
                           "tensor", r.shape().str(), t.shape().str()), op.site);
  if (r.dtype() != t.dtype()) r = cast(r, t.dtype());
  if (t.numel()) backend_of(t).copy(t, r);
}

// Writes `compute()` into t as t's dtype: computed off the tape and copied when nothing
// requires grad, else computed on the tape and made t's history.
template <typename F>
Tensor& write_into(Tensor& t, const char* name, Site site, std::initializer_list<const Tensor*> operands, F compute) {
  return run_inplace(
      name, site, t, operands, [&](const OpScope& op) { copy_result_into(t, name, op, compute); },
      [&](const OpScope&) { return compute(); });
}

// t = t (op) o in one pass when nothing is recorded: o broadcast to t's shape (a stride-0
// view), both floating and of one dtype, on the CPU, and o sharing t's memory only as t
// itself (a partial overlap would read elements already written). The same per-element
// operation as the out-of-place op, so the same bits. Returns false where it does not
// apply: the caller computes into a fresh tensor and copies (two passes, a new buffer:
// 10M-float mul_ took 8 ms where add_ took 1.6).
bool binary_in_place(BinaryOp kind, Tensor& t, const Tensor& o) {
  if (!t.device().is_cpu() || !(o.device() == t.device()) || o.dtype() != t.dtype() || !is_floating(t.dtype()) ||
      o.dim() > t.dim() || t.numel() == 0)
    return false;
  for (int i = 1; i <= o.dim(); ++i)
    if (o.size(-i) != t.size(-i) && o.size(-i) != 1) return false;  // grows t: the slow path says why
  if (o.storage().get() == t.storage().get() &&
      !(o.offset() == t.offset() && o.shape() == t.shape() && o.strides() == t.strides()))
    return false;
  backend_of(t).binary(kind, t, t, expand_view(o, t.shape()));
  return true;
}

// mul_ and div_ by a tensor: one pass where binary_in_place applies, else two
template <typename F>
Tensor& binary_into(Tensor& t, const char* name, Site site, const Tensor& o, BinaryOp kind, F compute) {
  return run_inplace(
      name, site, t, {&o},
      [&](const OpScope& op) {
        if (!binary_in_place(kind, t, o)) copy_result_into(t, name, op, compute);
      },
      [&](const OpScope&) { return compute(); });
}
}  // namespace

Tensor& Tensor::eq_(const Tensor& o, Site site) { return write_into(*this, "eq_", site, {&o}, [&] { return eq(o); }); }
Tensor& Tensor::ne_(const Tensor& o, Site site) { return write_into(*this, "ne_", site, {&o}, [&] { return ne(o); }); }
Tensor& Tensor::lt_(const Tensor& o, Site site) { return write_into(*this, "lt_", site, {&o}, [&] { return lt(o); }); }
Tensor& Tensor::le_(const Tensor& o, Site site) { return write_into(*this, "le_", site, {&o}, [&] { return le(o); }); }
Tensor& Tensor::gt_(const Tensor& o, Site site) { return write_into(*this, "gt_", site, {&o}, [&] { return gt(o); }); }
Tensor& Tensor::ge_(const Tensor& o, Site site) { return write_into(*this, "ge_", site, {&o}, [&] { return ge(o); }); }
Tensor& Tensor::eq_(double o, Site site) { return write_into(*this, "eq_", site, {}, [&] { return eq(o); }); }
Tensor& Tensor::ne_(double o, Site site) { return write_into(*this, "ne_", site, {}, [&] { return ne(o); }); }
Tensor& Tensor::lt_(double o, Site site) { return write_into(*this, "lt_", site, {}, [&] { return lt(o); }); }
Tensor& Tensor::le_(double o, Site site) { return write_into(*this, "le_", site, {}, [&] { return le(o); }); }
Tensor& Tensor::gt_(double o, Site site) { return write_into(*this, "gt_", site, {}, [&] { return gt(o); }); }
Tensor& Tensor::ge_(double o, Site site) { return write_into(*this, "ge_", site, {}, [&] { return ge(o); }); }

Tensor& Tensor::add_(double o, Site site) { return write_into(*this, "add_", site, {}, [&] { return add(o); }); }
Tensor& Tensor::sub_(const Tensor& o, double alpha, Site site) {
  return run_inplace(
      "sub_", site, *this, {&o}, [&](const OpScope& op) { add_scaled_unrecorded(op, *this, o, -alpha); },
      [&](const OpScope&) { return alpha == 1.0 ? reel::sub(*this, o) : reel::sub(*this, o, alpha); });
}
Tensor& Tensor::sub_(double o, Site site) { return write_into(*this, "sub_", site, {}, [&] { return sub(o); }); }
Tensor& Tensor::mul_(const Tensor& o, Site site) {
  return binary_into(*this, "mul_", site, o, BinaryOp::mul, [&] { return mul(o); });
}
Tensor& Tensor::div_(const Tensor& o, Site site) {
  return binary_into(*this, "div_", site, o, BinaryOp::div, [&] { return div(o); });
}
Tensor& Tensor::div_(double o, Site site) { return write_into(*this, "div_", site, {}, [&] { return div(o); }); }
Tensor& Tensor::pow_(double e, Site site) { return write_into(*this, "pow_", site, {}, [&] { return pow(e); }); }
Tensor& Tensor::neg_(Site site) { return write_into(*this, "neg_", site, {}, [&] { return neg(); }); }
Tensor& Tensor::abs_(Site site) { return write_into(*this, "abs_", site, {}, [&] { return abs(); }); }
Tensor& Tensor::exp_(Site site) { return write_into(*this, "exp_", site, {}, [&] { return exp(); }); }
Tensor& Tensor::log_(Site site) { return write_into(*this, "log_", site, {}, [&] { return log(); }); }
Tensor& Tensor::sqrt_(Site site) { return write_into(*this, "sqrt_", site, {}, [&] { return sqrt(); }); }
Tensor& Tensor::relu_(Site site) { return write_into(*this, "relu_", site, {}, [&] { return relu(); }); }
Tensor& Tensor::sigmoid_(Site site) { return write_into(*this, "sigmoid_", site, {}, [&] { return sigmoid(); }); }
Tensor& Tensor::tanh_(Site site) { return write_into(*this, "tanh_", site, {}, [&] { return tanh(); }); }
Tensor& Tensor::clamp_(double low, double high, Site site) {
  return write_into(*this, "clamp_", site, {}, [&] { return clamp(low, high); });
}
Tensor& Tensor::clamp_min_(double low, Site site) {
  return write_into(*this, "clamp_min_", site, {}, [&] { return clamp_min(low); });
}
Tensor& Tensor::clamp_max_(double high, Site site) {
  return write_into(*this, "clamp_max_", site, {}, [&] { return clamp_max(high); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value, Site site) {
  return write_into(*this, "masked_fill_", site, {&mask}, [&] { return masked_fill(mask, value); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& value, Site site) {
  return write_into(*this, "masked_fill_", site, {&mask, &value}, [&] { return masked_fill(mask, value); });
}
// x[..., index[i], ...] = value along dim: a scatter of value over whole slices
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, double value, Site site) {
  return write_into(*this, "index_fill_", site, {&index}, [&] {
    Tensor marks;
    {
      NoGradGuard constant;  // which slices are named does not depend on x
      Tensor picked = reel::index_select(zeros_like(*this), dim, index);
      marks = reel::gt(reel::index_add(zeros_like(*this), dim, index, ones_like(picked)), 0.5);
    }
    return reel::where(marks, full_like(*this, value), *this);
  });
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src, Site site) {
  return write_into(*this, "scatter_", site, {&index, &src}, [&] { return scatter(dim, index, src); });
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value, Site site) {
  return write_into(*this, "scatter_", site, {&index}, [&] { return scatter(dim, index, value); });
}
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src, Site site) {
  return write_into(*this, "scatter_add_", site, {&index, &src}, [&] { return scatter_add(dim, index, src); });
}
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& src, double alpha, Site site) {
  return write_into(*this, "index_add_", site, {&index, &src}, [&] { return index_add(dim, index, src, alpha); });
}
Tensor& Tensor::index_put_(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate, Site site) {
  return write_into(*this, "index_put_", site, {&values}, [&] { return index_put(indices, values, accumulate); });
}

// The random fills as methods: refused and recorded as every in-place method (no gradient
// reaches the old values); the free uniform_ and normal_ are what nn::init calls on
// parameters under its own no-grad scope.
namespace {
template <typename Fill>
Tensor& fill_random(Tensor& t, const char* name, Site site, Fill fill) {
  return run_inplace(
      name, site, t, {}, [&](const OpScope&) { fill(t); },
      [&](const OpScope&) {
        Tensor fresh = empty_like(t);
        fill(fresh);
        return fresh;
      },
      /*fills=*/true);
}
}  // namespace
Tensor& Tensor::uniform_(double low, double high, Site site) {
  return fill_random(*this, "uniform_", site, [&](Tensor& t) { reel::uniform_(t, low, high, site); });
}
Tensor& Tensor::uniform_(double low, double high, Generator& gen, Site site) {
  return fill_random(*this, "uniform_", site, [&](Tensor& t) { reel::uniform_(t, low, high, gen, site); });
}
Tensor& Tensor::normal_(double mean, double std, Site site) {
  return fill_random(*this, "normal_", site, [&](Tensor& t) { reel::normal_(t, mean, std, site); });
}
Tensor& Tensor::normal_(double mean, double std, Generator& gen, Site site) {
  return fill_random(*this, "normal_", site, [&](Tensor& t) { reel::normal_(t, mean, std, gen, site); });
}

}  // namespace reel
