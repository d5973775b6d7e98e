// nn::ModuleList and nn::ModuleDict: owned children registered by index or key.
#include "containers.h"

#include <fmt/format.h>

namespace reel::nn {

// ---- ModuleList
Module& ModuleList::push_back(std::unique_ptr<Module> module) {
  Module& m = register_module(std::to_string(modules_.size()), std::move(module));
  modules_.push_back(&m);
  return m;
}

Module& ModuleList::operator[](size_t i) const {
  if (i >= modules_.size())
    throw Error(fmt::format("ModuleList: index {} is out of range for {} modules", i, modules_.size()));
  return *modules_[i];
}

void ModuleList::wrong_type(size_t i) const {
  throw Error(fmt::format("ModuleList::at: module {} is a {}, not the type asked for", i, modules_[i]->type_name()));
}

// ---- ModuleDict
Module& ModuleDict::insert(const std::string& key, std::unique_ptr<Module> module) {
  for (Entry& e : entries_)
    if (e.first == key) return *(e.second = &replace_module(key, std::move(module)));
  Module& m = register_module(key, std::move(module));
  entries_.emplace_back(key, &m);
  return m;
}

bool ModuleDict::contains(const std::string& key) const {
  for (const Entry& e : entries_)
    if (e.first == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.first);
  return out;
}

Module& ModuleDict::operator[](const std::string& key) const {
  for (const Entry& e : entries_)
    if (e.first == key) return *e.second;
  std::string have;
  for (const Entry& e : entries_) have += (have.empty() ? "\"" : ", \"") + e.first + "\"";
  throw Error(fmt::format("ModuleDict: no module under key \"{}\" (keys: {})", key, have.empty() ? "none" : have));
}

void ModuleDict::wrong_type(const std::string& key) const {
  throw Error(fmt::format("ModuleDict::at: module \"{}\" is a {}, not the type asked for", key, (*this)[key].type_name()));
}

}  // namespace reel::nn
