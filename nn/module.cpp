// nn::Module: registration by member offset, the module tree walks, device and
// dtype moves that keep tensor identity, and checkpoints.
#include "module.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "../autograd/grad_mode.h"
#include "../tensor/safetensors.h"

namespace reel::nn {

// ---- registration
std::ptrdiff_t Module::offset_of(const void* member) const {
  return static_cast<const char*>(member) - reinterpret_cast<const char*>(this);
}

Tensor& Module::tensor_at(std::ptrdiff_t offset) const {
  return *reinterpret_cast<Tensor*>(const_cast<char*>(reinterpret_cast<const char*>(this)) + offset);
}

Module& Module::child_at(const Child& c) const {
  if (c.owned) return *c.owned;
  return *reinterpret_cast<Module*>(const_cast<char*>(reinterpret_cast<const char*>(this)) + c.offset);
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
  if (!member.defined()) return member;
  if (!member.is_floating_point())
    throw Error(fmt::format("{}: register_parameter: \"{}\" must be floating point, got {}", type_name(), name,
                            dtype_name(member.dtype())));
  if (!member.is_leaf())
    throw Error(fmt::format("{}: register_parameter: \"{}\" is the result of an op; register a leaf "
                            "(call .detach() on it first)", type_name(), name));
  member.requires_grad_(true);
  params_.push_back({name, offset_of(&member)});
  return member;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& member) {
  check_new_name("register_buffer", name);
  if (!member.defined()) return member;
  buffers_.push_back({name, offset_of(&member)});
  return member;
}

void Module::add_child(const std::string& name, Module& member) {
  check_new_name("register_module", name);
  if (&member == this) throw Error(fmt::format("{}: register_module: \"{}\" is the module itself", type_name(), name));
  children_.push_back({name, offset_of(&member), nullptr});
}

Module& Module::register_module(const std::string& name, std::unique_ptr<Module> owned) {
  check_new_name("register_module", name);
  if (!owned) throw Error(fmt::format("{}: register_module: \"{}\" is null", type_name(), name));
  children_.push_back({name, 0, std::move(owned)});
  return *children_.back().owned;
}

// ---- calling
Tensor Module::forward(const Tensor&) {
  throw Error(fmt::format("{}: forward(const Tensor&) is not defined for this module; override it, "
                          "or call the module's own forward", type_name()));
}

Tensor Module::operator()(const Tensor& x, Site site) {
  SiteScope scope(site);
  return forward(x);
}

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // "ns::Net" -> "Net", as PyTorch prints the class name alone
  size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

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
  for (const Slot& s : params ? params_ : buffers_) f(prefix + s.name, tensor_at(s.offset));
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
void Module::save(const std::string& path) const {
  safetensors::save(path, state_dict(), {{"format", "pt"}});
}

void Module::load(const std::string& path) {
  safetensors::File f = safetensors::load(path);
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
