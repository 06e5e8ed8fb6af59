// What the graph fusions (fusion.h; fusion.cpp, attention_fusion.cpp) share: who writes and reads
// each value, a found rewrite and its application, and the scan that finds rewrites.
#pragma once

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph_editor.h"
#include "kiln/graph.h"

namespace kiln::fusion {

constexpr size_t kNone = static_cast<size_t>(-1);

// Who produces and who reads each value, and the values the graph returns.
class Uses {
 public:
  explicit Uses(const Graph& g) : g_(g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const std::string& v : g.nodes[i].outputs)
        if (!v.empty()) producer_.emplace(v, i);
      for (const std::string& v : g.nodes[i].inputs)
        if (!v.empty()) readers_[v].push_back(i);
    }
    for (const ValueInfo& v : g.outputs) returned_.insert(v.name);
  }

  // The node that writes `v` if it is op `op` (default domain), else kNone.
  size_t producer(const std::string& v, const char* op) const {
    const auto it = producer_.find(v);
    if (it == producer_.end()) return kNone;
    const Node& n = g_.nodes[it->second];
    return n.domain.empty() && n.op_type == op ? it->second : kNone;
  }
  // The one node that reads `v`, when nothing else does (the graph's outputs included), else kNone.
  size_t sole_reader(const std::string& v) const {
    const auto it = readers_.find(v);
    if (it == readers_.end() || it->second.size() != 1 || returned_.count(v)) return kNone;
    return it->second.front();
  }
  // The node that writes `v`, whatever its op, else kNone.
  size_t producer_any(const std::string& v) const {
    const auto it = producer_.find(v);
    return it == producer_.end() ? kNone : it->second;
  }
  bool read(const std::string& v) const { return readers_.count(v) != 0 || returned_.count(v) != 0; }
  // The nodes that read `v` (once per input that names it), and whether the graph returns it.
  const std::vector<size_t>& readers(const std::string& v) const {
    static const std::vector<size_t> none;
    const auto it = readers_.find(v);
    return it == readers_.end() ? none : it->second;
  }
  bool returned(const std::string& v) const { return returned_.count(v) != 0; }
  // The value of `v` when it is a one-element floating constant (initializer or Constant node); of
  // any numeric dtype with `any_numeric` (a constant a Cast makes floating).
  std::optional<double> scalar(const std::string& v, bool any_numeric = false) const {
    const Tensor* t = nullptr;
    if (const auto it = g_.initializers.find(v); it != g_.initializers.end()) t = &it->second;
    if (const auto it = producer_.find(v); t == nullptr && it != producer_.end()) {
      const Node& n = g_.nodes[it->second];
      if (!n.domain.empty() || n.op_type != "Constant") return std::nullopt;
      if (const auto a = n.attrs.find("value_float"); a != n.attrs.end() && a->second.kind == Attribute::Kind::Float)
        return a->second.f;
      const auto a = n.attrs.find("value");
      if (a == n.attrs.end() || a->second.kind != Attribute::Kind::Tensor) return std::nullopt;
      t = &a->second.t;
    }
    if (t == nullptr || !t->defined() || t->numel() != 1 || t->dtype() == DType::Bool) return std::nullopt;
    if (!is_floating(t->dtype()) && !any_numeric) return std::nullopt;
    return t->item_as_double();
  }
  // The values of `v` when it is an int32 or int64 constant (initializer or Constant node).
  std::optional<std::vector<int64_t>> ints(const std::string& v) const {
    const Tensor* t = nullptr;
    if (const auto it = g_.initializers.find(v); it != g_.initializers.end()) t = &it->second;
    if (const auto it = producer_.find(v); t == nullptr && it != producer_.end()) {
      const Node& n = g_.nodes[it->second];
      const auto a = n.attrs.find("value");
      if (n.domain.empty() && n.op_type == "Constant" && a != n.attrs.end() &&
          a->second.kind == Attribute::Kind::Tensor)
        t = &a->second.t;
    }
    if (t == nullptr || !t->defined() || (t->dtype() != DType::Int64 && t->dtype() != DType::Int32))
      return std::nullopt;
    return t->to_int64_vector();
  }
  // The value of `v` when it is a one-element bool constant (Dropout's training_mode), as 0 or 1.
  std::optional<double> boolean(const std::string& v) const {
    const auto it = producer_.find(v);
    const Tensor* t = nullptr;
    if (const auto i = g_.initializers.find(v); i != g_.initializers.end()) t = &i->second;
    if (t == nullptr && it != producer_.end()) {
      const Node& n = g_.nodes[it->second];
      const auto a = n.attrs.find("value");
      if (n.domain.empty() && n.op_type == "Constant" && a != n.attrs.end() &&
          a->second.kind == Attribute::Kind::Tensor)
        t = &a->second.t;
    }
    if (t == nullptr || !t->defined() || t->numel() != 1 || t->dtype() != DType::Bool) return std::nullopt;
    return t->data<bool>()[0] ? 1.0 : 0.0;
  }

 private:
  const Graph& g_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> readers_;
  std::set<std::string> returned_;
};

// Marks `nodes` taken unless one of them already is (by an overlapping match): whether it did.
bool claim(std::set<size_t>& taken, const std::vector<size_t>& nodes);

// A fusion found: `nodes` (the last writes the fused output) become `fused`.
struct Rewrite {
  std::vector<size_t> nodes;
  Node fused;
};

// Replaces each rewrite's last node by its fused node and drops the others, then Constant nodes
// only they read and the value_info of the values that are gone.
void apply(Model& model, std::vector<Rewrite>& rewrites);

// "/attn/Softmax" -> "/attn/MaskedSoftmax".
std::string renamed(const std::string& name, const char* op);

// The dtype the graph's hints give `v`, if any.
std::optional<DType> hinted_dtype(const Graph& g, const std::string& v);

// The shaped info the graph gives `v` (value_info, the graph's inputs and outputs, an initializer's
// shape), if any.
std::optional<ValueInfo> hinted_info(const Graph& g, const std::string& v);

// The rewrites `match(graph, uses, node index, names)` finds at the nodes `candidate` accepts, each
// kept unless it overlaps one found before.
template <class Candidate, class Match>
std::vector<Rewrite> find_rewrites(Model& model, Candidate&& candidate, Match&& match) {
  const Graph& g = model.graph;
  const Uses uses(g);
  GraphEditor names(model);
  std::set<size_t> taken;
  std::vector<Rewrite> rewrites;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!candidate(g.nodes[i])) continue;
    std::optional<Rewrite> r = match(g, uses, i, names);
    if (r && claim(taken, r->nodes)) rewrites.push_back(std::move(*r));
  }
  return rewrites;
}

}  // namespace kiln::fusion
