// Reductions over chosen dims (keepdim or not), and Tensor's math methods.
#include <algorithm>
#include <optional>

#include "autocast.h"
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

struct ReducePlan {
  std::vector<int> dims;  // sorted, unique
  Dims kept;  // output shape with keepdim
  Dims out;  // output shape as asked
};

ReducePlan plan_reduce(const OpScope& op, const Tensor& x, const Dims& dims, bool keepdim) {
  ReducePlan p;
  if (dims.empty()) {
    for (int i = 0; i < x.dim(); ++i) p.dims.push_back(i);
  } else {
    for (int64_t d : dims) {
      int w = wrap_dim(op.op, d, x.dim(), op.site);
      if (std::find(p.dims.begin(), p.dims.end(), w) != p.dims.end())
        fail(op.op, fmt::format("dim {} is repeated in {}", w, dims.str()), op.site);
      p.dims.push_back(w);
    }
    std::sort(p.dims.begin(), p.dims.end());
  }
  p.kept = x.shape();
  for (int d : p.dims)
    if (d < x.dim()) p.kept[d] = 1;
  for (int i = 0; i < x.dim(); ++i)
    if (keepdim || std::find(p.dims.begin(), p.dims.end(), i) == p.dims.end()) p.out.push_back(p.kept[i]);
  return p;
}

Tensor reduce_forward(const OpScope& op, ReduceOp kind, const Tensor& x, const ReducePlan& p, DType out_dtype) {
  Tensor kept = new_tensor(p.kept, out_dtype, x.device());
  if (kept.numel()) backend_of(x).reduce(kind, kept, x, p.dims);
  (void)op;
  return make_view(kept, p.out, contiguous_strides(p.out), 0);
}

// g reshaped to the keepdim shape, then broadcast to the input's shape
Tensor expand_back(const Tensor& g, const Node& n) {
  Dims kept = n.inputs[0].shape;
  for (int64_t d : n.args<ReduceArgs>().dims) kept[int(d)] = 1;
  return g.reshape(kept).expand(n.inputs[0].shape);
}

ReduceArgs reduce_args(const ReducePlan& p) {
  ReduceArgs a;
  for (int d : p.dims) a.dims.push_back(d);
  return a;
}

}  // namespace

// y = sum of x over dims; dx = g broadcast back
Tensor sum(const Tensor& x_in, const Dims& dims, bool keepdim, Site site) {
  OpScope op("sum", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  ReducePlan p = plan_reduce(op, x, dims, keepdim);
  DType dt = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor y = reduce_forward(op, ReduceOp::sum, x.dtype() == DType::boolean ? cast(x, DType::i64) : x, p, dt);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) { gi[0] = expand_back(g[0], n); }, {&x}, {&y});
  keep_args(op, n, reduce_args(p));
  return y;
}

// y = mean of x over dims; dx = g / count broadcast back
Tensor mean(const Tensor& x_in, const Dims& dims, bool keepdim, Site site) {
  OpScope op("mean", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  ReducePlan p = plan_reduce(op, x, dims, keepdim);
  Tensor y = reduce_forward(op, ReduceOp::mean, x, p, x.dtype());
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        double count = double(numel_of(n.inputs[0].shape)) / double(std::max<int64_t>(numel_of(n.outputs[0].shape), 1));
        gi[0] = expand_back(mul(g[0], 1.0 / count), n);
      }, {&x}, {&y});
  keep_args(op, n, reduce_args(p));
  return y;
}

// y = product over dims; dx = g y / x (x without zeros)
Tensor prod(const Tensor& x_in, const Dims& dims, bool keepdim, Site site) {
  OpScope op("prod", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  ReducePlan p = plan_reduce(op, x, dims, keepdim);
  Tensor y = reduce_forward(op, ReduceOp::prod, x, p, x.dtype());
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0), y = n.saved_tensor(1);
        gi[0] = div(mul(expand_back(g[0], n), expand_back(y, n)), x);
      }, {&x}, {&y});
  if (n) {
    n->save(x);
    n->save(y);
  }
  keep_args(op, n, reduce_args(p));
  return y;
}

namespace {
// A max, min or arg-extremum has no value over zero elements: as PyTorch, each reduced
// dim must be non-empty (dims = all of an empty tensor is an Error too), while an empty
// kept dim just gives an empty result.
void check_reduced_nonempty(const OpScope& op, const Tensor& x, const ReducePlan& p, bool all) {
  if (x.numel() != 0) return;
  if (all)
    fail(op.op, fmt::format("the input {} has no elements: name the dims to reduce (an empty result needs a "
                            "non-empty reduced dim)", x.shape().str()), op.site);
  for (int d : p.dims)
    if (x.shape()[d] == 0)
      fail(op.op, fmt::format("expected reduced dim {} to be non-empty, got the input {}", d, x.shape().str()),
           op.site);
}

// y = max (or min) over dims; dx = g at the extremum, split evenly among ties. A group
// holding NaN has y = NaN, and its gradient goes to its NaN elements only (split among
// them), as PyTorch's max()/min() (x == y alone would match nothing there).
Tensor extremum(const char* name, ReduceOp kind, const Tensor& x, const Dims& dims, bool keepdim, const Site& site) {
  OpScope op(name, site);
  check_defined(op, x, "the input");
  ReducePlan p = plan_reduce(op, x, dims, keepdim);
  check_reduced_nonempty(op, x, p, dims.empty());
  Tensor y = reduce_forward(op, kind, x, p, x.dtype());
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        Tensor x = n.saved_tensor(0), ye = expand_back(n.saved_tensor(1), n);
        Tensor hit = logical_or(eq(x, ye), logical_and(ne(x, x), ne(ye, ye))).to(g[0].dtype());
        // ties share the gradient: divide by the number of extrema in each reduced group
        Tensor ties = sum(hit, n.args<ReduceArgs>().dims, true).expand(n.inputs[0].shape);
        gi[0] = div(mul(hit, expand_back(g[0], n)), ties);
      }, {&x}, {&y});
  if (n) {
    n->save(x);
    n->save(y);
  }
  keep_args(op, n, reduce_args(p));
  return y;
}

Tensor arg_extremum(const char* name, ReduceOp kind, const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                    const Site& site) {
  OpScope op(name, site);
  check_defined(op, x, "the input");
  if (!dim) {  // over all elements: the flat index into x's row-major order
    check_reduced_nonempty(op, x, plan_reduce(op, x, {}, false), true);
    Tensor flat = x.detach().reshape({x.numel()});
    return reduce_forward(op, kind, flat, plan_reduce(op, flat, Dims{0}, false), DType::i64);
  }
  ReducePlan p = plan_reduce(op, x, Dims{*dim}, keepdim);
  check_reduced_nonempty(op, x, p, false);
  return reduce_forward(op, kind, x, p, DType::i64);
}
}  // namespace

Tensor amax(const Tensor& x, const Dims& dims, bool keepdim, Site site) {
  return extremum("amax", ReduceOp::max, x, dims, keepdim, site);
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim, Site site) {
  return extremum("amin", ReduceOp::min, x, dims, keepdim, site);
}

// index of the largest value along dim (the first NaN, else the first on ties); no gradient
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim, Site site) {
  return arg_extremum("argmax", ReduceOp::argmax, x, dim, keepdim, site);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim, Site site) {
  return arg_extremum("argmin", ReduceOp::argmin, x, dim, keepdim, site);
}
Tensor argmax(const Tensor& x, Site site) { return arg_extremum("argmax", ReduceOp::argmax, x, {}, false, site); }
Tensor argmin(const Tensor& x, Site site) { return arg_extremum("argmin", ReduceOp::argmin, x, {}, false, site); }

// var = sum((x - mean)^2) / max(count - correction, 0), composed from differentiable ops
// (the debug tools show it as their example of a composite). Too few elements divide by
// 0, as PyTorch: 0/0 = nan for one element (or none), and a spread group over 0 is inf.
Tensor var(const Tensor& x_in, const Dims& dims, int64_t correction, bool keepdim, Site site) {
  OpScope op("var", site);
  const Tensor x = autocast_f32(x_in);
  check_defined(op, x, "the input");
  check_floating(op, x, "the input");
  if (correction < 0) fail("var", fmt::format("expected correction >= 0, got {}", correction), op.site);
  ReducePlan p = plan_reduce(op, x, dims, keepdim);
  int64_t count = 1;
  for (int d : p.dims) count *= x.shape()[d];
  Dims d;
  for (int v : p.dims) d.push_back(v);
  Tensor centered = sub(x, mean(x, d, true));
  return div(sum(square(centered), d, keepdim), double(std::max<int64_t>(count - correction, 0)));
}

// y = g summed over the dims that broadcasting added or stretched, to `shape`
Tensor sum_to(const Tensor& g, const Dims& shape, Site site) {
  if (g.shape() == shape) return g;
  OpScope op("sum_to", site);
  int lead = g.dim() - shape.size();
  if (lead < 0) fail("sum_to", fmt::format("cannot sum {} down to the larger shape {}", g.shape().str(), shape.str()), op.site);
  Dims dims;
  for (int i = 0; i < g.dim(); ++i) {
    if (i < lead) dims.push_back(i);
    else if (shape[i - lead] == 1 && g.shape()[i] != 1) dims.push_back(i);
    else if (shape[i - lead] != g.shape()[i])
      fail("sum_to", fmt::format("cannot sum {} down to {}", g.shape().str(), shape.str()), op.site);
  }
  if (dims.empty()) return g.reshape(shape);
  return sum(g, dims, true).reshape(shape);
}

// ---- Tensor's math methods
Tensor Tensor::sum(Site site) const { return reel::sum(*this, {}, false, site); }
Tensor Tensor::sum(const Dims& dims, bool keepdim, Site site) const { return reel::sum(*this, dims, keepdim, site); }
Tensor Tensor::mean(Site site) const { return reel::mean(*this, {}, false, site); }
Tensor Tensor::mean(const Dims& dims, bool keepdim, Site site) const { return reel::mean(*this, dims, keepdim, site); }
Tensor Tensor::max(Site site) const { return reel::amax(*this, {}, false, site); }
Tensor Tensor::max(int64_t dim, bool keepdim, Site site) const { return reel::amax(*this, Dims{dim}, keepdim, site); }
Tensor Tensor::argmax(int64_t dim, bool keepdim, Site site) const { return reel::argmax(*this, dim, keepdim, site); }
Tensor Tensor::exp(Site site) const { return reel::exp(*this, site); }
Tensor Tensor::log(Site site) const { return reel::log(*this, site); }
Tensor Tensor::sqrt(Site site) const { return reel::sqrt(*this, site); }
Tensor Tensor::abs(Site site) const { return reel::abs(*this, site); }
Tensor Tensor::relu(Site site) const { return reel::relu(*this, site); }
Tensor Tensor::sigmoid(Site site) const { return reel::sigmoid(*this, site); }
Tensor Tensor::tanh(Site site) const { return reel::tanh(*this, site); }
Tensor Tensor::pow(double exponent, Site site) const { return reel::pow(*this, exponent, site); }
Tensor Tensor::matmul(const Tensor& other, Site site) const { return reel::matmul(*this, other, site); }

}  // namespace reel
