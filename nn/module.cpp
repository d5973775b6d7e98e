// nn::Module: registration by member offset, the module tree walks, device and
// dtype moves that keep tensor identity, and checkpoints.
#include "module.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "../autograd/autocast.h"
#include "../autograd/grad_mode.h"
#include "../formats/detect.h"
#include "../formats/safetensors.h"
#include "../formats/torch_pt.h"

namespace reel::nn {

// ---- registration
namespace {
// The calling thread's stack, [low, high): a registered tensor or child there, and not
// inside a module that is itself there, is a local that dies before the module.
std::pair<const char*, const char*> thread_stack() {
  thread_local std::pair<const char*, const char*> bounds = [] {
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &addr, &size);
      pthread_attr_destroy(&attr);
    }
    return std::pair<const char*, const char*>(static_cast<const char*>(addr), static_cast<const char*>(addr) + size);
  }();
  return bounds;
}
}  // namespace

Module::~Module() {
  if (parent_) parent_->forget(this);
  for (Child& c : children_)
    if (c.module) c.module->parent_ = nullptr;  // owned ones too: they need not tell us as they go
}

Module::Module(Module&& other) noexcept
    : params_(std::move(other.params_)),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)),
      parent_(std::exchange(other.parent_, nullptr)),
      training_(other.training_) {
  // Member children are moved after this constructor runs and repoint us then; children
  // outside the object (container elements, owned ones) stay where they are.
  for (Child& c : children_)
    if (c.module) c.module->parent_ = this;
  if (parent_) parent_->repoint(&other, this);
}

Module& Module::operator=(Module&& other) noexcept {
  if (this == &other) return *this;
  for (Child& c : children_)  // the old children leave (owned ones are destroyed below)
    if (c.module) c.module->parent_ = nullptr;
  std::vector<Child> old = std::exchange(children_, std::move(other.children_));
  params_ = std::move(other.params_);
  buffers_ = std::move(other.buffers_);
  training_ = other.training_;
  for (Child& c : children_)
    if (c.module) c.module->parent_ = this;
  // A member child of a module being assigned: its parent's entry moves from other to
  // this. Otherwise this keeps its own place in its parent.
  if (other.parent_ && (!parent_ || other.parent_ == parent_)) {
    other.parent_->repoint(&other, this);
    parent_ = std::exchange(other.parent_, nullptr);
  }
  return *this;
}

void Module::repoint(const Module* from, Module* to) {
  for (Child& c : children_)
    if (c.module == from) c.module = to;
}

void Module::forget(const Module* child) {
  for (Child& c : children_)
    if (c.module == child && !c.owned) c.module = nullptr;
}

std::ptrdiff_t Module::offset_of(const void* member) const {
  return static_cast<const char*>(member) - reinterpret_cast<const char*>(this);
}

Tensor& Module::tensor_at(std::ptrdiff_t offset) const {
  return *reinterpret_cast<Tensor*>(const_cast<char*>(reinterpret_cast<const char*>(this)) + offset);
}

Module& Module::child_at(const Child& c) const {
  if (!c.module)
    throw Error(fmt::format("{}: child module \"{}\" was destroyed while registered (a local variable, or an "
                            "element removed from a container); keep children as members or in an "
                            "nn::ModuleList", type_name(), c.name));
  return *c.module;
}

void Module::check_not_local(const char* fn, const std::string& name, const void* member) const {
  // plain names, not a structured binding: clang's OpenMP mode cannot capture one in a lambda
  const auto stack = thread_stack();
  const char *low = stack.first, *high = stack.second;
  auto on_stack = [&](const void* p) { return low <= static_cast<const char*>(p) && static_cast<const char*>(p) < high; };
  const char* self = static_cast<const char*>(dynamic_cast<const void*>(this));
  if (on_stack(member) && !(on_stack(self) && static_cast<const char*>(member) > self))
    throw Error(fmt::format("{}: {}: \"{}\" is a local variable, which dies before the module; register "
                            "members of the module (or give a child by std::unique_ptr)", type_name(), fn, name));
}

void Module::check_extent(size_t size, const char* where) const {
  if (size == 0) return;
  const char* self = static_cast<const char*>(dynamic_cast<const void*>(this));
  for (const auto* slots : {&params_, &buffers_}) {
    for (const Slot& s : *slots) {
      if (s.owned) continue;  // held by the module on the heap: moves with it
      const char* at = reinterpret_cast<const char*>(this) + s.offset;
      if (at < self || at + sizeof(Tensor) > self + size)
        throw Error(fmt::format("{}: {}: the tensor registered as \"{}\" is not a member of this {} (it lies "
                                "outside its {} bytes: an element of a container, or on the heap), so it would be "
                                "lost when the module moves; register members only, and keep a variable number "
                                "of layers in nn::ModuleList", type_name(), where, s.name, type_name(), size));
    }
  }
}

void Module::check_new_name(const char* fn, const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw Error(fmt::format("{}: {}: name \"{}\" must be non-empty and contain no '.'", type_name(), fn, name));
  auto taken = [&](const auto& slots) {
    for (const auto& s : slots)
      if (s.name == name) return true;
    return false;
  };
  if (taken(params_) || taken(buffers_) || taken(children_))
    throw Error(fmt::format("{}: {}: name \"{}\" is already registered", type_name(), fn, name));
}

Tensor& Module::register_parameter(const std::string& name, Tensor& member) {
  check_new_name("register_parameter", name);
  check_not_local("register_parameter", name, &member);
  if (!member.defined()) return member;
  if (!member.is_floating_point())
    throw Error(fmt::format("{}: register_parameter: \"{}\" must be floating point, got {}", type_name(), name,
                            dtype_name(member.dtype())));
  if (!member.is_leaf())
    throw Error(fmt::format("{}: register_parameter: \"{}\" is the result of an op; register a leaf "
                            "(call .detach() on it first)", type_name(), name));
  member.requires_grad_(true);
  params_.push_back({name, offset_of(&member), nullptr});
  return member;
}

Tensor& Module::register_owned_parameter(const std::string& name, Tensor value) {
  if (!value.defined())
    throw Error(fmt::format("{}: register_owned_parameter: \"{}\" is undefined", type_name(), name));
  auto held = std::make_unique<Tensor>(std::move(value));
  register_parameter(name, *held);  // checks; records an offset, which the owned tensor overrides
  params_.back().owned = std::move(held);
  return *params_.back().owned;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& member) {
  check_new_name("register_buffer", name);
  check_not_local("register_buffer", name, &member);
  if (!member.defined()) return member;
  buffers_.push_back({name, offset_of(&member), nullptr});
  return member;
}

void Module::add_child(const std::string& name, Module& member) {
  check_new_name("register_module", name);
  if (&member == this) throw Error(fmt::format("{}: register_module: \"{}\" is the module itself", type_name(), name));
  check_not_local("register_module", name, &member);
  if (member.parent_)
    throw Error(fmt::format("{}: register_module: \"{}\" is already registered in a {}; a module has one parent",
                            type_name(), name, member.parent_->type_name()));
  children_.push_back({name, &member, nullptr});
  member.parent_ = this;
}

Module& Module::register_module(const std::string& name, std::unique_ptr<Module> owned) {
  check_new_name("register_module", name);
  if (!owned) throw Error(fmt::format("{}: register_module: \"{}\" is null", type_name(), name));
  if (owned->parent_)
    throw Error(fmt::format("{}: register_module: \"{}\" is already registered in a {}; a module has one parent",
                            type_name(), name, owned->parent_->type_name()));
  owned->parent_ = this;
  Module* m = owned.get();
  children_.push_back({name, m, std::move(owned)});
  return *m;
}

Module& Module::replace_module(const std::string& name, std::unique_ptr<Module> owned) {
  for (Child& c : children_) {
    if (c.name != name) continue;
    if (!c.owned) throw Error(fmt::format("{}: replace_module: \"{}\" is not owned by this module", type_name(), name));
    if (!owned) throw Error(fmt::format("{}: replace_module: \"{}\" is null", type_name(), name));
    owned->parent_ = this;
    c.owned->parent_ = nullptr;
    c.module = owned.get();
    c.owned = std::move(owned);
    return *c.module;
  }
  return register_module(name, std::move(owned));
}

namespace {
// "ns::Net" -> "Net", as PyTorch prints the class name alone; every name in a template's
// arguments loses its qualifiers too: "ns::ResNet<ns::ResidualBlock>" -> "ResNet<ResidualBlock>",
// "(anonymous namespace)::Net" and a local class's "f()::Net" -> "Net".
std::string unqualified_type_name(std::string_view name) {
  auto opens = [](char c) { return c == '<' || c == '(' || c == '[' || c == '{'; };
  auto closes = [](char c) { return c == '>' || c == ')' || c == ']' || c == '}'; };
  while (!name.empty() && name.back() == ' ') name.remove_suffix(1);  // "vector<int, allocator<int> > "
  size_t start = 0;  // after the last "::" outside brackets
  int depth = 0;
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (opens(name[i])) ++depth;
    else if (closes(name[i])) --depth;
    else if (depth == 0 && name[i] == ':' && name[i + 1] == ':') start = i + 2, ++i;
  }
  std::string_view last = name.substr(start);
  size_t open = last.find('<');
  if (open == std::string_view::npos || last.back() != '>') return std::string(last);
  std::string out(last.substr(0, open + 1));
  size_t arg = open + 1;
  depth = 0;
  for (size_t i = open + 1; i + 1 < last.size(); ++i) {  // each top-level argument, unqualified
    if (opens(last[i])) ++depth;
    else if (closes(last[i])) --depth;
    if (depth == 0 && last[i] == ',') {
      out += unqualified_type_name(last.substr(arg, i - arg)) + ", ";
      arg = i + 1;
      while (last[arg] == ' ') ++arg;
    }
  }
  return out + unqualified_type_name(last.substr(arg, last.size() - 1 - arg)) + ">";
}
}  // namespace

// ---- calling
Tensor Module::forward(const Tensor&) {
  throw Error(fmt::format("{}: forward is not defined for this module: declare `Tensor forward(const Tensor& x) "
                          "override` (or libtorch's `Tensor forward(Tensor x)`); a module with other inputs is "
                          "called through its own forward or call operator", type_name()));
}

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  return unqualified_type_name(name);
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.str(); }

std::string Module::str() const {
  std::string head = type_name() + "(" + extra_repr();
  if (children_.empty()) return head + ")";
  std::ostringstream os;
  os << head << (extra_repr().empty() ? "" : ",") << "\n";
  for (const Child& c : children_) {
    std::string sub = child_at(c).str();
    std::string indented;
    for (char ch : sub) {
      indented += ch;
      if (ch == '\n') indented += "  ";
    }
    os << "  (" << c.name << "): " << indented << "\n";
  }
  os << ")";
  return os.str();
}

// ---- walks
template <typename F>
void Module::visit_tensors(bool params, bool recurse, const std::string& prefix, F&& f) const {
  for (const Slot& s : params ? params_ : buffers_) f(prefix + s.name, tensor_at(s));
  if (!recurse) return;
  for (const Child& c : children_) child_at(c).visit_tensors(params, true, prefix + c.name + ".", f);
}

namespace {
// Shared tensors (one impl registered twice) appear under their first name only.
struct Dedup {
  std::set<const TensorImpl*> seen;
  bool first(const Tensor& t) { return seen.insert(t.impl()).second; }
};
}  // namespace

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  Dedup d;
  visit_tensors(true, recurse, "", [&](const std::string& n, Tensor& t) {
    if (t.defined() && d.first(t)) out.emplace_back(n, t);
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  Dedup d;
  visit_tensors(false, recurse, "", [&](const std::string& n, Tensor& t) {
    if (t.defined() && d.first(t)) out.emplace_back(n, t);
  });
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const Child& c : children_) out.emplace_back(c.name, &child_at(c));
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const Child& c : children_) out.push_back(&child_at(c));
  return out;
}

NamedTensors Module::state_dict() const {
  // PyTorch's order: a module's parameters, then its buffers, then its children's.
  NamedTensors out;
  Dedup d;
  auto walk = [&](auto& self, const Module& m, const std::string& prefix) -> void {
    m.visit_tensors(true, false, prefix, [&](const std::string& n, Tensor& t) {
      if (t.defined() && d.first(t)) out.emplace_back(n, t);
    });
    m.visit_tensors(false, false, prefix, [&](const std::string& n, Tensor& t) {
      if (t.defined() && d.first(t)) out.emplace_back(n, t);
    });
    for (const Child& c : m.children_) self(self, m.child_at(c), prefix + c.name + ".");
  };
  walk(walk, *this, "");
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  std::set<const Module*> seen;
  auto walk = [&](auto& self, const Module& m, const std::string& name) -> void {
    if (!seen.insert(&m).second) return;
    out.emplace_back(name, const_cast<Module*>(&m));
    for (const Child& c : m.children_) self(self, m.child_at(c), name.empty() ? c.name : name + "." + c.name);
  };
  walk(walk, *this, "");
  return out;
}

std::vector<Module*> Module::modules() const {
  std::vector<Module*> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const Child& c : children_) child_at(c).apply(fn);
  fn(*this);
  return *this;
}

Module& Module::requires_grad_(bool on) {
  for (Tensor p : parameters()) p.requires_grad_(on);
  return *this;
}

// ---- mode, devices, gradients
Module& Module::train(bool on) {
  training_ = on;
  for (const Child& c : children_) child_at(c).train(on);
  return *this;
}

namespace {
// Replaces the data behind t's handle with `moved` (same shape): every copy of the
// handle, an optimizer's included, sees the new device or dtype.
void rebind(Tensor& t, const Tensor& moved) {
  TensorImpl* impl = t.impl();
  impl->storage = moved.storage();
  impl->strides = moved.strides();
  impl->offset = moved.offset();
  impl->dtype = moved.dtype();
  autocast_copy_drop(t);  // the old storage is no longer pinned by it
}

template <typename Convert>
void convert_all(const Module& m, Convert convert) {
  NoGradGuard guard;
  for (Tensor t : m.parameters()) {
    if (Tensor moved = convert(t); moved.defined()) rebind(t, moved);
    if (Tensor g = t.grad(); g.defined())
      if (Tensor moved = convert(g); moved.defined()) rebind(g, moved);
  }
  for (Tensor t : m.buffers())
    if (Tensor moved = convert(t); moved.defined()) rebind(t, moved);
}
}  // namespace

Module& Module::to(Device device) {
  convert_all(*this, [&](const Tensor& t) {
    return t.device() == device ? Tensor() : t.detach().to(device);
  });
  return *this;
}

Module& Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw Error(fmt::format("{}: to: expected a floating-point dtype, got {}", type_name(), dtype_name(dtype)));
  convert_all(*this, [&](const Tensor& t) {
    return !t.is_floating_point() || t.dtype() == dtype ? Tensor() : t.detach().to(dtype).contiguous();
  });
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard guard;
  for (Tensor p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else g.zero_();
  }
}

// ---- checkpoints
namespace {
bool torch_name(const std::string& path) { return path.ends_with(".pt") || path.ends_with(".pth"); }
}  // namespace

// A libtorch port's save("model.pt") expects torch.save's format; reel writes safetensors
// whatever the name, and says so once per process rather than leave Python's torch.load
// to fail on the file later.
void Module::save(const std::string& path) const {
  safetensors::save(path, state_dict(), {{"format", "pt"}});
  static std::atomic<bool> told{false};
  if (torch_name(path) && !told.exchange(true))
    std::fprintf(stderr,
                 "reel: %s is written in the safetensors format, not torch.save's (reel writes no pickle); "
                 "load() reads it back, Python reads it with safetensors.torch.load_file (said once)\n",
                 path.c_str());
}

// The format is read from the file's first bytes, so a file loads whatever its name; one
// that is neither (or cannot be opened) goes to the reader its name suggests, whose error
// says what is wrong with it.
void Module::load(const std::string& path) {
  std::optional<formats::Format> format = formats::detect_file(path);
  const bool known = format && *format != formats::Format::unknown;
  if (known ? *format == formats::Format::safetensors : !torch_name(path)) {
    safetensors::File f = safetensors::load(path);
    load_state_dict(f.tensors, true, path);
    return;
  }
  torch_pt::File f = torch_pt::load(path);
  // a state dict holds tensors only: a checkpoint's epoch or a nested "model" dict is
  // for the caller to pick apart (torch_pt::load, then load_state_dict)
  if (!f.values.empty()) {
    std::string list;
    for (auto& [name, v] : f.values) list += fmt::format("{}\"{}\" ({})", list.empty() ? "" : ", ", name, kind_name(v.kind));
    throw Error(fmt::format("{}: load from {}: not a state dict: it holds plain values {} besides tensors (read it "
                            "with torch_pt::load and pass the tensors to load_state_dict); nothing was loaded",
                            type_name(), path, list));
  }
  load_state_dict(f.tensors, true, path);
}

void Module::load_state_dict(const NamedTensors& state, bool strict, const std::string& source) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  NamedTensors mine = state_dict();
  std::vector<std::string> problems, missing;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  std::set<std::string> used;
  for (auto& [name, dst] : mine) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    const Tensor& src = *it->second;
    if (!src.defined()) {
      problems.push_back(fmt::format("\"{}\" is undefined", name));
    } else if (!(src.shape() == dst.shape())) {
      problems.push_back(fmt::format("\"{}\" has shape {}, the model expects {}", name, src.shape().str(),
                                     dst.shape().str()));
    } else if (is_floating(src.dtype()) != is_floating(dst.dtype())) {
      problems.push_back(fmt::format("\"{}\" is {}, the model expects {}", name, dtype_name(src.dtype()),
                                     dtype_name(dst.dtype())));
    } else {
      copies.emplace_back(dst, &src);
    }
  }
  if (strict && !missing.empty()) {
    std::string list;
    for (auto& n : missing) list += (list.empty() ? "\"" : ", \"") + n + "\"";
    problems.push_back("missing " + list);
  }
  if (strict) {
    std::string list;
    for (auto& [name, t] : state)
      if (!used.count(name)) list += (list.empty() ? "\"" : ", \"") + name + "\"";
    if (!list.empty()) problems.push_back("unexpected " + list);
  }
  if (!problems.empty()) {
    std::string all;
    for (auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw Error(fmt::format("{}: load from {}: {}; nothing was loaded", type_name(), source, all));
  }
  NoGradGuard guard;
  for (auto& [dst, src] : copies) dst.copy_(*src);
}

}  // namespace reel::nn
