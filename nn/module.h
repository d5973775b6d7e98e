// nn::Module: the base of every layer and model. A module is a plain class whose
// public members are its tensors and child modules; registering a member by name
// makes it part of parameters(), state_dict() and checkpoints ("fc1.weight").
//
//   struct Net : nn::Module {
//     nn::Linear fc1{784, 128}, fc2{128, 10};
//     Net() { register_module("fc1", fc1); register_module("fc2", fc2); }
//     Tensor forward(const Tensor& x) override { return fc2(reel::relu(fc1(x))); }
//   };
//   Net net;  Tensor y = net(x);  net.save("net.safetensors");
//
// The registration rule. A registered tensor is found by its offset inside the module,
// so moving the module as a whole (into a Sequential, say) finds it in the new object,
// and assigning another tensor to the member (tying weights) is seen. So a tensor must
// be a direct member of *this. A local of the constructor is refused at once when it
// lies below the module on the stack (a constructor with its own frame; one inlined into
// the frame holding the module can escape this check), and a tensor outside the object
// (an element of a std::vector member) is refused when the module is registered as a
// child or put in a container, where its size is known. A registered
// child module knows its parent, and a move of either keeps the link, so children may be
// members, elements of containers of modules, or held by the module (unique_ptr); a
// child destroyed while registered (a local, an element erased) makes the parent's
// walks throw Error naming it. For a variable number of layers use nn::ModuleList or
// nn::ModuleDict (nn/containers.h). Never slice a module (move a Derived into a Base).
// Modules are not copyable: a copy would share parameters silently.
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
class Module;

// Hooks on a module's call, with PyTorch's semantics (register_forward_pre_hook, ...).
// Each may return a tensor that replaces the value it was given, or nothing (a hook
// written to return void is accepted too).
//   pre-forward:  (module, input)                -> replaces the input forward() gets
//   forward:      (module, input, output)        -> replaces the output the caller gets
//   pre-backward: (module, grad_output)          -> replaces the gradient entering the module
//   backward:     (module, grad_input, grad_output) -> replaces the gradient leaving it for
//                 the input (grad_input is undefined when the input does not require grad)
using ForwardPreHook = std::function<std::optional<Tensor>(Module&, const Tensor& input)>;
using ForwardHook = std::function<std::optional<Tensor>(Module&, const Tensor& input, const Tensor& output)>;
using BackwardPreHook = std::function<std::optional<Tensor>(Module&, const Tensor& grad_output)>;
using BackwardHook =
    std::function<std::optional<Tensor>(Module&, const Tensor& grad_input, const Tensor& grad_output)>;
struct ModuleHooks;  // a module's hooks (nn/module_call.cpp)

namespace detail {
// libtorch's forward signature, `Tensor forward(Tensor x)` (by value). A module that
// declares it overrides this slot (overriding looks through every base, whatever the
// access), and Module::operator() calls the slot first: a module ported with libtorch's
// signature runs its own forward instead of the base's. The slot's default hands over to
// the reference form, `forward(const Tensor&)`, which reel's own modules override. It is
// a private base so that `m.forward(x)` on a Module sees one forward, not two.
class ForwardByValue {
 public:
  virtual ~ForwardByValue() = default;
  // (-Woverloaded-virtual would name this slot at every module that declares the reference
  // form; hiding it there is the point)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  virtual Tensor forward(Tensor x) { return forward_by_reference(x); }
#pragma GCC diagnostic pop

 private:
  virtual Tensor forward_by_reference(const Tensor& x) = 0;
};
}  // namespace detail

// Unregisters its hook on remove(); dropping the handle keeps the hook. Safe after
// the module is gone (then it does nothing).
struct RemovableHandle {
  std::weak_ptr<ModuleHooks> hooks;
  uint64_t id = 0;
  void remove();
};

class Module : private detail::ForwardByValue {
 public:
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation of a one-input module. The base throws Error (a module with
  // several inputs defines its own call operator instead). libtorch's by-value
  // `Tensor forward(Tensor x)` is called too (detail::ForwardByValue); where a module
  // declares both, the by-value one runs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverloaded-virtual"  // a by-value forward hides it, and is called
  virtual Tensor forward(const Tensor& x);
#pragma GCC diagnostic pop
  // Calls forward() inside this module: ops in a forward() you wrote report their own
  // lines, ops of reel's own layers the line that called the layer, and every op the
  // module path ("feat.fc"); runs the hooks registered below.
  Tensor operator()(const Tensor& x, Site site = {});

  // This module on this thread's stack of module calls, for the length of one call:
  // the module path and sites as operator() sets them (no hooks). A module with several
  // inputs opens one in its own call operator:
  //   Tensor operator()(const Tensor& a, const Tensor& b, Site site = {}) {
  //     Call call(*this, site);
  //     return forward(a, b);
  //   }
  class Call {
   public:
    Call(Module& module, const Site& site);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    const ModulePath* path() const { return path_; }

   private:
    friend class Module;
    Module* module_;
    const ModulePath* path_;
    Site site_;  // the user's line that called the module
    Call* parent_;
    int64_t t0_ns_ = -1;  // >= 0: a profiler times this call
    ModuleScope in_module_;
    SiteScope user_code_;
  };

  // ---- hooks (see ForwardHook above): run in registration order, around operator().
  template <typename F> RemovableHandle register_forward_pre_hook(F&& hook) {
    return add_hook(0, ForwardPreHook(hook_returning<const Tensor&>(std::forward<F>(hook))));
  }
  template <typename F> RemovableHandle register_forward_hook(F&& hook) {
    return add_hook(1, ForwardHook(hook_returning<const Tensor&, const Tensor&>(std::forward<F>(hook))));
  }
  template <typename F> RemovableHandle register_full_backward_pre_hook(F&& hook) {
    return add_hook(2, BackwardPreHook(hook_returning<const Tensor&>(std::forward<F>(hook))));
  }
  template <typename F> RemovableHandle register_full_backward_hook(F&& hook) {
    return add_hook(3, BackwardHook(hook_returning<const Tensor&, const Tensor&>(std::forward<F>(hook))));
  }
  bool has_hooks() const;
  // "Linear", "Conv2d", ...: used in error messages and str().
  virtual std::string type_name() const;
  // One line describing the module's configuration, as PyTorch's extra_repr.
  virtual std::string extra_repr() const { return ""; }
  // The module tree, as PyTorch prints it.
  std::string str() const;

  // ---- registered tensors and children. Shared tensors appear once.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;  // "fc1.weight", ...
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Module*> children() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // Parameters and buffers by dotted name: what save() writes and load() reads.
  NamedTensors state_dict() const;
  // This module ("") and every module below it ("feat", "feat.0", ...), depth first
  // in registration order, each once (as PyTorch's named_modules()).
  std::vector<std::pair<std::string, Module*>> named_modules() const;
  std::vector<Module*> modules() const;
  // Calls fn on every child's tree, then on this module (PyTorch's order):
  //   net.apply([](nn::Module& m) { if (auto* l = dynamic_cast<nn::Linear*>(&m)) nn::init::zeros_(l->bias); });
  Module& apply(const std::function<void(Module&)>& fn);
  // Sets requires_grad on every parameter (false freezes them: backward gives them no
  // gradient and the optimizer skips them).
  Module& requires_grad_(bool on = true);

  // ---- mode: training (the default) or evaluation, for this module and its children
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // Moves (converts) every parameter and buffer in place: the tensors keep their
  // identity (the same handles), so an optimizer made before or after to() steps
  // the moved parameters. Gradients move along; optimizer state moves at its next step.
  Module& to(Device device);
  // Converts floating-point parameters and buffers (integer buffers stay as they are).
  Module& to(DType dtype);
  // Clears the gradients of all parameters: undefined (set_to_none, the default as in
  // PyTorch 2.x, which frees the memory) or zero-filled.
  void zero_grad(bool set_to_none = true);

  // ---- checkpoints (safetensors files; readable by Python's safetensors and PyTorch).
  // load() validates every name, shape and dtype before it copies anything: on any
  // mismatch it throws Error naming the file and leaves the module unchanged.
  // Values are converted to each tensor's dtype and device. The file's format is read
  // from its first bytes (formats/detect.h), not its name: safetensors, or PyTorch's
  // torch.save state dict (formats/torch_pt.h: the zip format; the legacy one is refused
  // with a message), with the same checks. save() always writes safetensors; to a name
  // ending in .pt or .pth it says so on stderr, once per process.
  void save(const std::string& path) const;
  void load(const std::string& path);
  // `source` names the origin in errors. strict: every name must match both ways.
  void load_state_dict(const NamedTensors& state, bool strict = true, const std::string& source = "state dict");

 protected:
  Module() = default;
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;

  // Registers a member tensor as a parameter (made requires_grad). An undefined
  // tensor (e.g. a disabled bias) is not registered. Returns the member.
  Tensor& register_parameter(const std::string& name, Tensor& member);
  // Registers a parameter the module holds itself, for parameters counted at run time
  // (a recurrent layer's per-layer weights, under PyTorch's flat names). Returns it; the
  // reference stays valid for the module's life, moves included.
  Tensor& register_owned_parameter(const std::string& name, Tensor value);
  // Registers a member tensor as a buffer: saved and moved, not optimised.
  Tensor& register_buffer(const std::string& name, Tensor& member);
  // Registers a member module as a child.
  template <typename M>
    requires std::derived_from<M, Module>
  M& register_module(const std::string& name, M& member) {
    member.check_extent(typeid(member) == typeid(M) ? sizeof(M) : 0, "register_module");
    add_child(name, static_cast<Module&>(member));
    return member;
  }
  // libtorch's `fc = register_module("fc", torch::nn::Linear(4, 8))` registers a temporary
  // holder; reel's children are members, so the first error says what to write instead.
  template <typename M>
    requires(std::derived_from<M, Module> && !std::is_lvalue_reference_v<M>)
  void register_module(const std::string&, M&&) {
    static_assert(!sizeof(M),
                  "register_module takes a member module: declare `nn::Linear fc{4, 8};` in the class and call "
                  "register_module(\"fc\", fc) in its constructor (or pass a std::unique_ptr<Module> to own it); "
                  "see docs/from-libtorch.md, 'Modules: TORCH_MODULE holders become plain members'");
  }
  // Registers a heap-held child that this module owns.
  Module& register_module(const std::string& name, std::unique_ptr<Module> owned);
  // Replaces the owned child registered as `name` (ModuleDict's assignment).
  Module& replace_module(const std::string& name, std::unique_ptr<Module> owned);

 public:
  // Throws Error when a tensor registered by this module lies outside its `size`
  // bytes (0: the size is not known, nothing to check). Called where a module of a
  // known type is registered or moved into a container.
  void check_extent(size_t size, const char* where) const;

  // reel's own modules open this first in forward(): the ops they run on the user's
  // behalf then report the user's line that called the module (a forward() the user
  // wrote opens nothing, so its ops report their own lines).
  [[nodiscard]] SiteScope at_caller_site() const;

 private:
  struct Slot {
    std::string name;
    std::ptrdiff_t offset;  // of the member inside *this
    std::unique_ptr<Tensor> owned;  // or a tensor this module holds
  };
  struct Child {
    std::string name;
    Module* module = nullptr;  // kept current by the child's moves; null once it is destroyed
    std::unique_ptr<Module> owned;  // set when this module owns the child
  };
  void add_child(const std::string& name, Module& member);
  void check_not_local(const char* fn, const std::string& name, const void* member) const;
  void repoint(const Module* from, Module* to);  // a child moved
  void forget(const Module* child);  // a child is being destroyed
  void check_new_name(const char* fn, const std::string& name) const;
  std::ptrdiff_t offset_of(const void* member) const;
  Tensor& tensor_at(std::ptrdiff_t offset) const;
  Tensor& tensor_at(const Slot& s) const { return s.owned ? *s.owned : tensor_at(s.offset); }
  Module& child_at(const Child& c) const;
  template <typename F> void visit_tensors(bool params, bool recurse, const std::string& prefix, F&& f) const;

  // A hook that returns void becomes one that returns "no replacement".
  template <typename... A, typename F> static auto hook_returning(F&& f) {
    return [f = std::forward<F>(f)](Module& m, A... a) -> std::optional<Tensor> {
      if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, A...>>) {
        f(m, a...);
        return std::nullopt;
      } else {
        return f(m, a...);
      }
    };
  }
  // kind: 0 forward pre, 1 forward, 2 backward pre, 3 backward (the pre hooks share a
  // signature, as do the others)
  RemovableHandle add_hook(int kind, ForwardPreHook h);
  RemovableHandle add_hook(int kind, ForwardHook h);
  Tensor call_with_hooks(const Tensor& x);
  // forward() as the module declares it: by value (libtorch's) where it does, else by reference
  Tensor call_forward(const Tensor& x) { return static_cast<detail::ForwardByValue&>(*this).forward(x); }
  Tensor forward_by_reference(const Tensor& x) final { return forward(x); }
  const ModulePath* path_under(const Call* parent);

  // This module's path under the module that called it last (parent's path, then its
  // own), so a call finds it with one comparison; a moved module starts afresh.
  struct PathCache {
    const ModulePath* parent = nullptr;
    const ModulePath* path = nullptr;
    PathCache() = default;
    PathCache(PathCache&&) noexcept {}
    PathCache& operator=(PathCache&&) noexcept {
      parent = path = nullptr;
      return *this;
    }
  };

  std::vector<Slot> params_;
  std::vector<Slot> buffers_;
  std::vector<Child> children_;
  Module* parent_ = nullptr;  // the module this one is registered in, if any
  bool training_ = true;
  PathCache path_cache_;
  std::shared_ptr<ModuleHooks> hooks_;  // null until a hook is registered
};

// Writes str(), the module tree as PyTorch prints it: `std::cout << net << "\n";`
std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace reel::nn
