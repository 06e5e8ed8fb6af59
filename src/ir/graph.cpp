#include "kiln/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_map>

namespace kiln {

Attribute Attribute::of_float(float v) {
  Attribute a;
  a.kind = Kind::Float;
  a.f = v;
  return a;
}
Attribute Attribute::of_int(int64_t v) {
  Attribute a;
  a.kind = Kind::Int;
  a.i = v;
  return a;
}
Attribute Attribute::of_string(std::string v) {
  Attribute a;
  a.kind = Kind::String;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::of_tensor(Tensor v) {
  Attribute a;
  a.kind = Kind::Tensor;
  a.t = std::move(v);
  return a;
}
Attribute Attribute::of_floats(std::vector<float> v) {
  Attribute a;
  a.kind = Kind::Floats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::of_ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::of_strings(std::vector<std::string> v) {
  Attribute a;
  a.kind = Kind::Strings;
  a.strings = std::move(v);
  return a;
}

Attribute Attribute::of_type(ValueInfo v) {
  Attribute a;
  a.kind = Kind::Type;
  a.type = std::make_shared<const ValueInfo>(std::move(v));
  return a;
}

const char* attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Float:
      return "float";
    case Attribute::Kind::Int:
      return "int";
    case Attribute::Kind::String:
      return "string";
    case Attribute::Kind::Tensor:
      return "tensor";
    case Attribute::Kind::Graph:
      return "graph";
    case Attribute::Kind::Floats:
      return "floats";
    case Attribute::Kind::Ints:
      return "ints";
    case Attribute::Kind::Type:
      return "type";
    case Attribute::Kind::Strings:
      return "strings";
    case Attribute::Kind::Tensors:
      return "tensors";
  }
  return "?";
}

namespace {
const Attribute* get(const Node& n, const std::string& key, Attribute::Kind kind, bool required) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) {
    if (required) throw InvalidModel(fmt::format("{}: required attribute '{}' is missing", n.label(), key));
    return nullptr;
  }
  if (it->second.kind != kind)
    throw InvalidModel(fmt::format("{}: attribute '{}' is {}, expected {}", n.label(), key,
                                   attribute_kind_name(it->second.kind), attribute_kind_name(kind)));
  return &it->second;
}
}  // namespace

int64_t Node::attr_int(const std::string& key) const { return get(*this, key, Attribute::Kind::Int, true)->i; }
int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  const Attribute* a = get(*this, key, Attribute::Kind::Int, false);
  return a ? a->i : fallback;
}
float Node::attr_float(const std::string& key) const { return get(*this, key, Attribute::Kind::Float, true)->f; }
float Node::attr_float(const std::string& key, float fallback) const {
  const Attribute* a = get(*this, key, Attribute::Kind::Float, false);
  return a ? a->f : fallback;
}
std::string Node::attr_string(const std::string& key) const {
  return get(*this, key, Attribute::Kind::String, true)->s;
}
std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = get(*this, key, Attribute::Kind::String, false);
  return a ? a->s : fallback;
}
std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  return get(*this, key, Attribute::Kind::Ints, true)->ints;
}
std::vector<int64_t> Node::attr_ints(const std::string& key, const std::vector<int64_t>& fallback) const {
  const Attribute* a = get(*this, key, Attribute::Kind::Ints, false);
  return a ? a->ints : fallback;
}
std::vector<float> Node::attr_floats(const std::string& key, const std::vector<float>& fallback) const {
  const Attribute* a = get(*this, key, Attribute::Kind::Floats, false);
  return a ? a->floats : fallback;
}
const Tensor& Node::attr_tensor(const std::string& key) const {
  return get(*this, key, Attribute::Kind::Tensor, true)->t;
}

std::string Node::label() const {
  const std::string op = domain.empty() ? op_type : domain + "." + op_type;
  if (name.empty()) {
    const std::string first_out = outputs.empty() ? std::string("?") : outputs[0];
    return fmt::format("node producing '{}' ({})", first_out, op);
  }
  return fmt::format("node '{}' ({})", name, op);
}

ValueInfo ValueInfo::of(const std::string& name, const Tensor& t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t.dtype();
  v.has_type = v.has_shape = true;
  for (int64_t d : t.shape()) v.dims.push_back(Dim{d, ""});
  return v;
}

std::string ValueInfo::describe() const {
  std::string s = has_type ? dtype_name(dtype) : "?";
  if (!has_shape) {
    s += "[?]";
  } else {
    std::vector<std::string> parts;
    for (const Dim& d : dims)
      parts.push_back(d.value >= 0 ? std::to_string(d.value) : (d.param.empty() ? "?" : d.param));
    s = fmt::format("{}[{}]", s, fmt::join(parts, ", "));
  }
  switch (kind) {
    case ValueKind::Tensor:
      return s;
    case ValueKind::Sequence:
      return fmt::format("sequence({})", s);
    case ValueKind::OptionalTensor:
      return fmt::format("optional({})", s);
    case ValueKind::OptionalSequence:
      return fmt::format("optional(sequence({}))", s);
  }
  return s;
}

bool ValueInfo::matches(const Shape& s) const {
  if (!has_shape) return true;
  if (s.size() != dims.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (dims[i].value >= 0 && dims[i].value != s[i]) return false;
  return true;
}

const ValueInfo* Graph::find_value_info(const std::string& n) const {
  for (const auto* list : {&inputs, &outputs, &value_info, &overridable_initializers})
    for (const ValueInfo& v : *list)
      if (v.name == n) return &v;
  return nullptr;
}

std::vector<size_t> Graph::topological_order() const {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& out : nodes[i].outputs) {
      if (out.empty()) continue;
      if (!producer.emplace(out, i).second)
        throw InvalidModel(fmt::format("value '{}' is produced by two nodes: {} and {}", out,
                                       nodes[producer[out]].label(), nodes[i].label()));
    }
  std::set<std::string> available;
  for (const auto& in : inputs) available.insert(in.name);
  for (const auto& [name, t] : initializers) available.insert(name);
  // Kahn's algorithm, stable with respect to the file order.
  std::vector<size_t> pending(nodes.size(), 0);
  std::unordered_map<std::string, std::vector<size_t>> consumers;
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::set<std::string> seen;
    for (const auto& in : nodes[i].inputs) {
      if (in.empty() || available.count(in) || !seen.insert(in).second) continue;
      if (!producer.count(in))
        throw InvalidModel(
            fmt::format("{} reads '{}', which is not a graph input, an initializer or "
                        "the output of any node",
                        nodes[i].label(), in));
      ++pending[i];
      consumers[in].push_back(i);
    }
  }
  std::vector<size_t> order, ready;
  for (size_t i = nodes.size(); i-- > 0;)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    const size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::vector<size_t> woken;
    for (const auto& out : nodes[i].outputs)
      for (size_t c : consumers[out])
        if (--pending[c] == 0) woken.push_back(c);
    std::sort(woken.rbegin(), woken.rend());
    ready.insert(ready.end(), woken.begin(), woken.end());
    std::sort(ready.rbegin(), ready.rend());
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] != 0) throw InvalidModel(fmt::format("the graph has a cycle through {}", nodes[i].label()));
  }
  return order;
}

int64_t Model::opset(const std::string& d) const {
  auto it = opsets.find(d);
  return it == opsets.end() ? 0 : it->second;
}

}  // namespace kiln
