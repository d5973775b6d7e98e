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
// Registration stores each member's offset inside its module, not its address,
// so modules can be moved as whole objects (Sequential moves layers onto the
// heap; a member of a moved object is found at the same offset in the new one).
// Hence: register only members of `*this` (never a local or a heap tensor: give
// heap-held children to register_module(name, std::unique_ptr<Module>)), and never
// slice a module (move a Derived into a Base). Modules are not copyable: a copy
// would share parameters silently.
#pragma once
#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation of a one-input module. The base throws Error (a module with
  // several inputs defines its own call operator instead).
  virtual Tensor forward(const Tensor& x);
  // Calls forward() with the caller's line as the site of every op inside.
  Tensor operator()(const Tensor& x, Site site = {});
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
  // Values are converted to each tensor's dtype and device.
  void save(const std::string& path) const;
  void load(const std::string& path);
  // `source` names the origin in errors. strict: every name must match both ways.
  void load_state_dict(const NamedTensors& state, bool strict = true, const std::string& source = "state dict");

 protected:
  Module() = default;
  Module(Module&& other) noexcept = default;
  Module& operator=(Module&& other) noexcept = default;

  // Registers a member tensor as a parameter (made requires_grad). An undefined
  // tensor (e.g. a disabled bias) is not registered. Returns the member.
  Tensor& register_parameter(const std::string& name, Tensor& member);
  // Registers a member tensor as a buffer: saved and moved, not optimised.
  Tensor& register_buffer(const std::string& name, Tensor& member);
  // Registers a member module as a child.
  template <typename M>
    requires std::derived_from<M, Module>
  M& register_module(const std::string& name, M& member) {
    add_child(name, static_cast<Module&>(member));
    return member;
  }
  // Registers a heap-held child that this module owns.
  Module& register_module(const std::string& name, std::unique_ptr<Module> owned);

 private:
  struct Slot {
    std::string name;
    std::ptrdiff_t offset;  // of the member inside *this
  };
  struct Child {
    std::string name;
    std::ptrdiff_t offset = 0;  // of a member child
    std::unique_ptr<Module> owned;  // or a child this module owns
  };
  void add_child(const std::string& name, Module& member);
  void check_new_name(const char* fn, const std::string& name) const;
  std::ptrdiff_t offset_of(const void* member) const;
  Tensor& tensor_at(std::ptrdiff_t offset) const;
  Module& child_at(const Child& c) const;
  template <typename F> void visit_tensors(bool params, bool recurse, const std::string& prefix, F&& f) const;

  std::vector<Slot> params_;
  std::vector<Slot> buffers_;
  std::vector<Child> children_;
  bool training_ = true;
};

}  // namespace reel::nn
