// Hooks on the backward pass, for code that acts on gradients as soon as they are final:
// data-parallel training (dist/ddp.h) starts all-reducing each gradient while the rest
// of backward still runs, and finishes the reduction when backward ends.
//
//   auto id = autograd::add_post_accumulate_grad_hook(w, [](const Tensor& w) { use(w.grad()); });
//   loss.backward();                 // the hook runs once, when w.grad() holds all of this pass
//   autograd::remove_backward_hook(id);
#pragma once
#include <cstdint>
#include <functional>

#include "../tensor/tensor.h"

namespace reel::autograd {

// Called once per backward pass that reaches `leaf`, after the pass has added all of its
// contributions into leaf.grad() (PyTorch's register_post_accumulate_grad_hook): when the
// last tape entry that leads to the leaf has run, or at the end of the pass for a leaf
// whose remaining entries got no gradient. Runs on the thread that runs backward().
// Only backward() (Tensor::backward, autograd::backward) calls it; autograd::grad()
// accumulates nothing and calls no hook. The registry keeps the leaf alive until removed.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;
// Called at the end of every backward() pass (after its leaf hooks), on its thread.
using BackwardEndHook = std::function<void()>;

uint64_t add_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook, Site site = {});
uint64_t add_backward_end_hook(BackwardEndHook hook);
// Unregisters a hook of either kind; an id already removed is ignored.
void remove_backward_hook(uint64_t id);

}  // namespace reel::autograd
