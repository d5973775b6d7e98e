// The registry of backward hooks (autograd/hooks.h) and their per-pass bookkeeping.
#include "hooks.h"

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_set>

#include "internal/backward_hooks.h"
#include "op_support.h"

namespace reel::autograd {
namespace {

struct LeafHook {
  Ref<TensorImpl> leaf;
  std::shared_ptr<PostAccumulateGradHook> fn;
};
struct Registry {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, LeafHook> leaf_hooks;  // by id: registration order
  std::map<uint64_t, std::shared_ptr<BackwardEndHook>> end_hooks;
  std::atomic<size_t> count{0};
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: hooks may be removed during exit
  return *r;
}

}  // namespace

uint64_t add_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook, Site site) {
  if (!leaf.defined() || !leaf.is_leaf() || !leaf.requires_grad())
    fail("add_post_accumulate_grad_hook",
         fmt::format("expected a leaf tensor that requires grad, got {}",
                     !leaf.defined() ? std::string("an undefined tensor")
                                     : fmt::format("{} ({})", leaf.shape().str(),
                                                   leaf.is_leaf() ? "does not require grad" : "not a leaf")),
         SiteScope::current(site));
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  uint64_t id = r.next_id++;
  r.leaf_hooks[id] = {Ref<TensorImpl>(leaf.impl()), std::make_shared<PostAccumulateGradHook>(std::move(hook))};
  r.count.fetch_add(1);
  return id;
}

uint64_t add_backward_end_hook(BackwardEndHook hook) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  uint64_t id = r.next_id++;
  r.end_hooks[id] = std::make_shared<BackwardEndHook>(std::move(hook));
  r.count.fetch_add(1);
  return id;
}

void remove_backward_hook(uint64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (r.leaf_hooks.erase(id) + r.end_hooks.erase(id) > 0) r.count.fetch_sub(1);
}

namespace internal {

bool any_backward_hooks() { return registry().count.load(std::memory_order_relaxed) > 0; }

HookPass::HookPass(const std::vector<Tensor>& roots) {
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    for (auto& [id, h] : r.leaf_hooks) {
      auto [it, fresh] = leaves_.try_emplace(h.leaf.get());
      if (fresh) order_.push_back(h.leaf.get());
      it->second.hooks.push_back(h.fn);
    }
    for (auto& [id, h] : r.end_hooks) end_hooks_.push_back(h);
  }
  if (leaves_.empty()) return;
  // Count the edges into each hooked leaf over the graph reachable from the roots (an
  // explicit stack: deep graphs are fine).
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  auto count_leaf = [&](TensorImpl* leaf) {
    auto it = leaves_.find(leaf);
    if (it != leaves_.end()) ++it->second.remaining;
  };
  for (const Tensor& t : roots) {
    if (!t.defined()) continue;
    if (t.is_leaf()) count_leaf(t.impl());
    else if (seen.insert(t.grad_fn()).second) stack.push_back(t.grad_fn());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->edges) {
      if (e.node) {
        if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      } else if (e.leaf) {
        count_leaf(e.leaf.get());
      }
    }
  }
}

void HookPass::fire(TensorImpl* leaf, Leaf& l) {
  l.fired = true;
  Tensor t{Ref<TensorImpl>(leaf)};
  for (auto& h : l.hooks) (*h)(t);
}

void HookPass::leaf_edge(TensorImpl* leaf, bool got_grad) {
  if (leaves_.empty()) return;
  auto it = leaves_.find(leaf);
  if (it == leaves_.end()) return;
  Leaf& l = it->second;
  l.got = l.got || got_grad;
  if (--l.remaining <= 0 && l.got && !l.fired) fire(leaf, l);
}

void HookPass::finish() {
  for (TensorImpl* leaf : order_) {
    Leaf& l = leaves_[leaf];
    if (l.got && !l.fired) fire(leaf, l);
  }
  for (auto& h : end_hooks_) (*h)();
}

}  // namespace internal
}  // namespace reel::autograd
