// Between autograd/hooks.cpp and the engine: one backward pass's view of the hooks of
// autograd/hooks.h. Costs one atomic load per pass when no hook is registered.
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "../hooks.h"
#include "../node.h"

namespace reel::autograd::internal {

bool any_backward_hooks();

class HookPass {
 public:
  // Snapshots the hooks and counts, for each hooked leaf, the edges that lead to it
  // from the roots (the leaf roots themselves included).
  explicit HookPass(const std::vector<Tensor>& roots);
  // An edge into `leaf` was handled (got_grad: a gradient was added into its .grad()).
  // Fires the leaf's hooks when it was the last one.
  void leaf_edge(TensorImpl* leaf, bool got_grad);
  // The end of the pass: fires the hooks of leaves that got a gradient but whose other
  // edges never ran, then the end-of-backward hooks.
  void finish();

 private:
  struct Leaf {
    int64_t remaining = 0;
    bool got = false, fired = false;
    std::vector<std::shared_ptr<PostAccumulateGradHook>> hooks;
  };
  void fire(TensorImpl* leaf, Leaf& l);
  std::unordered_map<TensorImpl*, Leaf> leaves_;
  std::vector<TensorImpl*> order_;  // hooked leaves in registration order (finish()'s order)
  std::vector<std::shared_ptr<BackwardEndHook>> end_hooks_;
};

}  // namespace reel::autograd::internal
