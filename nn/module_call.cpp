// Calling a module: the thread's stack of module calls (Module::Call), which gives
// every op inside the module path ("feat.fc") and the site rule (ops in a forward()
// the user wrote report their own lines, ops of reel's layers the line that called
// the layer), and the forward and backward hooks with PyTorch's semantics.
#include <fmt/format.h>

#include <set>

#include "../autograd/op_support.h"
#include "module.h"

namespace reel::nn {

namespace {
thread_local Module::Call* tls_call = nullptr;  // the innermost module call on this thread

// `target`'s name under `parent` as PyTorch's named_modules gives it: depth first, the
// first name a shared module is reached by; "feat.fc" when the parent's forward calls a
// grandchild directly; "<Linear>" for a module the parent never registered.
bool find_name(const Module& parent, const Module* target, const std::string& prefix, std::set<const Module*>& seen,
               std::string& out) {
  for (const auto& [name, child] : parent.named_children()) {
    std::string full = prefix.empty() ? name : prefix + "." + name;
    if (child == target) {
      out = full;
      return true;
    }
    if (seen.insert(child).second && find_name(*child, target, full, seen, out)) return true;
  }
  return false;
}
}  // namespace

// ---- the call stack
const ModulePath* Module::path_under(const Call* parent) {
  const ModulePath* parent_path = parent ? parent->path_ : nullptr;
  if (path_cache_.path && path_cache_.parent == parent_path) return path_cache_.path;
  std::string name;
  if (parent) {
    std::set<const Module*> seen;
    if (!find_name(*parent->module_, this, "", seen, name)) name = "<" + type_name() + ">";
  }
  path_cache_.parent = parent_path;
  path_cache_.path = ModulePath::intern(parent_path, name, type_name());
  return path_cache_.path;
}

// Member order matters: the path and the caller's site are read before this call
// becomes the innermost one and before the user's code gets the site back.
Module::Call::Call(Module& module, const Site& site)
    : module_(&module),
      path_(module.path_under(tls_call)),
      site_(SiteScope::current(site)),
      parent_(tls_call),
      in_module_(path_),
      user_code_(SiteScope::UserCode{}) {
  tls_call = this;
  if (debug_tools_on()) [[unlikely]] t0_ns_ = debug_span_begin();
}

Module::Call::~Call() {
  tls_call = parent_;
  if (t0_ns_ >= 0) [[unlikely]] debug_module_end(path_, t0_ns_);
}

SiteScope Module::at_caller_site() const {
  if (tls_call && tls_call->module_ == this) return SiteScope(tls_call->site_);
  return SiteScope(SiteScope::Keep{});  // forward() called directly: no call to take the site from
}

Tensor Module::operator()(const Tensor& x, Site site) {
  Call call(*this, site);
  if (hooks_ && has_hooks()) return call_with_hooks(x);
  return call_forward(x);
}

// ---- hooks
struct ModuleHooks {
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, ForwardPreHook>> forward_pre, backward_pre;
  std::vector<std::pair<uint64_t, ForwardHook>> forward, backward;
  bool empty() const { return forward_pre.empty() && backward_pre.empty() && forward.empty() && backward.empty(); }
};

bool Module::has_hooks() const { return hooks_ && !hooks_->empty(); }

RemovableHandle Module::add_hook(int kind, ForwardPreHook h) {
  if (!hooks_) hooks_ = std::make_shared<ModuleHooks>();
  uint64_t id = hooks_->next_id++;
  (kind == 0 ? hooks_->forward_pre : hooks_->backward_pre).emplace_back(id, std::move(h));
  return {hooks_, id};
}

RemovableHandle Module::add_hook(int kind, ForwardHook h) {
  if (!hooks_) hooks_ = std::make_shared<ModuleHooks>();
  uint64_t id = hooks_->next_id++;
  (kind == 1 ? hooks_->forward : hooks_->backward).emplace_back(id, std::move(h));
  return {hooks_, id};
}

void RemovableHandle::remove() {
  if (auto h = hooks.lock()) {
    auto drop = [this](auto& list) { std::erase_if(list, [this](const auto& e) { return e.first == id; }); };
    drop(h->forward_pre);
    drop(h->backward_pre);
    drop(h->forward);
    drop(h->backward);
  }
  hooks.reset();
  id = 0;
}

namespace {
// One module call's backward hooks, shared by the identity ops on its input and output
// (PyTorch's BackwardHook): the output's rule runs the pre-backward hooks and keeps
// grad_output; the input's rule then runs the backward hooks with both gradients.
struct BackwardCall {
  Module* module = nullptr;
  std::vector<std::pair<uint64_t, ForwardPreHook>> pre;  // the hooks as they were at the forward call
  std::vector<std::pair<uint64_t, ForwardHook>> post;
  bool input_hooked = false;  // false: the input needs no gradient, the output's rule runs `post`
  Tensor grad_output;
};
struct BackwardCallState : CustomState {
  std::shared_ptr<BackwardCall> call;
};

Tensor replaced(const char* what, const Module& m, const Tensor& g, std::optional<Tensor> r) {
  if (!r) return g;
  if (!r->defined() || !(r->shape() == g.shape()))
    throw Error(fmt::format("{}: a {} hook returned a gradient of shape {} for one of shape {}", m.type_name(), what,
                            r->defined() ? r->shape().str() : "undefined", g.shape().str()));
  return *r;
}

void backward_hook_rule(Node& n, const std::vector<Tensor>& grad_outputs, std::vector<Tensor>& grad_inputs) {
  BackwardCall& c = *static_cast<BackwardCallState&>(*n.custom).call;
  Tensor g = grad_outputs[0];
  if (!n.args<ModuleHookArgs>().input) {
    for (const auto& [id, hook] : c.pre) g = replaced("backward pre", *c.module, g, hook(*c.module, g));
    c.grad_output = g;
    if (!c.input_hooked)
      for (const auto& [id, hook] : c.post) (void)hook(*c.module, Tensor(), g);  // no grad_input to replace
  } else {
    for (const auto& [id, hook] : c.post) g = replaced("backward", *c.module, g, hook(*c.module, g, c.grad_output));
  }
  grad_inputs[0] = g;
}

// y = x as a new handle on x's storage, recorded so that backward passes the hooks.
Tensor through_backward_hooks(const Tensor& x, const std::shared_ptr<BackwardCall>& call, bool input,
                              const Site& site) {
  OpScope op("backward_hook", site);
  Tensor y = make_view(x, x.shape(), x.strides(), x.offset());
  Node* n = record(op, &backward_hook_rule, {&x}, {&y});
  if (n) {
    auto st = std::make_unique<BackwardCallState>();
    st->call = call;
    n->custom = std::move(st);
  }
  keep_args(op, n, ModuleHookArgs{.input = input});
  return y;
}
}  // namespace

Tensor Module::call_with_hooks(const Tensor& x) {
  std::shared_ptr<ModuleHooks> hooks = hooks_;  // copies: a hook may register or remove hooks
  Tensor in = x;
  for (const auto& [id, hook] : std::vector(hooks->forward_pre))
    if (std::optional<Tensor> r = hook(*this, in)) in = *r;
  std::shared_ptr<BackwardCall> bw;
  if ((!hooks->backward_pre.empty() || !hooks->backward.empty()) && grad_enabled()) {
    bw = std::make_shared<BackwardCall>();
    bw->module = this;
    bw->pre = hooks->backward_pre;
    bw->post = hooks->backward;
    if (in.defined() && in.requires_grad()) {
      in = through_backward_hooks(in, bw, true, tls_call->site_);
      bw->input_hooked = true;
    }
  }
  Tensor out = call_forward(in);
  for (const auto& [id, hook] : std::vector(hooks->forward))
    if (std::optional<Tensor> r = hook(*this, in, out)) out = *r;
  if (bw && out.defined() && out.requires_grad()) out = through_backward_hooks(out, bw, false, tls_call->site_);
  return out;
}

}  // namespace reel::nn
