#include "ir/graph_editor.h"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/error.h"

namespace kiln {

GraphEditor::GraphEditor(Model& model) : model_(model) {
  const Graph& g = model.graph;
  for (const auto& v : g.inputs) names_.insert(v.name);
  for (const auto& v : g.overridable_initializers) names_.insert(v.name);
  for (const auto& v : g.outputs) names_.insert(v.name);
  for (const auto& [name, t] : g.initializers) names_.insert(name);
  for (const Node& n : g.nodes) reserve_names_of(n);
}

void GraphEditor::reserve_names_of(const Node& n) {
  if (!n.name.empty()) names_.insert(n.name);
  for (const auto& o : n.outputs)
    if (!o.empty()) names_.insert(o);
  for (const auto& i : n.inputs)
    if (!i.empty()) names_.insert(i);
}

Node& GraphEditor::add_node(Node node) {
  reserve_names_of(node);
  model_.graph.nodes.push_back(std::move(node));
  return model_.graph.nodes.back();
}

std::string GraphEditor::fresh(const std::string& base) {
  std::string name = base;
  for (int i = 1; names_.count(name); ++i) name = fmt::format("{}_{}", base, i);
  names_.insert(name);
  return name;
}

std::string GraphEditor::op(const std::string& op_type, std::vector<std::string> inputs,
                            std::map<std::string, Attribute> attrs, const std::string& base,
                            const std::string& domain) {
  Node n;
  n.op_type = op_type;
  n.domain = domain;
  std::string out = fresh(base.empty() ? op_type : base);
  n.name = fresh(out + "/" + op_type);
  n.inputs = std::move(inputs);
  n.outputs = {out};
  n.attrs = std::move(attrs);
  add_node(std::move(n));
  return out;
}

std::string GraphEditor::constant(const std::string& base, Tensor value) {
  std::string name = fresh(base);
  model_.graph.initializers[name] = std::move(value);
  return name;
}

const ValueInfo* find_declared(const Graph& g, const std::string& name) {
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info, &g.overridable_initializers})
    for (const auto& v : *list)
      if (v.name == name) return &v;
  return nullptr;
}

std::optional<DType> declared_dtype(const Graph& g, const std::string& name) {
  if (const auto it = g.initializers.find(name); it != g.initializers.end()) return it->second.dtype();
  for (const auto* list : {&g.inputs, &g.value_info, &g.outputs})
    for (const ValueInfo& info : *list)
      if (info.name == name && info.has_type) return info.dtype;
  return std::nullopt;
}

Node cast_node(std::string name, std::string input, std::string output, DType to) {
  Node c;
  c.op_type = "Cast";
  c.name = std::move(name);
  c.inputs = {std::move(input)};
  c.outputs = {std::move(output)};
  c.attrs["to"] = Attribute::of_int(dtype_to_onnx(to));
  return c;
}

void initializers_to_inputs(Graph& g, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    auto it = g.initializers.find(name);
    if (it == g.initializers.end()) throw InvalidArgument(fmt::format("'{}' is not an initializer of the model", name));
    g.inputs.push_back(ValueInfo::of(name, it->second));
    g.initializers.erase(it);
    g.overridable_initializers.erase(
        std::remove_if(g.overridable_initializers.begin(), g.overridable_initializers.end(),
                       [&](const ValueInfo& v) { return v.name == name; }),
        g.overridable_initializers.end());
  }
}

void prune(Graph& g, const std::set<std::string>& keep_inputs) {
  std::set<std::string> needed;
  for (const auto& o : g.outputs) needed.insert(o.name);
  const std::vector<size_t> order = g.topological_order();
  std::vector<bool> keep(g.nodes.size(), false);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = g.nodes[*it];
    bool used = false;
    for (const auto& o : n.outputs) used = used || (!o.empty() && needed.count(o));
    if (!used) continue;
    keep[*it] = true;
    for (const auto& i : n.inputs)
      if (!i.empty()) needed.insert(i);
    // Values read inside subgraphs (If/Loop bodies) from the outer scope.
    for (const auto& [key, a] : n.attrs)
      if (a.kind == Attribute::Kind::Graph && a.g)
        for (const Node& sub : a.g->nodes)
          for (const auto& i : sub.inputs) needed.insert(i);
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  for (auto it = g.initializers.begin(); it != g.initializers.end();)
    it = needed.count(it->first) ? std::next(it) : g.initializers.erase(it);
  auto unused = [&](const ValueInfo& v) { return !needed.count(v.name) && !keep_inputs.count(v.name); };
  g.inputs.erase(std::remove_if(g.inputs.begin(), g.inputs.end(), unused), g.inputs.end());
  g.overridable_initializers.erase(
      std::remove_if(g.overridable_initializers.begin(), g.overridable_initializers.end(), unused),
      g.overridable_initializers.end());
  std::set<std::string> produced;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs) produced.insert(o);
  g.value_info.erase(std::remove_if(g.value_info.begin(), g.value_info.end(),
                                    [&](const ValueInfo& v) { return !produced.count(v.name); }),
                     g.value_info.end());
}

const Node* first_non_standard_node(const Graph& g) {
  for (const Node& n : g.nodes)
    if (!n.domain.empty() && n.domain != "ai.onnx") return &n;
  return nullptr;
}

}  // namespace kiln
