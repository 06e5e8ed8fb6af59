// Sequential, ModuleList, ModuleDict: torch's containers. Children are named "0", "1", ... (or by
// the caller), so state_dict keys are torch's ("0.weight", "layers.3.bias").
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/error.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// ---- Sequential ----------------------------------------------------------------------------------

Sequential::Sequential(std::vector<ModulePtr> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

Sequential::Sequential(const std::vector<std::pair<std::string, ModulePtr>>& named) {
  for (const auto& [name, m] : named) push_back(name, m);
}

void Sequential::push_back(ModulePtr m) { add_module(std::to_string(size()), std::move(m)); }
void Sequential::push_back(const std::string& name, ModulePtr m) { add_module(name, std::move(m)); }
size_t Sequential::size() const { return named_children().size(); }

ModulePtr Sequential::operator[](size_t i) const {
  auto children = named_children();
  if (i >= children.size())
    throw InvalidArgument(
        fmt::format("Sequential: index {} is out of range (it holds {} modules)", i, children.size()));
  return children[i].second;
}

std::vector<Var> Sequential::forward(Tracer& t, const std::vector<Var>& inputs) {
  std::vector<Var> x = inputs;
  for (auto& [name, m] : named_children()) x = m->call(t, x);
  return x;
}

// ---- ModuleList ----------------------------------------------------------------------------------

ModuleList::ModuleList(std::vector<ModulePtr> modules) {
  for (auto& m : modules) append(std::move(m));
}

void ModuleList::append(ModulePtr m) { add_module(std::to_string(size()), std::move(m)); }
size_t ModuleList::size() const { return named_children().size(); }

ModulePtr ModuleList::operator[](size_t i) const {
  auto children = named_children();
  if (i >= children.size())
    throw InvalidArgument(
        fmt::format("ModuleList: index {} is out of range (it holds {} modules)", i, children.size()));
  return children[i].second;
}

std::vector<Var> ModuleList::forward(Tracer&, const std::vector<Var>&) {
  throw InvalidArgument("ModuleList has no forward: call the modules it holds from the forward of its owner");
}

// ---- ModuleDict ----------------------------------------------------------------------------------

ModuleDict::ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& modules) {
  for (const auto& [key, m] : modules) insert(key, m);
}

void ModuleDict::insert(const std::string& key, ModulePtr m) { add_module(key, std::move(m)); }

ModulePtr ModuleDict::at(const std::string& key) const {
  for (const auto& [name, m] : named_children())
    if (name == key) return m;
  throw KeyError(fmt::format("ModuleDict has no key '{}' (keys: {})", key, fmt::join(keys(), ", ")));
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, m] : named_children())
    if (name == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : named_children()) out.push_back(name);
  return out;
}

std::vector<Var> ModuleDict::forward(Tracer&, const std::vector<Var>&) {
  throw InvalidArgument("ModuleDict has no forward: call the modules it holds from the forward of its owner");
}

}  // namespace kiln::nn
