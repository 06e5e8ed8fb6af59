// state_dict / load_state_dict with torch's keys, order and error messages, and safetensors files.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <set>

#include "kiln/error.h"
#include "kiln/nn/module.h"
#include "kiln/safetensors.h"
#include "models/nn/generation.h"

namespace kiln::nn {

namespace {

std::string quoted_list(const std::vector<std::string>& keys) {
  std::vector<std::string> q;
  q.reserve(keys.size());
  for (const auto& k : keys) q.push_back("\"" + k + "\"");
  return fmt::format("{}", fmt::join(q, ", "));
}

// torch's copy_: values converted to the destination's dtype (integers through int64 so that
// large counts survive, everything else through double).
void copy_converting(Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) {
    dst.copy_from(src);
    return;
  }
  const Tensor s = src.contiguous();
  Tensor packed = dst.is_contiguous() ? dst : Tensor::empty(dst.dtype(), dst.shape());
  const bool integral = (is_integer(dst.dtype()) || dst.dtype() == DType::Bool) && is_integer(s.dtype());
  visit_dtype(packed.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    D* out = packed.data<D>();
    if constexpr (std::is_integral_v<D>) {
      if (integral) {
        const std::vector<int64_t> v = s.to_int64_vector();
        for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<D>(v[i]);
        return;
      }
    }
    {
      for (int64_t i = 0; i < s.numel(); ++i) out[i] = from_double<D>(s.item_as_double(i));
    }
  });
  if (!dst.is_contiguous()) dst.copy_from(packed);
}

}  // namespace

// Every (key, tensor) of the state_dict, in torch's order: a module's parameters in registration
// order, then its persistent buffers, then its children, recursively. A module reached twice
// appears under both prefixes, as in torch.
void Module::visit_state(const std::string& prefix, const std::function<void(const std::string&, Tensor&)>& f) {
  for (auto& s : parameters_) f(prefix + s.name, s.value);
  for (auto& s : buffers_)
    if (s.persistent) f(prefix + s.name, s.value);
  for (auto& [name, child] : children_) child->visit_state(prefix + name + ".", f);
}

std::string IncompatibleKeys::describe() const {
  std::vector<std::string> msgs;
  if (!missing_keys.empty())
    msgs.push_back(fmt::format("Missing key(s) in state_dict: {}. ", quoted_list(missing_keys)));
  if (!unexpected_keys.empty())
    msgs.push_back(fmt::format("Unexpected key(s) in state_dict: {}. ", quoted_list(unexpected_keys)));
  for (const auto& m : mismatched)
    msgs.push_back(
        fmt::format("size mismatch for {}: copying a param with shape {} from checkpoint, the shape in "
                    "current model is {}.",
                    m.key, to_string(m.got), to_string(m.expected)));
  return fmt::format("{}", fmt::join(msgs, "\n\t"));
}

StateDict Module::state_dict() {
  StateDict out;
  visit_state("", [&](const std::string& key, Tensor& t) { out.emplace_back(key, t); });
  return out;
}

IncompatibleKeys Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  IncompatibleKeys r;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  std::set<std::string> expected;
  visit_state("", [&](const std::string& key, Tensor& t) {
    expected.insert(key);
    auto it = state.find(key);
    if (it == state.end()) {
      r.missing_keys.push_back(key);
    } else if (!it->second.defined()) {
      throw InvalidArgument(
          fmt::format("Error(s) in loading state_dict for {}:\n\t'{}' holds no tensor", type_name(), key));
    } else if (it->second.shape() != t.shape()) {
      r.mismatched.push_back({key, t.shape(), it->second.shape()});
    } else {
      copies.emplace_back(&t, &it->second);
    }
  });
  for (const auto& [key, t] : state)
    if (!expected.count(key)) r.unexpected_keys.push_back(key);
  // torch raises on size mismatches whatever `strict` says; Kiln checks everything before copying,
  // so a failed load leaves the module as it was.
  if (!r.mismatched.empty() || (strict && !r.ok())) {
    IncompatibleKeys shown = r;
    if (!strict) shown.missing_keys.clear(), shown.unexpected_keys.clear();
    throw InvalidArgument(fmt::format("Error(s) in loading state_dict for {}:\n\t{}", type_name(), shown.describe()));
  }
  for (auto& [dst, src] : copies) copy_converting(*dst, *src);
  detail::bump_generation();
  return r;
}

void Module::save_safetensors(const std::string& path) {
  StateDict sd = state_dict();
  for (auto& [key, t] : sd) t = t.contiguous();
  write_safetensors(path, sd, {{"format", "pt"}});
}

IncompatibleKeys Module::load_safetensors(const std::string& path, bool strict) {
  SafetensorsFile f = read_safetensors(path);
  std::map<std::string, Tensor> state(f.tensors.begin(), f.tensors.end());
  try {
    return load_state_dict(state, strict);
  } catch (Error& e) {
    e.add_context(path + ": ");
    throw;
  }
}

}  // namespace kiln::nn
