// Custom autograd functions (function.h): the one tape entry a user op makes, and the
// rule that hands its gradients to the user's backward.
#include "function.h"

#include "op_support.h"

namespace reel::autograd {
namespace detail {

// Kept by the tape entry (Node::custom): the context and the user's backward.
struct FunctionState : CustomState {
  Context ctx;
  BackwardPtr backward = nullptr;
};

namespace {
// The rule of every custom function: call the user's backward, check what it gave.
void function_backward(Node& n, const std::vector<Tensor>& grad_outputs, std::vector<Tensor>& grad_inputs) {
  auto& st = static_cast<FunctionState&>(*n.custom);
  std::vector<Tensor> g = st.backward(st.ctx, grad_outputs);
  if (g.size() != n.edges.size())  // named with the forward's line (fail() would name backward()'s)
    throw Error(fmt::format("{}: backward returned {} gradients for {} tensor inputs; return one per Tensor argument "
                            "of forward (an undefined Tensor for none) (at {})",
                            n.op, g.size(), n.edges.size(), n.site.str()));
  for (size_t i = 0; i < g.size(); ++i)
    if (n.needs_grad(i)) grad_inputs[i] = std::move(g[i]);
}
}  // namespace

std::vector<Tensor> run_function(const char* name, const Site& site, const std::vector<const Tensor*>& inputs,
                                 void* forward, ForwardThunk thunk, BackwardPtr backward) {
  OpScope op(name, site);
  auto state = std::make_unique<FunctionState>();
  Context& ctx = state->ctx;
  ctx.needs_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    ctx.needs_[i] = grad_enabled() && inputs[i]->defined() && inputs[i]->requires_grad();
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;  // the user's backward is the rule, not the forward's ops
    outs = thunk(forward, ctx);
  }
  if (outs.empty()) fail(name, "forward returned no tensors", op.site);
  std::vector<Tensor*> out_ptrs;
  for (size_t k = 0; k < outs.size(); ++k) {
    Tensor& o = outs[k];
    if (!o.defined()) fail(name, fmt::format("forward returned an undefined tensor as output {}", k), op.site);
    // An output that is an input (or otherwise already on the tape) gets its own handle,
    // so recording links the new handle and leaves the input as it was.
    bool alias = o.grad_fn() != nullptr || o.requires_grad();
    for (const Tensor* in : inputs) alias = alias || o.impl() == in->impl();
    if (alias) o = o.detach();
    out_ptrs.push_back(&o);
  }
  state->backward = backward;
  if (Node* n = record(op, &function_backward, inputs, out_ptrs)) {
    for (const Tensor& t : ctx.pending_) n->save(t);  // an output is saved detached: no cycle
    ctx.pending_.clear();
    ctx.node_ = n;
    n->custom = std::move(state);
  }
  return outs;
}

}  // namespace detail

void Context::save_for_backward(std::vector<Tensor> tensors) {
  for (Tensor& t : tensors) pending_.push_back(std::move(t));
}

std::vector<Tensor> Context::saved() const {
  if (!node_) return pending_;
  if (node_->released) (void)node_->saved_tensor(0);  // throws: freed by an earlier backward
  std::vector<Tensor> out;
  for (size_t i = 0; i < node_->saved.size(); ++i) out.push_back(node_->saved_tensor(i));
  return out;
}

bool Context::needs_input_grad(size_t i) const {
  if (node_) return i < node_->edges.size() && node_->needs_grad(i);
  return i < needs_.size() && needs_[i];
}

}  // namespace reel::autograd
