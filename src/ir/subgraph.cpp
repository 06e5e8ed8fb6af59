// Capture lifting for subgraphs (subgraph.h).
#include "ir/subgraph.h"

#include <map>
#include <memory>
#include <set>

namespace kiln {

namespace {

void add_free(const Graph& g, const std::set<std::string>& outer_defined, std::vector<std::string>& out,
              std::set<std::string>& seen) {
  std::set<std::string> defined = outer_defined;
  for (const ValueInfo& v : g.inputs) defined.insert(v.name);
  for (const ValueInfo& v : g.overridable_initializers) defined.insert(v.name);
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (const Node& n : g.nodes)
    for (const std::string& o : n.outputs) defined.insert(o);
  const auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) out.push_back(name);
  };
  for (const Node& n : g.nodes) {
    for (const std::string& i : n.inputs) use(i);
    for (const auto& [key, a] : n.attrs)
      if (a.kind == Attribute::Kind::Graph && a.g) {
        std::vector<std::string> inner;
        std::set<std::string> inner_seen;
        add_free(*a.g, {}, inner, inner_seen);
        for (const std::string& name : inner) use(name);
      }
  }
  for (const ValueInfo& v : g.outputs) use(v.name);  // an output may be an outer value itself
}

}  // namespace

std::vector<std::string> free_values(const Graph& g) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  add_free(g, {}, out, seen);
  return out;
}

size_t lift_captures(Graph& g) {
  size_t changed = 0;
  for (Node& n : g.nodes) {
    if (n.has_attr(kCapturesAttr)) continue;
    std::vector<std::string> captures;
    std::set<std::string> seen;
    for (const auto& [key, a] : n.attrs)
      if (a.kind == Attribute::Kind::Graph && a.g)
        for (const std::string& name : free_values(*a.g))
          if (seen.insert(name).second) captures.push_back(name);
    bool has_graph = false;
    for (const auto& [key, a] : n.attrs) has_graph = has_graph || a.kind == Attribute::Kind::Graph;
    if (!has_graph) continue;
    for (const std::string& c : captures) n.inputs.push_back(c);
    n.attrs[kCapturesAttr] = Attribute::of_strings(captures);
    ++changed;
  }
  return changed;
}

namespace {

void rename_reads(Graph& g, const std::map<std::string, std::string>& to) {
  for (Node& n : g.nodes) {
    for (std::string& i : n.inputs)
      if (const auto it = to.find(i); it != to.end()) i = it->second;
    for (auto& [key, a] : n.attrs)
      if (a.kind == Attribute::Kind::Graph && a.g) {
        auto copy = std::make_shared<Graph>(*a.g);
        rename_reads(*copy, to);
        a.g = copy;
      }
  }
  for (ValueInfo& v : g.outputs)
    if (const auto it = to.find(v.name); it != to.end()) v.name = it->second;
}

}  // namespace

Node unlifted(const Node& n) {
  const auto cap = n.attrs.find(kCapturesAttr);
  if (cap == n.attrs.end()) return n;
  Node out = n;
  const std::vector<std::string>& inner = cap->second.strings;
  const size_t first = n.inputs.size() >= inner.size() ? n.inputs.size() - inner.size() : 0;
  std::map<std::string, std::string> to;
  for (size_t k = 0; k < inner.size() && first + k < n.inputs.size(); ++k)
    if (n.inputs[first + k] != inner[k]) to[inner[k]] = n.inputs[first + k];
  out.inputs.resize(first);
  out.attrs.erase(kCapturesAttr);
  if (!to.empty())
    for (auto& [key, a] : out.attrs)
      if (a.kind == Attribute::Kind::Graph && a.g) {
        auto copy = std::make_shared<Graph>(*a.g);
        rename_reads(*copy, to);
        a.g = copy;
      }
  return out;
}

}  // namespace kiln
