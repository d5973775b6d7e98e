// The backward engine: replays the tape in reverse execution order from the roots.
// Nodes are processed by decreasing seq (a max-heap), so every node runs after all
// the nodes that consume its outputs; no recursion, so deep graphs are fine.
#include <algorithm>
#include <optional>
#include <queue>
#include <unordered_map>

#include "autocast.h"
#include "grad_buffer.h"
#include "inplace.h"
#include "internal/backward_hooks.h"
#include "op_support.h"
#include "ops.h"
#include "tape.h"
#include "../tensor/parallel.h"

namespace reel {
namespace {

struct BySeq {
  bool operator()(const Node* a, const Node* b) const { return a->seq < b->seq; }
};

// Whether `t` is the only handle on its buffer: no other Tensor, no view of its storage
// (not a hook's capture, a retained .grad, another input's gradient from the same rule).
bool only_handle(const Tensor& t) { return t.impl()->refs.load() == 1 && t.storage()->refs.load() == 1; }

// A slot the pass alone holds, laid out as g, takes g in place, as PyTorch's InputBuffer
// does: no new buffer per contribution (DenseNet's concatenations give hundreds a step).
// The same kernel as add(), so the same bits, and the layout add() would have given, so
// the rules downstream take the same paths. Under a debug tool (op hooks, anomaly mode,
// the profiler) add() runs as before, so the tools see the op with its inputs intact.
bool add_in_place(const Tensor& slot, const Tensor& g) {
  return !grad_enabled() && !debug_tools_on() && only_handle(slot) && slot.dtype() == g.dtype() &&
         slot.device() == g.device() && slot.strides() == g.strides() &&
         (slot.is_contiguous() || is_channels_last(slot.shape(), slot.strides()));
}

// Adds g into slot (taking it when the slot is empty).
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
  } else if (add_in_place(slot, g)) {  // (the engine checked g's shape against the input's)
    if (slot.numel()) backend_of(slot).binary(BinaryOp::add, slot, slot, g);
  } else {
    slot = add(slot, g);
  }
}

struct Capture {
  std::vector<Tensor>* results;
  // input index by leaf impl, or by (node, output_nr)
  std::unordered_map<const TensorImpl*, size_t> leaves;
  std::unordered_map<const Node*, std::vector<std::pair<uint32_t, size_t>>> nodes;
};

// Whether this thread's backward pass lets rules write leaves' gradients into their buffers
// (autograd/grad_buffer.h): backward() outside create_graph, not grad().
thread_local bool t_leaf_buffers = false;

void accumulate_into_leaf(TensorImpl* leaf, const Tensor& g) {
  if (!leaf->grad) {
    // Take g when nothing else holds it, or when a rule wrote it into the leaf's buffer (which
    // the buffer's owner shares by design); else copy, so .grad() never aliases another tensor.
    bool sole = (leaf->grad_buffer && g.impl() == leaf->grad_buffer.get()) ||
                (only_handle(g) && !g.grad_fn() && g.is_contiguous() && g.offset() == 0 && g.dtype() == leaf->dtype);
    Tensor own = sole ? g : cast(g, leaf->dtype).clone();
    leaf->grad = Ref<TensorImpl>(own.impl());
  } else {
    Tensor existing(leaf->grad);
    if (grad_enabled()) {  // create_graph: keep the accumulation differentiable
      Tensor sum = add(existing, g);
      leaf->grad = Ref<TensorImpl>(sum.impl());
    } else {
      backend_of(existing).axpy(existing, cast(g, existing.dtype()).contiguous(), 1.0);
    }
  }
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph,
                  bool create_graph, Capture* capture, const Site& site) {
  OpScope scope("backward", site);
  if (roots.empty()) fail("backward", "no tensors to differentiate", scope.site);
  struct LeafBuffers {  // (a backward inside a hook or a custom Function restores the outer pass's)
    bool outer = t_leaf_buffers;
    explicit LeafBuffers(bool on) { t_leaf_buffers = on; }
    ~LeafBuffers() { t_leaf_buffers = outer; }
  } leaf_buffers(!capture && !create_graph);
  if (!grad_roots.empty() && grad_roots.size() != roots.size())
    fail("backward", fmt::format("{} roots but {} root gradients", roots.size(), grad_roots.size()), scope.site);

  std::priority_queue<Node*, std::vector<Node*>, BySeq> ready;
  std::vector<Ref<Node>> keep;  // holds every visited node alive for the pass

  // backward() (not grad()) runs the hooks of autograd/hooks.h
  std::optional<autograd::internal::HookPass> hooks;
  if (!capture && autograd::internal::any_backward_hooks()) hooks.emplace(roots);

  auto enqueue = [&](Node* n) {
    if (!n->queued) {
      n->queued = true;
      n->pending.resize(n->outputs.size());
      keep.emplace_back(n);
      ready.push(n);
    }
  };

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined()) fail("backward", "a root is an undefined tensor", scope.site);
    if (r.impl()->stale_view()) refresh_view(r);  // a view whose root was written in place since
    if (!r.requires_grad())
      fail("backward",
           fmt::format("the tensor {} does not require grad and has no grad_fn: nothing on the tape leads to it "
                       "(was it computed under NoGradGuard, or from tensors without requires_grad_()?)",
                       r.shape().str()),
           scope.site);
    Tensor g;
    if (!grad_roots.empty() && grad_roots[i].defined()) {
      g = grad_roots[i];
      if (!(g.shape() == r.shape()))
        fail("backward", fmt::format("gradient shape {} does not match the root's shape {}", g.shape().str(),
                                     r.shape().str()), scope.site);
      check_same_device(scope, g, r);
    } else {
      if (r.numel() != 1)
        fail("backward",
             fmt::format("a gradient can be implied only for a one-element root, got shape {}; pass one",
                         r.shape().str()), scope.site);
      g = ones(r.shape(), {.dtype = r.dtype(), .device = r.device()});
    }
    if (r.is_leaf()) {
      if (capture && capture->leaves.count(r.impl())) {
        accumulate((*capture->results)[capture->leaves[r.impl()]], g);
      } else if (!capture) {
        accumulate_into_leaf(r.impl(), g);
        if (hooks) hooks->leaf_edge(r.impl(), true);
      }
      continue;
    }
    Node* n = r.grad_fn();
    enqueue(n);
    accumulate(n->pending[r.impl()->output_nr], g);
  }

  std::string released_by = fmt::format("backward at {}", scope.site.str());
  std::vector<Tensor> grad_inputs;
  FlushSubnormalsGuard flush;  // see set_flush_subnormals
  NoGradGuard no_grad_unless;  // backward rules are recorded only with create_graph
  // rules compute in the dtypes the forward chose, whatever autocast scope backward() is in
  AutocastGuard no_cpu_autocast({.device = DeviceType::CPU, .enabled = false});
  AutocastGuard no_cuda_autocast({.device = DeviceType::CUDA, .enabled = false});
  set_grad_enabled(create_graph);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    n->queued = false;
    std::vector<Tensor> grads = std::move(n->pending);
    n->pending.clear();
    for (size_t k = 0; k < grads.size(); ++k)
      if (!grads[k].defined()) grads[k] = zeros(n->outputs[k].shape, {.dtype = n->outputs[k].dtype, .device = n->outputs[k].device});
    if (capture) {
      auto it = capture->nodes.find(n);
      if (it != capture->nodes.end())
        for (auto [out_nr, idx] : it->second) accumulate((*capture->results)[idx], grads[out_nr]);
    }
    if (n->released) (void)n->saved_tensor(0);  // throws the "already freed" error
    grad_inputs.assign(n->edges.size(), Tensor());
    {
      SiteScope at_forward_site(n->site, SiteScope::Replace{});  // errors inside a rule name the forward call
      ModuleScope in_forward_module(n->module);  // ... and its module
      RuleScope rule(*n, grads);  // the debug tools see the rule as an op of the backward phase
      n->backward(*n, grads, grad_inputs);
      rule.done(grad_inputs);
    }
    for (size_t i = 0; i < n->edges.size(); ++i) {
      Edge& e = n->edges[i];
      Tensor& g = grad_inputs[i];
      if (hooks && e.leaf && (!g.defined() || !e.needs_grad())) hooks->leaf_edge(e.leaf.get(), false);
      if (!e.needs_grad() || !g.defined()) continue;
      if (!(g.shape() == n->inputs[i].shape))
        fail("backward",
             fmt::format("internal: the rule of {} gave a gradient of shape {} for input {} of shape {}", n->op,
                         g.shape().str(), i, n->inputs[i].shape.str()),
             n->site);
      // A rule may compute an input's gradient in another floating dtype (an autocast
      // product reads a bf16 copy of an f32 input): it flows on in the input's dtype.
      if (g.dtype() != n->inputs[i].dtype && is_floating(n->inputs[i].dtype)) g = g.to(n->inputs[i].dtype);
      if (e.node) {
        enqueue(e.node.get());
        accumulate(e.node->pending[e.output_nr], g);
      } else if (capture) {
        auto it = capture->leaves.find(e.leaf.get());
        if (it != capture->leaves.end()) accumulate((*capture->results)[it->second], g);
      } else {
        accumulate_into_leaf(e.leaf.get(), g);
        if (hooks) hooks->leaf_edge(e.leaf.get(), true);
      }
    }
    if (!retain_graph) {
      n->saved.clear();
      n->released = true;
      n->released_by = released_by;
    }
  }
  if (hooks) {
    set_grad_enabled(false);
    hooks->finish();
  }
}

}  // namespace

namespace autograd {

void set_grad_buffer(const Tensor& leaf, const Tensor& buffer) {
  if (buffer.defined() && !(buffer.shape() == leaf.shape() && buffer.dtype() == leaf.dtype() &&
                            buffer.device() == leaf.device() && buffer.is_contiguous()))
    fail("set_grad_buffer",
         fmt::format("expected a contiguous {} {} buffer on {} for a leaf of that shape, got {} {} on {}{}",
                     dtype_name(leaf.dtype()), leaf.shape().str(), leaf.device().str(), dtype_name(buffer.dtype()),
                     buffer.shape().str(), buffer.device().str(), buffer.is_contiguous() ? "" : " (strided)"),
         Site(nullptr, 0));
  leaf.impl()->grad_buffer = buffer.defined() ? Ref<TensorImpl>(buffer.impl()) : Ref<TensorImpl>();
}

Tensor grad_buffer(const Tensor& leaf) {
  return leaf.impl()->grad_buffer ? Tensor(leaf.impl()->grad_buffer) : Tensor();
}

Tensor internal::grad_buffer_for(const Node& n, size_t input, DType dtype) {
  if (!t_leaf_buffers || grad_enabled()) return {};
  TensorImpl* leaf = n.edges[input].leaf.get();
  if (!leaf || leaf->grad || !leaf->grad_buffer || leaf->grad_buffer->dtype != dtype) return {};
  // (checked again: the leaf may have been given other data since set_grad_buffer)
  Tensor buffer(leaf->grad_buffer), l(Ref<TensorImpl>{leaf});
  if (!(buffer.shape() == l.shape()) || buffer.dtype() != l.dtype() || buffer.device() != l.device()) return {};
  return buffer;
}

}  // namespace autograd

void Tensor::backward(const Tensor& gradient, bool retain_graph, Site site) const {
  run_backward({*this}, {gradient}, retain_graph, false, nullptr, site);
}

namespace autograd {

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph, Site site) {
  run_backward(roots, grad_roots, retain_graph, false, nullptr, site);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions opt, Site site) {
  std::vector<Tensor> results(inputs.size());
  Capture capture{&results, {}, {}};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad())
      fail("autograd::grad", fmt::format("input {} ({}) does not require grad", i, t.defined() ? t.shape().str() : "undefined"),
           SiteScope::current(site));
    if (t.impl()->stale_view()) refresh_view(t);
    if (t.is_leaf()) capture.leaves[t.impl()] = i;
    else capture.nodes[t.grad_fn()].push_back({t.impl()->output_nr, i});
  }
  run_backward(outputs, grad_outputs, opt.retain_graph || opt.create_graph, opt.create_graph, &capture, site);
  for (size_t i = 0; i < results.size(); ++i)
    if (!results[i].defined() && !opt.allow_unused)
      fail("autograd::grad",
           fmt::format("input {} ({}) is not used by the outputs; pass allow_unused = true to get an undefined tensor",
                       i, inputs[i].shape().str()),
           SiteScope::current(site));
  return results;
}

}  // namespace autograd
}  // namespace reel
