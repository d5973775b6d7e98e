// In-place ops on the tape (see inplace.h): the checks, the rebase of a tensor's history,
// the CopySlices node of a write through a view, and the two region ops its rules use.
#include "inplace.h"

#include <memory>

#include "ops.h"
#include "tape.h"

namespace reel {

namespace {

// Where a view's elements sit among its root's: both geometries over the root's storage.
struct RegionGeometry {
  Dims base_shape, base_strides;
  int64_t base_offset = 0;
  Dims view_shape, view_strides;
  int64_t view_offset = 0;
  // elements of a buffer that holds the root laid out as in its storage
  int64_t span() const {
    int64_t last = base_offset;
    for (int i = 0; i < base_shape.size(); ++i) {
      if (base_shape[i] == 0) return 0;
      last += (base_shape[i] - 1) * base_strides[i];
    }
    return last + 1;
  }
};
using Geometry = std::shared_ptr<const RegionGeometry>;

// What a region node keeps: the geometry, and libtorch's name for the node.
struct RegionState : CustomState {
  Geometry geo;
  const char* libtorch_name;
  RegionState(Geometry g, const char* n) : geo(std::move(g)), libtorch_name(n) {}
  std::string node_name() const override { return libtorch_name; }
};

const RegionGeometry& geometry_of(const Node& n) { return *static_cast<const RegionState&>(*n.custom).geo; }
Geometry shared_geometry(const Node& n) { return static_cast<const RegionState&>(*n.custom).geo; }

// t (root-shaped) laid out with the root's strides: the tensor holding it and the shift
// from the root's storage offsets to that tensor's. A copy only when t's strides differ.
struct Laid {
  Tensor holder;
  int64_t shift;
};
Laid lay_out(const Tensor& t, const RegionGeometry& g, bool fresh) {
  if (!fresh && t.strides() == g.base_strides) return {t, t.offset() - g.base_offset};
  Tensor flat = new_tensor({g.span()}, t.dtype(), t.device());
  if (t.numel()) backend_of(t).copy(storage_view(flat, g.base_shape, g.base_strides, g.base_offset), t);
  return {flat, 0};
}

Tensor region_of(const Tensor& t, const Geometry& geo, Site site);
Tensor with_region(const Tensor& t, const Tensor& src, const Geometry& geo, Site site);

// y = t's values at the view's elements (t shaped as the root); dy/dt scatters back
void region_of_backward(Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
  const RegionGeometry& geo = geometry_of(n);
  Tensor zero = zeros(geo.base_shape, {.dtype = g[0].dtype(), .device = g[0].device()});
  gi[0] = with_region(zero, g[0], shared_geometry(n), n.site);
}

Tensor region_of(const Tensor& t, const Geometry& geo, Site site) {
  OpScope op("as_strided", site);
  Laid l = lay_out(t, *geo, false);
  Tensor out = new_tensor(geo->view_shape, t.dtype(), t.device());
  if (out.numel())
    backend_of(t).copy(out, storage_view(l.holder, geo->view_shape, geo->view_strides, geo->view_offset + l.shift));
  if (Node* n = record(op, region_of_backward, {&t}, {&out}))
    n->custom = std::make_unique<RegionState>(geo, "AsStridedBackward0");
  return out;
}

// y = t with its view elements replaced by src's; dy/dt = g off the view, dy/dsrc = g on it
void with_region_backward(Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
  const RegionGeometry& geo = geometry_of(n);
  if (n.needs_grad(0))
    gi[0] = with_region(g[0], zeros(geo.view_shape, {.dtype = g[0].dtype(), .device = g[0].device()}),
                        shared_geometry(n), n.site);
  if (n.needs_grad(1)) gi[1] = region_of(g[0], shared_geometry(n), n.site);
}

Tensor with_region(const Tensor& t, const Tensor& src, const Geometry& geo, Site site) {
  OpScope op("as_strided_scatter", site);
  Laid l = lay_out(t, *geo, true);
  if (src.numel())
    backend_of(t).copy(storage_view(l.holder, geo->view_shape, geo->view_strides, geo->view_offset), src);
  Tensor out = storage_view(l.holder, geo->base_shape, geo->base_strides, geo->base_offset);
  if (Node* n = record(op, with_region_backward, {&t, &src}, {&out}))
    n->custom = std::make_unique<RegionState>(geo, "AsStridedScatterBackward0");
  return out;
}

Geometry geometry(const Tensor& root, const Tensor& view) {
  auto g = std::make_shared<RegionGeometry>();
  g->base_shape = root.shape();
  g->base_strides = root.strides();
  g->base_offset = root.offset();
  g->view_shape = view.shape();
  g->view_strides = view.strides();
  g->view_offset = view.offset();
  return g;
}

// A second handle on t's values and history, so a node can take t's old history as its
// input while t itself becomes the node's output.
Tensor alias_of(const Tensor& t) {
  auto impl = make_ref<TensorImpl>();
  const TensorImpl& src = *t.impl();
  impl->shape = src.shape;
  impl->strides = src.strides;
  impl->offset = src.offset;
  impl->dtype = src.dtype;
  impl->storage = src.storage;
  impl->requires_grad = src.requires_grad;
  impl->grad_fn = src.grad_fn;
  impl->output_nr = src.output_nr;
  return Tensor(std::move(impl));
}

void link_view_to_root(const Tensor& view, Site site) {
  TensorImpl* v = view.impl();
  Tensor root(v->view_base);
  v->base_history = root.impl()->history;
  OpScope op("as_strided", site);
  Tensor out = view;
  // a view remade from its root is region_of without the copy: the rule is the same
  if (Node* n = record(op, region_of_backward, {&root}, {&out}))
    n->custom = std::make_unique<RegionState>(geometry(root, view), "AsStridedBackward0");
}

// y = the new value, x = the old one it replaced: no gradient to x (its values are gone),
// the identity to the new value when it has a history (copy_ of a tensor as it is).
void replace_backward(Node& n, const std::vector<Tensor>& g, std::vector<Tensor>& gi) {
  if (n.needs_grad(1)) gi[1] = g[0];
}

}  // namespace

uint64_t tape_next_seq() { return this_thread_tape().next_seq(); }

void mark_view(Tensor& view, const Tensor& of) {
  TensorImpl* v = view.impl();
  TensorImpl* src = of.impl();
  TensorImpl* root = src->view_base ? src->view_base.get() : src;
  if (v == root) return;
  v->view_base = Ref<TensorImpl>(root);
  // A view of a stale view is current only once its source is: made from the source's
  // history, it keeps the base_history the source had.
  v->base_history = src->view_base ? src->base_history : root->history;
}

void refresh_view(const Tensor& t) {
  if (!t.impl()->stale_view()) return;
  link_view_to_root(t, SiteScope::current(Site{nullptr, 0}));
}

void check_inplace(const OpScope& op, const Tensor& self, bool fills) {
  check_defined(op, self, "the tensor");
  if (grad_enabled() && self.requires_grad() && !self.impl()->view_base && self.is_leaf())
    fail(op.op, fmt::format("a leaf tensor {} that requires grad is written in place while grad mode is on; "
                            "wrap the update in reel::NoGradGuard", self.shape().str()), op.site);
  if (fills) return;
  for (int i = 0; i < self.dim(); ++i)
    if (self.strides()[i] == 0 && self.shape()[i] > 1)
      fail(op.op, fmt::format("more than one element of the written-to tensor {} (strides {}) refers to one memory "
                              "location, as after expand(); clone() it before writing in place",
                              self.shape().str(), self.strides().str()), op.site);
}

void check_view_of_leaf(const OpScope& op, const Tensor& self) {
  const TensorImpl* root = self.impl()->view_base.get();
  if (root && root->requires_grad && !root->grad_fn)
    fail(op.op, fmt::format("the tensor {} is a view of a leaf tensor {} that requires grad, and is written in "
                            "place while grad mode is on; write the leaf under reel::NoGradGuard, or clone() "
                            "the view first", self.shape().str(), root->shape.str()), op.site);
}

bool inplace_records(const Tensor& self, std::initializer_list<const Tensor*> operands) {
  if (!grad_enabled()) return false;
  if (self.requires_grad()) return true;
  for (const Tensor* t : operands)
    if (t->requires_grad()) return true;
  return false;
}

Tensor& rebase_inplace(const OpScope& op, Tensor& self, Tensor result, uint64_t first,
                       std::initializer_list<const Tensor*> operands) {
  if (!(result.shape() == self.shape()))
    fail(op.op, fmt::format("the result's shape {} is not the tensor's {}; an in-place op cannot grow its tensor",
                            result.shape().str(), self.shape().str()), op.site);
  if (result.dtype() != self.dtype()) {
    if (is_floating(result.dtype()) && !is_floating(self.dtype()))
      fail(op.op, fmt::format("the result is {} and cannot be written into the tensor {} in place",
                              dtype_name(result.dtype()), describe(self)), op.site);
    result = result.to(self.dtype());
  }
  if (!(result.device() == self.device())) result = result.to(self.device());

  // A rule that reads self's old value (mul_'s, div_'s, pow_'s) keeps a copy of it, linked
  // to self's old history; an operand aliasing self keeps its version check (PyTorch errs).
  const std::vector<Ref<Node>> made_here = this_thread_tape().entries_since(first);
  for (const Ref<Node>& n : made_here) {
    for (SavedTensor& s : n->saved) {
      if (!s.tensor.defined() || s.output_nr >= 0 || s.tensor.storage().get() != self.storage().get()) continue;
      bool operand = false;
      for (const Tensor* t : operands) operand = operand || t->impl() == s.tensor.impl();
      if (operand) {
        // the same storage and version, checked at backward; no link to self's root, which
        // now owns this node (a view's root link here would be a reference cycle)
        if (s.tensor.impl()->view_base) s.tensor = alias_of(s.tensor);
        continue;
      }
      Tensor keep = new_in_layout_of(s.tensor, s.tensor.shape(), s.tensor.dtype());
      if (keep.numel()) backend_of(keep).copy(keep, s.tensor);
      keep.impl()->requires_grad = s.tensor.requires_grad();
      keep.impl()->grad_fn = s.tensor.impl()->grad_fn;
      keep.impl()->output_nr = s.tensor.impl()->output_nr;
      s.tensor = keep;
      s.version = keep.storage()->version();
    }
  }

  if (self.numel()) backend_of(self).copy(self, result);
  self.storage()->note_write(op.op, op.site.file, op.site.line);
  // A rule that reads the op's output (exp_'s, tanh_'s) reads it where PyTorch's does: in
  // self, so a later write into self is caught at backward, and the result's buffer goes.
  for (const Ref<Node>& n : made_here)
    for (SavedTensor& s : n->saved)
      if (s.tensor.defined() && s.output_nr >= 0 && s.tensor.storage().get() == result.storage().get() &&
          s.tensor.shape() == self.shape() && s.tensor.dtype() == self.dtype()) {
        s.tensor = storage_view(self, self.shape(), self.strides(), self.offset());
        s.version = self.storage()->version();
      }

  Node* made = result.requires_grad() && result.grad_fn() && result.grad_fn()->seq >= first ? result.grad_fn()
                                                                                               : nullptr;
  TensorImpl* root = self.impl()->view_base.get();
  if (!root) {
    if (made) {
      made->inplace = op.op;
      self.impl()->grad_fn = result.impl()->grad_fn;
      self.impl()->output_nr = result.impl()->output_nr;
      self.impl()->requires_grad = true;
    } else {
      Tensor old = alias_of(self);
      if (Node* n = record(op, replace_backward, {&old, &result}, {&self})) n->inplace = op.op;
    }
    ++self.impl()->history;
    return self;
  }
  Tensor base(Ref<TensorImpl>{root});
  Tensor old = alias_of(base);
  // y = root with the view's elements replaced by the op's result (PyTorch's CopySlices):
  // with_region's rule, the root's old history getting g off the view, the result g on it
  if (Node* n = record(op, with_region_backward, {&old, &result}, {&base})) {
    n->op = "copy_slices";
    n->inplace = op.op;
    n->custom = std::make_unique<RegionState>(geometry(base, self), "CopySlices");
  }
  ++root->history;
  link_view_to_root(self, op.site);
  return self;
}

}  // namespace reel
