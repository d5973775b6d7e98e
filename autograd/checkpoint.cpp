// checkpoint(): one tape entry whose rule recomputes fn under grad mode, with the
// random stream of the forward, and runs a nested backward through the recomputed
// graph (its entries are released by that backward). As PyTorch's reentrant
// checkpoint, tensors fn closes over get their gradients in .grad() even when the
// outer call is autograd::grad (which returns only the gradients of fn's inputs).
#include "checkpoint.h"

#include <memory>

#include "autocast.h"
#include "op_support.h"
#include "tape.h"
#include "../tensor/generator.h"

namespace reel::autograd {
namespace {

using Grads = std::vector<Tensor>;

struct CheckpointState : CustomState {
  CheckpointFn fn;
  GeneratorState rng;  // the default generator's position when the forward started
  // the forward's autocast settings (backward runs without autocast): the recomputation
  // must choose the same dtypes, as PyTorch's checkpoint does
  AutocastOptions cpu_autocast, cuda_autocast;
};

AutocastOptions autocast_now(DeviceType d) {
  return {.device = d, .dtype = autocast_dtype(d), .enabled = autocast_enabled(d)};
}

// Sets grad mode for a scope and puts it back.
struct GradModeScope {
  bool prev = grad_enabled();
  explicit GradModeScope(bool on) { set_grad_enabled(on); }
  ~GradModeScope() { set_grad_enabled(prev); }
};

// Puts the random stream back where it was after the recomputation, so the numbers
// drawn after backward are those that would be drawn without checkpointing.
struct RngRestore {
  GeneratorState saved = default_generator().get_state();
  ~RngRestore() { default_generator().set_state(saved); }
};

void recompute_rule(Node& n, const Grads& g, Grads& gi) {
  if (grad_enabled())
    fail("checkpoint", "a create_graph backward through checkpoint() is not supported; call fn without checkpoint "
                       "for higher-order gradients", n.site);
  auto& st = static_cast<CheckpointState&>(*n.custom);
  std::vector<Tensor> inputs, wrt;
  std::vector<size_t> wrt_index;
  for (size_t i = 0; i < n.edges.size(); ++i) {
    Tensor x = n.saved_tensor(i).detach();
    if (n.needs_grad(i)) {
      x.requires_grad_(true);
      wrt.push_back(x);
      wrt_index.push_back(i);
    }
    inputs.push_back(x);
  }
  std::vector<Tensor> outs;
  {
    RngRestore after;
    default_generator().set_state(st.rng);
    GradModeScope recording(true);
    AutocastGuard cpu_autocast(st.cpu_autocast), cuda_autocast(st.cuda_autocast);
    outs = st.fn(inputs);
  }
  if (outs.size() != g.size())
    fail("checkpoint", fmt::format("fn gave {} outputs when recomputed, {} in the forward", outs.size(), g.size()),
         n.site);
  std::vector<Tensor> roots, root_grads;
  for (size_t k = 0; k < outs.size(); ++k)
    if (outs[k].defined() && outs[k].requires_grad()) {
      roots.push_back(outs[k]);
      root_grads.push_back(g[k]);
    }
  if (roots.empty()) return;
  // a backward, not grad(): tensors fn reads from outside (a module's weights) get
  // their gradients accumulated as they would without checkpointing; the inputs'
  // fresh leaves collect theirs, which go back to the outer backward
  backward(roots, root_grads);
  for (size_t j = 0; j < wrt.size(); ++j) gi[wrt_index[j]] = wrt[j].grad();
}

}  // namespace

std::vector<Tensor> checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs, Site site) {
  OpScope op("checkpoint", site);
  if (!fn) fail(op.op, "fn is empty", op.site);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined()) fail(op.op, fmt::format("input {} is undefined", i), op.site);
  GeneratorState rng = default_generator().get_state();
  std::vector<Tensor> outputs;
  {
    NoGradGuard inside_not_recorded;
    outputs = fn(inputs);
  }
  std::vector<const Tensor*> in;
  std::vector<Tensor*> out;
  for (const Tensor& t : inputs) in.push_back(&t);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].defined()) fail(op.op, fmt::format("fn gave an undefined output {}", k), op.site);
    outputs[k] = outputs[k].detach();  // a handle of its own: fn may return an input itself
    out.push_back(&outputs[k]);
  }
  if (Node* n = record(op, recompute_rule, in, out)) {
    for (const Tensor& t : inputs) n->save(t);
    auto st = std::make_unique<CheckpointState>();
    st->fn = std::move(fn);
    st->rng = rng;
    st->cpu_autocast = autocast_now(DeviceType::CPU);
    st->cuda_autocast = autocast_now(DeviceType::CUDA);
    n->custom = std::move(st);
  }
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, Site site) {
  if (!fn) fail("checkpoint", "fn is empty", SiteScope::current(site));
  return checkpoint([fn](const std::vector<Tensor>& v) { return std::vector<Tensor>{fn(v[0])}; }, {input}, site)[0];
}

}  // namespace reel::autograd
