// Containers of modules, as PyTorch's nn.ModuleList and nn.ModuleDict: the way to hold
// a number of layers chosen at run time (a std::vector of layers cannot be registered
// by member offset, see module.h). Each owns its modules (moved in, kept on the heap, so
// references to them stay valid for the container's lifetime) and registers them as its
// children: ModuleList by index ("0", "1", ...), ModuleDict by key, which makes the
// checkpoint keys "blocks.0.weight", "heads.cls.bias" as in PyTorch. Neither has a
// forward: the module holding it decides how its layers are called.
//
//   struct Net : nn::Module {
//     nn::ModuleList blocks;
//     Net(int depth) {
//       for (int i = 0; i < depth; ++i) blocks.push_back(nn::Linear(16, 16));
//       register_module("blocks", blocks);
//     }
//     Tensor forward(const Tensor& x) override {
//       Tensor y = x;
//       for (nn::Module& block : blocks) y = reel::relu(block(y));
//       return y;
//     }
//   };
#pragma once
#include <concepts>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "module.h"

namespace reel::nn {

// A module moved into a container: an rvalue of a type derived from Module.
template <typename M>
concept ModuleValue = std::derived_from<std::remove_cvref_t<M>, Module> && !std::is_lvalue_reference_v<M>;

// Modules in order, children "0", "1", ...
//   nn::ModuleList list{nn::Linear(4, 8), nn::ReLU()};
//   nn::Linear& fc = list.push_back(nn::Linear(8, 2));
//   list[0](x); list.at<nn::Linear>(2).weight; for (nn::Module& m : list) ...
class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <ModuleValue... M>
    requires(sizeof...(M) > 0)
  explicit ModuleList(M&&... modules) {
    (push_back(std::move(modules)), ...);
  }
  ModuleList(ModuleList&&) noexcept = default;
  ModuleList& operator=(ModuleList&&) noexcept = default;

  // Appends a module (moved in); returns a reference to it.
  template <ModuleValue M>
  std::remove_cvref_t<M>& push_back(M&& module) {
    module.check_extent(typeid(module) == typeid(M) ? sizeof(M) : 0, "ModuleList::push_back");
    auto owned = std::make_unique<std::remove_cvref_t<M>>(std::move(module));
    auto& ref = *owned;
    push_back(std::unique_ptr<Module>(std::move(owned)));
    return ref;
  }
  Module& push_back(std::unique_ptr<Module> module);
  template <ModuleValue M>
  std::remove_cvref_t<M>& append(M&& module) {  // PyTorch's spelling
    return push_back(std::move(module));
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Module& operator[](size_t i) const;  // throws Error when out of range
  // The i-th module as its own type; throws Error when it is another type.
  template <typename M>
  M& at(size_t i) const {
    auto* m = dynamic_cast<M*>(&(*this)[i]);
    if (!m) wrong_type(i);
    return *m;
  }

  // Iterates the modules as Module&.
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Module;
    using difference_type = std::ptrdiff_t;
    using pointer = Module*;
    using reference = Module&;
    iterator() = default;
    explicit iterator(std::vector<Module*>::const_iterator it) : it_(it) {}
    Module& operator*() const { return **it_; }
    Module* operator->() const { return *it_; }
    iterator& operator++() { ++it_; return *this; }
    iterator operator++(int) { iterator old = *this; ++it_; return old; }
    bool operator==(const iterator& o) const { return it_ == o.it_; }
   private:
    std::vector<Module*>::const_iterator it_;
  };
  iterator begin() const { return iterator(modules_.begin()); }
  iterator end() const { return iterator(modules_.end()); }

  std::string type_name() const override { return "ModuleList"; }

 private:
  [[noreturn]] void wrong_type(size_t i) const;
  std::vector<Module*> modules_;
};

// Modules by key, in insertion order; children named by their keys (non-empty, no '.').
//   nn::ModuleDict heads;
//   heads.insert("cls", nn::Linear(16, 10));
//   heads["cls"](x); heads.at<nn::Linear>("cls").bias; for (auto& [key, m] : heads) ...
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(ModuleDict&&) noexcept = default;
  ModuleDict& operator=(ModuleDict&&) noexcept = default;

  // Inserts a module (moved in) under `key`, replacing the one there (as PyTorch's
  // d[key] = m; the replaced module is destroyed, and keeps its place in the order).
  template <ModuleValue M>
  std::remove_cvref_t<M>& insert(const std::string& key, M&& module) {
    module.check_extent(typeid(module) == typeid(M) ? sizeof(M) : 0, "ModuleDict::insert");
    auto owned = std::make_unique<std::remove_cvref_t<M>>(std::move(module));
    auto& ref = *owned;
    insert(key, std::unique_ptr<Module>(std::move(owned)));
    return ref;
  }
  Module& insert(const std::string& key, std::unique_ptr<Module> module);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  bool contains(const std::string& key) const;
  std::vector<std::string> keys() const;
  Module& operator[](const std::string& key) const;  // throws Error naming the keys there when absent
  template <typename M>
  M& at(const std::string& key) const {
    auto* m = dynamic_cast<M*>(&(*this)[key]);
    if (!m) wrong_type(key);
    return *m;
  }
  // Iterates (key, Module*) pairs in insertion order.
  using Entry = std::pair<std::string, Module*>;
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

  std::string type_name() const override { return "ModuleDict"; }

 private:
  [[noreturn]] void wrong_type(const std::string& key) const;
  std::vector<Entry> entries_;
};

}  // namespace reel::nn
