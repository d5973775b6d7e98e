// Joining and splitting: cat and stack copy into one new tensor (each input's
// gradient is a view of its slice of g); split and chunk return views, recorded as one
// node whose gradient is the parts' gradients joined (PyTorch's SplitBackward).
#include "inplace.h"
#include "op_support.h"
#include "ops.h"

namespace reel {

// Every tensor defined, one dtype, one device, one rank; all shapes equal except in
// dim `except` (-1: all shapes equal).
void check_joinable(const OpScope& op, const std::vector<Tensor>& ts, int except) {
  if (ts.empty()) fail(op.op, "expected at least one tensor, got an empty list", op.site);
  for (size_t i = 0; i < ts.size(); ++i)
    if (!ts[i].defined()) fail(op.op, fmt::format("tensor {} of {} is undefined", i, ts.size()), op.site);
  const Tensor& first = ts[0];
  for (size_t i = 1; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    check_same_device(op, first, t);
    if (t.dtype() != first.dtype())
      fail(op.op, fmt::format("expected one dtype, got tensor 0 {} and tensor {} {}; convert with .to()",
                              describe(first), i, describe(t)), op.site);
    bool same = t.dim() == first.dim();
    for (int k = 0; same && k < t.dim(); ++k) same = k == except || t.shape()[k] == first.shape()[k];
    if (!same) {
      std::string rule = except >= 0 ? fmt::format("in every dim but dim {}", except) : std::string("exactly");
      fail(op.op, fmt::format("expected shapes that agree {}, got tensor 0 {} and tensor {} {}", rule,
                              first.shape().str(), i, t.shape().str()), op.site);
    }
  }
}

namespace {

// ts joined along existing dim d, after check_joinable
Tensor cat_checked(const OpScope& op, const std::vector<Tensor>& ts, int d) {
  const Tensor& first = ts[0];
  Dims shape = first.shape();
  shape[d] = 0;
  for (const Tensor& t : ts) shape[d] += t.shape()[d];
  Tensor y = new_tensor(shape, first.dtype(), first.device());
  int64_t start = 0;
  for (const Tensor& t : ts) {
    if (t.numel()) {
      Tensor part = make_view(y, t.shape(), y.strides(), start * y.strides()[d]);
      backend_of(y).copy(part, t);
    }
    start += t.shape()[d];
  }
  std::vector<const Tensor*> inputs;
  for (const Tensor& t : ts) inputs.push_back(&t);
  Node* n = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        int d = int(n.args<DimArgs>().dim);
        int64_t start = 0;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          int64_t len = n.input_shape(i)[d];
          if (n.needs_grad(i)) gi[i] = g[0].narrow(d, start, len);
          start += len;
        }
      }, inputs, {&y});
  keep_args(op, n, DimArgs{.dim = d});
  return y;
}

}  // namespace

// y = [t0; t1; ...] along dim; dt_i = g[offset_i : offset_i + size_i] along dim
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, Site site) {
  OpScope op("cat", site);
  if (!tensors.empty() && tensors[0].defined() && tensors[0].dim() == 0)
    fail(op.op, "cannot concatenate 0-d tensors; use stack", op.site);
  int d = tensors.empty() || !tensors[0].defined() ? 0 : wrap_dim(op.op, dim, tensors[0].dim(), op.site);
  check_joinable(op, tensors, d);
  return cat_checked(op, tensors, d);
}

// y = the tensors joined along a new dim: cat of each unsqueezed at dim
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim, Site site) {
  OpScope op("stack", site);
  check_joinable(op, tensors, -1);
  if (tensors[0].dim() + 1 > kMaxDims)
    fail(op.op, fmt::format("stacking tensors {} would need more than {} dims", tensors[0].shape().str(), kMaxDims),
         op.site);
  int d = wrap_dim(op.op, dim, tensors[0].dim() + 1, op.site);
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat_checked(op, parts, d);
}

// Views of x along dim of the given sizes (after the callers' checks), recorded as one
// node: its rule joins the parts' gradients with one cat (a part without one gets the
// engine's zeros), where a node a part would zero-fill all of x and add the parts up
// (MultiheadAttention's q, k, v: three [B, T, 3E] fills and two adds a layer).
std::vector<Tensor> split_views(const OpScope& op, const Tensor& x, int d, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> parts;
  if (sizes.empty()) return parts;
  parts.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    Dims shape = x.shape();
    shape[d] = s;
    parts.push_back(make_view(x, shape, x.strides(), x.offset() + start * x.strides()[d]));
    start += s;
  }
  std::vector<Tensor*> outputs;
  for (Tensor& p : parts) outputs.push_back(&p);
  Node* n = record(op, [](Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
        gi[0] = g.size() == 1 ? g[0] : cat(g, n.args<DimArgs>().dim);
      }, std::vector<const Tensor*>{&x}, outputs);
  keep_args(op, n, DimArgs{.dim = d});
  for (Tensor& p : parts) mark_view(p, x);
  return parts;
}

// Views of x along dim, each split_size long (the last one shorter when it does not divide)
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim, Site site) {
  OpScope op("split", site);
  check_defined(op, x, "the input");
  if (x.dim() == 0) fail(op.op, "cannot split a 0-d tensor", op.site);
  int d = wrap_dim(op.op, dim, x.dim(), op.site);
  const int64_t n = x.shape()[d];
  if (split_size < 0 || (split_size == 0 && n != 0))
    fail(op.op, fmt::format("expected a positive split_size, got {} for dim {} of the input {}", split_size, d,
                            x.shape().str()), op.site);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  if (n == 0) sizes.push_back(0);
  return split_views(op, x, d, sizes);
}

// split into `chunks` views of ceil(size / chunks) along dim (fewer when they run out, as PyTorch)
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim, Site site) {
  OpScope op("chunk", site);
  check_defined(op, x, "the input");
  if (chunks < 1) fail(op.op, fmt::format("expected chunks >= 1, got {}", chunks), op.site);
  if (x.dim() == 0) fail(op.op, "cannot chunk a 0-d tensor", op.site);
  int d = wrap_dim(op.op, dim, x.dim(), op.site);
  const int64_t n = x.shape()[d];
  return split(x, n == 0 ? 0 : (n + chunks - 1) / chunks, d, site);
}

}  // namespace reel
