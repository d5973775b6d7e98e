// Indexing: embedding, index_select, gather, one_hot. Indices are i64; on the CPU
// every index is checked on the host before a kernel reads with it. The gradients
// scatter back with the accumulating kernels (index_add, scatter_add), so repeated
// indices sum their contributions. Each such scatter is a recorded op whose own rule
// is its adjoint, the lookup again, so a create_graph backward stays differentiable.
#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

using Grads = std::vector<Tensor>;

void check_index_tensor(const OpScope& op, const Tensor& x, const Tensor& index) {
  check_defined(op, index, "the index");
  check_same_device(op, x, index);
  check_dtype(op, index, DType::i64, "the index");
}

// Throws unless every index lies in [0, size). `what` names the indexed dim.
void check_range(const OpScope& op, const Tensor& index, int64_t size, const std::string& what) {
  if (!index.device().is_cpu() || index.numel() == 0) return;
  Tensor host = index.contiguous();
  const int64_t* p = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i)
    if (p[i] < 0 || p[i] >= size)
      fail(op.op, fmt::format("index {} (at position {} of the index {}) is out of range for {} of size {}: "
                              "expected 0 to {}", p[i], i, index.shape().str(), what, size, size - 1), op.site);
}

// The index as a contiguous 1-D tensor of its values
Tensor flat_index(const Tensor& index) { return index.reshape({-1}).contiguous(); }

// dW = index_add of g's rows at idx, the padding row (pad >= 0) left at zero. A
// recorded op for a create_graph backward; its rule, the adjoint, gathers gg's rows.
Tensor embedding_weight_grad(const Tensor& g, const Tensor& idx, const Dims& w_shape, int64_t pad) {
  OpScope op("embedding_backward", {});
  Tensor gw = zeros(w_shape, {.dtype = g.dtype(), .device = g.device()});
  const int64_t D = w_shape[1];
  if (idx.numel() && gw.numel()) backend_of(gw).index_add(gw, 0, idx, g.reshape({idx.numel(), D}));
  if (pad >= 0 && gw.numel()) backend_of(gw).fill(make_view(gw, {D}, {1}, pad * D), 0);
  Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        Tensor rows = gg[0];
        if (int64_t pad = n.args<EmbeddingArgs>().padding_idx; pad >= 0) {
          Tensor keep = ones({rows.size(0), 1}, {.dtype = rows.dtype(), .device = rows.device()});
          backend_of(keep).fill(make_view(keep, {1}, {1}, pad), 0);
          rows = mul(rows, keep);
        }
        gi[0] = index_select(rows, 0, n.saved_tensor(0)).reshape(n.input_shape(0));
      }, {&g}, {&gw});
  if (n) {
    n->save(idx);
  }
  keep_args(op, n, EmbeddingArgs{.padding_idx = pad});
  return gw;
}

// dx = g accumulated into zeros of x's shape at idx along d: index_add for index_select
// (gather_op false), scatter_add for gather. Its rule, the adjoint, is the lookup again.
Tensor lookup_input_grad(const Tensor& g, int d, const Tensor& idx, const Dims& x_shape, bool gather_op) {
  OpScope op(gather_op ? "gather_backward" : "index_select_backward", {});
  Tensor gx = zeros(x_shape, {.dtype = g.dtype(), .device = g.device()});
  if (g.numel()) {
    if (gather_op) backend_of(gx).scatter_add(gx, d, idx, g);
    else backend_of(gx).index_add(gx, d, idx, g);
  }
  Node* n = record(op, [](Node& n, const Grads& gg, Grads& gi) {
        Tensor idx = n.saved_tensor(0);
        const LookupGradArgs& a = n.args<LookupGradArgs>();
        gi[0] = a.gather ? gather(gg[0], a.dim, idx) : index_select(gg[0], a.dim, idx);
      }, {&g}, {&gx});
  if (n) {
    n->save(idx);
  }
  keep_args(op, n, LookupGradArgs{.dim = d, .gather = gather_op});
  return gx;
}

}  // namespace

// y[..., :] = W[idx[...], :] for W [V, D]; dW = index_add of g's rows at idx, except
// at padding_idx, whose row gets no gradient
Tensor embedding(const Tensor& weight, const Tensor& indices, EmbeddingOptions opt, Site site) {
  OpScope op("embedding", site);
  check_defined(op, weight, "the weight");
  if (weight.dim() != 2)
    fail(op.op, fmt::format("expected the weight of shape [V, D], got {}", weight.shape().str()), op.site);
  check_index_tensor(op, weight, indices);
  if (indices.dim() >= kMaxDims)
    fail(op.op, fmt::format("indices {} leave no room for the embedding dim (at most {} dims)",
                            indices.shape().str(), kMaxDims), op.site);
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  int64_t pad = -1;
  if (opt.padding_idx) {
    pad = *opt.padding_idx < 0 ? *opt.padding_idx + V : *opt.padding_idx;
    if (pad < 0 || pad >= V)
      fail(op.op, fmt::format("padding_idx {} is out of range for the weight {}: expected {} to {}", *opt.padding_idx,
                              weight.shape().str(), -V, V - 1), op.site);
  }
  check_range(op, indices, V, fmt::format("the rows of the weight {}", weight.shape().str()));
  Tensor idx = flat_index(indices);
  Dims shape = indices.shape();
  shape.push_back(D);
  Tensor y = new_tensor(shape, weight.dtype(), weight.device());
  Dims rows{idx.numel(), D};
  if (y.numel()) backend_of(weight).index_select(make_view(y, rows, contiguous_strides(rows), 0), weight, 0, idx);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = embedding_weight_grad(g[0], n.saved_tensor(0), n.input_shape(0), n.args<EmbeddingArgs>().padding_idx);
      }, {&weight}, {&y});
  if (n) {
    n->save(idx);
  }
  keep_args(op, n, EmbeddingArgs{.padding_idx = pad});
  return y;
}

// y = x with dim restricted to index's entries, in index's order; dx = index_add of g at index
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, Site site) {
  OpScope op("index_select", site);
  check_defined(op, x, "the input");
  check_index_tensor(op, x, index);
  if (x.dim() == 0) fail(op.op, "cannot index a 0-d tensor", op.site);
  if (index.dim() > 1)
    fail(op.op, fmt::format("expected a 1-D index, got {}", index.shape().str()), op.site);
  int d = wrap_dim(op.op, dim, x.dim(), op.site);
  check_range(op, index, x.shape()[d], fmt::format("dim {} of the input {}", d, x.shape().str()));
  Tensor idx = flat_index(index);
  Dims shape = x.shape();
  shape[d] = idx.numel();
  Tensor y = new_tensor(shape, x.dtype(), x.device());
  if (y.numel()) backend_of(x).index_select(y, x, d, idx);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = lookup_input_grad(g[0], int(n.args<DimArgs>().dim), n.saved_tensor(0), n.input_shape(0), false);
      }, {&x}, {&y});
  if (n) {
    n->save(idx);
  }
  keep_args(op, n, DimArgs{.dim = d});
  return y;
}

// y[p] = x[p with p[dim] = index[p]], y has index's shape; dx = scatter_add of g at index
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, Site site) {
  OpScope op("gather", site);
  check_defined(op, x, "the input");
  check_index_tensor(op, x, index);
  if (x.dim() == 0) fail(op.op, "cannot index a 0-d tensor", op.site);
  int d = wrap_dim(op.op, dim, x.dim(), op.site);
  if (index.dim() != x.dim())
    fail(op.op, fmt::format("expected an index with as many dims as the input {}, got index {}", x.shape().str(),
                            index.shape().str()), op.site);
  for (int k = 0; k < x.dim(); ++k)
    if (k != d && index.shape()[k] > x.shape()[k])
      fail(op.op, fmt::format("index {} is larger than the input {} in dim {} (only dim {} may be larger)",
                              index.shape().str(), x.shape().str(), k, d), op.site);
  check_range(op, index, x.shape()[d], fmt::format("dim {} of the input {}", d, x.shape().str()));
  Tensor idx = index.contiguous();
  Tensor y = new_tensor(index.shape(), x.dtype(), x.device());
  if (y.numel()) backend_of(x).gather(y, x, d, idx);
  Node* n = record(op, [](Node& n, const Grads& g, Grads& gi) {
        gi[0] = lookup_input_grad(g[0], int(n.args<DimArgs>().dim), n.saved_tensor(0), n.input_shape(0), true);
      }, {&x}, {&y});
  if (n) {
    n->save(idx);
  }
  keep_args(op, n, DimArgs{.dim = d});
  return y;
}

// y[..., c] = [labels[...] == c] as f32; not differentiable
Tensor one_hot(const Tensor& labels, int64_t num_classes, Site site) {
  OpScope op("one_hot", site);
  check_defined(op, labels, "the labels");
  check_dtype(op, labels, DType::i64, "the labels");
  if (num_classes < 1) fail(op.op, fmt::format("expected num_classes >= 1, got {}", num_classes), op.site);
  if (labels.dim() >= kMaxDims)
    fail(op.op, fmt::format("labels {} leave no room for the class dim (at most {} dims)", labels.shape().str(),
                            kMaxDims), op.site);
  check_range(op, labels, num_classes, "the classes");
  Dims shape = labels.shape();
  shape.push_back(num_classes);
  Tensor y = zeros(shape, {.device = labels.device()});
  if (y.numel()) {
    const int64_t n = labels.numel();
    Tensor idx = flat_index(labels).reshape({n, 1});
    Tensor one = full({1, 1}, 1.0, {.device = labels.device()});
    Dims rows{n, num_classes};
    backend_of(y).scatter_add(make_view(y, rows, contiguous_strides(rows), 0), 1, idx, expand_view(one, {n, 1}));
  }
  return y;
}

}  // namespace reel
