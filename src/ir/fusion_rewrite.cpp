#include "ir/fusion_rewrite.h"

namespace kiln::fusion {

// Marks `nodes` taken unless one of them already is (by an overlapping match): whether it did.
bool claim(std::set<size_t>& taken, const std::vector<size_t>& nodes) {
  for (size_t k : nodes)
    if (taken.count(k)) return false;
  taken.insert(nodes.begin(), nodes.end());
  return true;
}

// Replaces each rewrite's last node by its fused node and drops the others, then Constant nodes
// only they read and the value_info of the values that are gone.
void apply(Model& model, std::vector<Rewrite>& rewrites) {
  Graph& g = model.graph;
  std::map<size_t, Node> replace;  // the chain's last node -> the fused node
  std::set<size_t> remove;
  std::set<std::string> gone;  // values the removed nodes wrote
  for (Rewrite& r : rewrites) {
    for (size_t k : r.nodes) {
      if (k == r.nodes.back()) continue;
      remove.insert(k);
      for (const std::string& v : g.nodes[k].outputs) gone.insert(v);
    }
    replace.emplace(r.nodes.back(), std::move(r.fused));
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (remove.count(i)) continue;
    if (const auto it = replace.find(i); it != replace.end()) {
      kept.push_back(std::move(it->second));
      continue;
    }
    kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  const Uses after(g);
  std::erase_if(g.nodes, [&](const Node& n) {
    if (!n.domain.empty() || n.op_type != "Constant" || n.outputs.size() != 1 || after.read(n.outputs[0])) return false;
    gone.insert(n.outputs[0]);
    return true;
  });
  std::erase_if(g.value_info, [&](const ValueInfo& v) { return gone.count(v.name) != 0; });
  if (!model.opsets.count(kKilnDomain)) model.opsets[kKilnDomain] = 1;
}

// "/attn/Softmax" -> "/attn/MaskedSoftmax".
std::string renamed(const std::string& name, const char* op) {
  const size_t slash = name.rfind('/');
  return (slash == std::string::npos ? std::string() : name.substr(0, slash + 1)) + op;
}

// The dtype the graph's hints give `v`, if any.
std::optional<DType> hinted_dtype(const Graph& g, const std::string& v) {
  for (const auto* list : {&g.value_info, &g.outputs})
    for (const ValueInfo& info : *list)
      if (info.name == v && info.has_type) return info.dtype;
  return std::nullopt;
}

// The shaped info the graph gives `v` (value_info, the graph's inputs and outputs, an initializer's
// shape), if any.
std::optional<ValueInfo> hinted_info(const Graph& g, const std::string& v) {
  for (const auto* list : {&g.value_info, &g.inputs, &g.outputs})
    for (const ValueInfo& info : *list)
      if (info.name == v && info.has_shape) return info;
  if (const auto it = g.initializers.find(v); it != g.initializers.end()) return ValueInfo::of(v, it->second);
  return std::nullopt;
}

}  // namespace kiln::fusion
