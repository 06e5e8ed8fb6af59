// Module: torch.nn.Module's registration, traversal, freezing, train/eval, repr and hooks. The
// state_dict lives in module_state.cpp, export and execution in module_run.cpp.
#include "kiln/nn/module.h"

#include <fmt/format.h>

#include <atomic>
#include <set>
#include <sstream>

#include "kiln/error.h"
#include "models/nn/generation.h"

namespace kiln::nn {

namespace detail {
namespace {
std::atomic<uint64_t> g_generation{1};
}
uint64_t generation() { return g_generation.load(); }
void bump_generation() { ++g_generation; }
}  // namespace detail

Module::Module() = default;
Module::~Module() = default;

std::vector<Var> Module::call(Tracer& t, const std::vector<Var>& inputs) {
  t.push_scope(*this);
  std::vector<Var> outputs;
  try {
    outputs = forward(t, inputs);
  } catch (Error& e) {
    t.pop_scope();
    // The innermost module names itself; outer ones leave its context alone.
    if (e.message().rfind("module '", 0) != 0) e.add_context(fmt::format("module '{}' ({}): ", t.scope(), type_name()));
    throw;
  }
  Tracer::Call c{this, {}, {}};
  for (const auto& v : inputs) c.inputs.push_back(v.name);
  for (const auto& v : outputs) c.outputs.push_back(v.name);
  t.record_call(std::move(c));
  t.pop_scope();
  return outputs;
}

Var Module::call(Tracer& t, const Var& input) {
  std::vector<Var> out = call(t, std::vector<Var>{input});
  if (out.size() != 1)
    throw InvalidArgument(
        fmt::format("{}: call(Tracer&, const Var&) expects one output, forward returned {}", type_name(), out.size()));
  return out[0];
}

// ---- Registration ------------------------------------------------------------------------------

const Module::Slot* Module::find_slot(const std::string& name) const {
  for (const auto& s : parameters_)
    if (s.name == name) return &s;
  for (const auto& s : buffers_)
    if (s.name == name) return &s;
  return nullptr;
}

Module::Slot* Module::find_slot(const std::string& name) {
  return const_cast<Slot*>(static_cast<const Module*>(this)->find_slot(name));
}

void Module::check_new_name(const std::string& name, const char* what) const {
  if (name.empty()) throw KeyError(fmt::format("{}: {} name can't be empty string \"\"", type_name(), what));
  if (name.find('.') != std::string::npos)
    throw KeyError(fmt::format("{}: {} name can't contain \".\", got \"{}\"", type_name(), what, name));
  bool taken = find_slot(name) != nullptr;
  for (const auto& [n, m] : children_) taken = taken || n == name;
  if (taken) throw KeyError(fmt::format("{}: attribute '{}' already exists", type_name(), name));
}

Tensor& Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name, "parameter");
  if (!value.defined()) throw InvalidArgument(fmt::format("{}: parameter '{}' needs a tensor", type_name(), name));
  if (requires_grad && !is_floating(value.dtype()))
    throw TypeError(fmt::format("{}: parameter '{}' is {}; only floating-point tensors can require gradients",
                                type_name(), name, value.describe()));
  parameters_.push_back(Slot{name, std::move(value), requires_grad, true});
  detail::bump_generation();
  return parameters_.back().value;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
  check_new_name(name, "buffer");
  if (!value.defined()) throw InvalidArgument(fmt::format("{}: buffer '{}' needs a tensor", type_name(), name));
  buffers_.push_back(Slot{name, std::move(value), false, persistent});
  detail::bump_generation();
  return buffers_.back().value;
}

void Module::add_module(const std::string& name, ModulePtr module) {
  check_new_name(name, "module");
  if (!module) throw InvalidArgument(fmt::format("{}: module '{}' is null", type_name(), name));
  if (module.get() == this)
    throw InvalidArgument(fmt::format("{}: module '{}' would contain itself", type_name(), name));
  children_.emplace_back(name, std::move(module));
  detail::bump_generation();
}

// ---- Traversal ---------------------------------------------------------------------------------

namespace {
// A ModulePtr to `m` whether or not a shared_ptr owns it (a module on the stack gets a
// non-owning pointer through the aliasing constructor).
ModulePtr pointer_to(Module& m) {
  ModulePtr p = m.weak_from_this().lock();
  return p ? p : ModulePtr(ModulePtr(), &m);
}
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

std::vector<std::pair<std::string, ModulePtr>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, ModulePtr>> Module::named_modules() {
  std::vector<std::pair<std::string, ModulePtr>> out;
  std::set<const Module*> seen;
  std::function<void(const std::string&, Module&)> walk = [&](const std::string& prefix, Module& m) {
    if (!seen.insert(&m).second) return;  // torch's remove_duplicate
    out.emplace_back(prefix, pointer_to(m));
    for (auto& [name, child] : m.children_) walk(join(prefix, name), *child);
  };
  walk("", *this);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters(bool recurse) {
  std::vector<std::pair<std::string, Tensor*>> out;
  std::set<const void*> seen;
  auto modules = recurse ? named_modules() : std::vector<std::pair<std::string, ModulePtr>>{{"", pointer_to(*this)}};
  for (auto& [prefix, m] : modules)
    for (auto& s : m->parameters_)
      // One entry per parameter even when tied (two slots sharing storage, as GPT-2's head and
      // embedding): torch's named_parameters removes duplicates the same way.
      if (seen.insert(s.value.defined() ? s.value.raw_data() : static_cast<const void*>(&s.value)).second)
        out.emplace_back(join(prefix, s.name), &s.value);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers(bool recurse) {
  std::vector<std::pair<std::string, Tensor*>> out;
  auto modules = recurse ? named_modules() : std::vector<std::pair<std::string, ModulePtr>>{{"", pointer_to(*this)}};
  for (auto& [prefix, m] : modules)
    for (auto& s : m->buffers_) out.emplace_back(join(prefix, s.name), &s.value);
  return out;
}

ModulePtr Module::get_submodule(const std::string& target) {
  if (target.empty()) return pointer_to(*this);
  Module* m = this;
  ModulePtr found;
  size_t start = 0;
  while (start <= target.size()) {
    const size_t dot = target.find('.', start);
    const std::string item = target.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    ModulePtr next;
    for (auto& [name, child] : m->children_)
      if (name == item) next = child;
    if (!next) {
      if (m->find_slot(item) != nullptr) throw KeyError(fmt::format("`{}` is not an nn.Module", item));
      throw KeyError(fmt::format("{} has no attribute `{}`", m->type_name(), item));
    }
    found = next;
    m = next.get();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return found;
}

Tensor& Module::get_parameter(const std::string& target) {
  const size_t dot = target.rfind('.');
  const std::string module_path = dot == std::string::npos ? "" : target.substr(0, dot);
  const std::string name = dot == std::string::npos ? target : target.substr(dot + 1);
  ModulePtr m = get_submodule(module_path);
  for (auto& s : m->parameters_)
    if (s.name == name) return s.value;
  if (m->find_slot(name) != nullptr) throw KeyError(fmt::format("`{}` is not an nn.Parameter", name));
  throw KeyError(fmt::format("{} has no attribute `{}`", m->type_name(), name));
}

bool Module::requires_grad(const std::string& parameter_name) const {
  for (const auto& s : parameters_)
    if (s.name == parameter_name) return s.requires_grad;
  throw KeyError(fmt::format("{} has no parameter `{}`", type_name(), parameter_name));
}

Module& Module::requires_grad_(bool requires_grad) {
  for (auto& [prefix, m] : named_modules())
    for (auto& s : m->parameters_) s.requires_grad = requires_grad;
  return *this;
}

std::vector<std::string> Module::frozen_parameters() {
  std::vector<std::string> out;
  std::set<const void*> seen;
  for (auto& [prefix, m] : named_modules())
    for (auto& s : m->parameters_)
      if (!s.requires_grad && seen.insert(&s).second) out.push_back(join(prefix, s.name));
  return out;
}

Module& Module::train(bool mode) {
  for (auto& [prefix, m] : named_modules()) m->training_ = mode;
  detail::bump_generation();
  return *this;
}

int64_t Module::num_parameters(bool only_trainable) {
  int64_t n = 0;
  std::set<const void*> seen;  // tied parameters count once
  for (auto& [prefix, m] : named_modules())
    for (auto& s : m->parameters_)
      if ((!only_trainable || s.requires_grad) && s.value.defined() && seen.insert(s.value.raw_data()).second)
        n += s.value.numel();
  return n;
}

// ---- repr: torch's Module.__repr__ ----------------------------------------------------------------

namespace {
// torch's _addindent: every line but the first indented by `spaces`.
std::string add_indent(const std::string& s, int spaces) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out += std::string(size_t(spaces), ' ');
  }
  return out;
}
}  // namespace

std::string Module::repr() const {
  std::vector<std::string> extra_lines, child_lines;
  const std::string extra = extra_repr();
  if (!extra.empty()) {
    std::istringstream in(extra);
    for (std::string line; std::getline(in, line);) extra_lines.push_back(line);
  }
  for (const auto& [name, child] : children_) child_lines.push_back("(" + name + "): " + add_indent(child->repr(), 2));
  std::string s = type_name() + "(";
  std::vector<std::string> lines = extra_lines;
  lines.insert(lines.end(), child_lines.begin(), child_lines.end());
  if (!lines.empty()) {
    if (extra_lines.size() == 1 && child_lines.empty()) {
      s += extra_lines[0];
    } else {
      s += "\n";
      for (const auto& l : lines) s += "  " + l + "\n";
    }
  }
  return s + ")";
}

// ---- Hooks -------------------------------------------------------------------------------------

namespace {
template <class List>
RemovableHandle make_handle(const std::weak_ptr<int>& alive, List* list, int id) {
  return RemovableHandle{[alive, list, id] {
    if (alive.expired()) return;  // the module is gone: nothing to detach
    for (auto it = list->begin(); it != list->end(); ++it)
      if (it->first == id) {
        list->erase(it);
        detail::bump_generation();
        return;
      }
  }};
}
}  // namespace

RemovableHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  if (!hook) throw InvalidArgument(fmt::format("{}: register_forward_pre_hook got an empty function", type_name()));
  const int id = next_hook_id_++;
  pre_hooks_.emplace_back(id, std::move(hook));
  detail::bump_generation();
  return make_handle(alive_, &pre_hooks_, id);
}

RemovableHandle Module::register_forward_hook(ForwardHook hook) {
  if (!hook) throw InvalidArgument(fmt::format("{}: register_forward_hook got an empty function", type_name()));
  const int id = next_hook_id_++;
  hooks_.emplace_back(id, std::move(hook));
  detail::bump_generation();
  return make_handle(alive_, &hooks_, id);
}

}  // namespace kiln::nn
