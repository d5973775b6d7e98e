// Writing through an index, out of place: scatter, scatter_add, index_add, index_put.
// Each copies x, then writes or adds src at the indexed positions with one kernel
// (Backend::scatter, scatter_add, index_add). The gradients: x gets g (with the
// overwritten positions zeroed, for scatter), src gets g read back at the same
// positions (gather, index_select): recorded ops, so twice differentiable.
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

// every index in [0, size): checked on the host for CPU tensors (a CUDA kernel reports a fault)
void check_indices(const OpScope& op, const Tensor& index, int64_t size, int d, const Tensor& x) {
  if (!index.device().is_cpu() || index.numel() == 0) return;
  Tensor host = index.contiguous();
  const int64_t* p = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i)
    if (p[i] < 0 || p[i] >= size)
      fail(op.op, fmt::format("index {} (at position {} of the index {}) is out of range for dim {} of {}: expected "
                              "0 to {}", p[i], i, index.shape().str(), d, x.shape().str(), size - 1), op.site);
}

// the checks of scatter and scatter_add; returns the wrapped dim
int check_scatter(const OpScope& op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined(op, x, "the input");
  check_defined(op, index, "the index");
  check_defined(op, src, "the source");
  check_same_device(op, x, index);
  check_same_device(op, x, src);
  check_dtype(op, index, DType::i64, "the index");
  if (x.dim() == 0) fail(op.op, "cannot scatter into a 0-d tensor", op.site);
  int d = wrap_dim(op.op, dim, x.dim(), op.site);
  if (index.dim() != x.dim() || src.dim() != x.dim())
    fail(op.op, fmt::format("expected the input, the index and the source of one rank, got {}, {} and {}",
                            x.shape().str(), index.shape().str(), src.shape().str()), op.site);
  if (src.dtype() != x.dtype())
    fail(op.op, fmt::format("expected the source in the input's dtype, got {} and {}", describe(src), describe(x)),
         op.site);
  for (int k = 0; k < x.dim(); ++k)
    if (index.size(k) > src.size(k) || (k != d && index.size(k) > x.size(k)))
      fail(op.op, fmt::format("the index {} is larger than the source {} or (outside dim {}) the input {}",
                              index.shape().str(), src.shape().str(), d, x.shape().str()), op.site);
  check_indices(op, index, x.size(d), d, x);
  return d;
}

// g read at the index, zero-padded to the source's shape when the index covers only part of it
Tensor source_grad(const Tensor& g, int d, const Tensor& index, const Dims& src_shape) {
  Tensor gs = gather(g, d, index);
  if (gs.shape() == src_shape) return gs;
  std::vector<int64_t> amounts;
  for (int k = int(src_shape.size()) - 1; k >= 0; --k) {
    amounts.push_back(0);
    amounts.push_back(src_shape[k] - gs.size(k));
  }
  return pad(gs, amounts);
}

Tensor scatter_kernel(const OpScope& op, const Tensor& x, int d, const Tensor& index, const Tensor& src, bool add) {
  Tensor y = x.detach().clone();
  if (index.numel()) {
    Tensor idx = index.contiguous();
    if (add) backend_of(y).scatter_add(y, d, idx, src);
    else backend_of(y).scatter(y, d, idx, src);
  }
  (void)op;
  return y;
}

// sum_i idx_i prod_{j > i} size_j over the k leading dims, negative indices wrapped: i64 [M]
Tensor linear_index(const OpScope& op, const Tensor& x, const std::vector<Tensor>& indices, const Dims& ishape) {
  NoGradGuard guard;
  const Options i64{.dtype = DType::i64, .device = x.device()};
  Tensor lin;
  int64_t stride = 1;
  for (int i = int(indices.size()) - 1; i >= 0; --i) {
    const int64_t n = x.size(i);
    Tensor idx = indices[i];
    if (idx.device().is_cpu() && idx.numel()) {
      Tensor host = idx.contiguous();
      const int64_t* p = host.data<int64_t>();
      for (int64_t j = 0; j < host.numel(); ++j)
        if (p[j] < -n || p[j] >= n)
          fail(op.op, fmt::format("index {} is out of range for dim {} of the input {}: expected {} to {}", p[j], i,
                                  x.shape().str(), -n, n - 1), op.site);
    }
    idx = where(lt(idx, 0.0), add(idx, full({}, double(n), i64)), idx);
    Tensor term = mul(idx, full({}, double(stride), i64));
    lin = lin.defined() ? add(lin, term) : term;
    stride *= n;
  }
  return lin.expand(ishape).reshape({-1}).contiguous();
}

}  // namespace

// y = x, then y[p with p[dim] = index[p]] = src[p]; dx = g zeroed where written, dsrc = gather(g)
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Site site) {
  OpScope op("scatter", site);
  int d = check_scatter(op, x, dim, index, src);
  Tensor y = scatter_kernel(op, x, d, index, src, false);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        int d = int(n.args<DimArgs>().dim);
        Tensor idx = n.saved_tensor(0);
        if (n.needs_grad(0)) gi[0] = scatter(g[0], d, idx, 0.0);
        if (n.needs_grad(2)) gi[2] = source_grad(g[0], d, idx, n.input_shape(2));
      }, {&x, &index, &src}, {&y});
  if (n) {
    n->save(index);
  }
  keep_args(op, n, DimArgs{.dim = d});
  return y;
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value, Site site) {
  OpScope op("scatter", site);
  check_defined(op, x, "the input");
  check_defined(op, index, "the index");
  return scatter(x, dim, index, full(index.shape(), value, {.dtype = x.dtype(), .device = x.device()}));
}

// y = x, then y[p with p[dim] = index[p]] += src[p]; dx = g, dsrc = gather(g)
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Site site) {
  OpScope op("scatter_add", site);
  int d = check_scatter(op, x, dim, index, src);
  if (x.dtype() == DType::boolean) fail(op.op, "bool tensors cannot be summed", op.site);
  Tensor y = scatter_kernel(op, x, d, index, src, true);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        int d = int(n.args<DimArgs>().dim);
        if (n.needs_grad(0)) gi[0] = g[0];
        if (n.needs_grad(2)) gi[2] = source_grad(g[0], d, n.saved_tensor(0), n.input_shape(2));
      }, {&x, &index, &src}, {&y});
  if (n) {
    n->save(index);
  }
  keep_args(op, n, DimArgs{.dim = d});
  return y;
}

// y = x, then y.index_select(dim, index) += alpha src; dx = g, dsrc = alpha index_select(g, dim, index)
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, double alpha, Site site) {
  OpScope op("index_add", site);
  check_defined(op, x, "the input");
  check_defined(op, index, "the index");
  check_defined(op, src, "the source");
  check_same_device(op, x, index);
  check_same_device(op, x, src);
  check_dtype(op, index, DType::i64, "the index");
  if (x.dim() == 0) fail(op.op, "cannot index a 0-d tensor", op.site);
  if (x.dtype() == DType::boolean) fail(op.op, "bool tensors cannot be summed", op.site);
  if (index.dim() > 1) fail(op.op, fmt::format("expected a 1-D index, got {}", index.shape().str()), op.site);
  int d = wrap_dim(op.op, dim, x.dim(), op.site);
  Dims expect = x.shape();
  expect[d] = index.numel();
  if (src.shape() != expect || src.dtype() != x.dtype())
    fail(op.op, fmt::format("expected a source {} {} (the input {} with dim {} the index's length), got {}",
                            expect.str(), dtype_name(x.dtype()), x.shape().str(), d, describe(src)), op.site);
  check_indices(op, index, x.size(d), d, x);
  Tensor y = x.detach().clone();
  Tensor idx = index.reshape({-1}).contiguous();
  if (src.numel()) {
    NoGradGuard guard;
    backend_of(y).index_add(y, d, idx, alpha == 1 ? src : mul(src, alpha));
  }
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        if (n.needs_grad(0)) gi[0] = g[0];
        if (n.needs_grad(2)) {
          const IndexAddArgs& a = n.args<IndexAddArgs>();
          Tensor gs = index_select(g[0], a.dim, n.saved_tensor(0));
          gi[2] = a.alpha == 1 ? gs : mul(gs, a.alpha);
        }
      }, {&x, &index, &src}, {&y});
  if (n) {
    n->save(idx);
  }
  keep_args(op, n, IndexAddArgs{.dim = d, .alpha = alpha});
  return y;
}

// The leading dims of x addressed by broadcast index tensors, flattened to one linear
// index into x viewed as [P, rest...]; then index_add (accumulate) or scatter along dim 0.
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate,
                 Site site) {
  OpScope op("index_put", site);
  check_defined(op, x, "the input");
  check_defined(op, values, "the values");
  check_same_device(op, x, values);
  const int k = int(indices.size());
  if (k == 0 || k > x.dim())
    fail(op.op, fmt::format("expected 1 to {} index tensors for the input {}, got {}", x.dim(), x.shape().str(), k),
         op.site);
  Dims ishape;
  for (int i = 0; i < k; ++i) {
    check_defined(op, indices[i], "an index");
    check_same_device(op, x, indices[i]);
    if (indices[i].dtype() != DType::i64)
      fail(op.op, fmt::format("expected i64 index tensors, got {} for index {} (a bool mask: use masked_fill or "
                              "where)", describe(indices[i]), i), op.site);
    ishape = i == 0 ? indices[i].shape() : broadcast_shapes(op.op, ishape, indices[i].shape(), op.site);
  }
  Tensor lin = linear_index(op, x, indices, ishape);  // [M]
  Dims rest;
  int64_t P = 1;
  for (int i = 0; i < x.dim(); ++i) {
    if (i < k) P *= x.size(i);
    else rest.push_back(x.size(i));
  }
  Dims flat{P}, vshape = ishape;
  for (int64_t s : rest) {
    flat.push_back(s);
    vshape.push_back(s);
  }
  if (values.dtype() != x.dtype())
    fail(op.op, fmt::format("expected values in the input's dtype, got {} and {}", describe(values), describe(x)),
         op.site);
  broadcast_shapes(op.op, values.shape(), vshape, op.site);
  Dims rows{lin.numel()};
  for (int64_t s : rest) rows.push_back(s);
  Tensor vals = values.expand(vshape).reshape(rows);
  Tensor xv = x.reshape(flat);
  if (accumulate) return index_add(xv, 0, lin, vals).reshape(x.shape());
  Dims lin_shape = Dims::filled(rows.size(), 1);
  lin_shape[0] = lin.numel();
  return scatter(xv, 0, lin.reshape(lin_shape).expand(rows).contiguous(), vals.contiguous()).reshape(x.shape());
}

}  // namespace reel
