#include "ir/fusion.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "ir/graph_editor.h"

namespace kiln {
namespace {

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
  bool read(const std::string& v) const { return readers_.count(v) != 0 || returned_.count(v) != 0; }
  // The value of `v` when it is a one-element floating constant (initializer or Constant node).
  std::optional<double> scalar(const std::string& v) const {
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
    if (t == nullptr || !t->defined() || t->numel() != 1 || !is_floating(t->dtype())) return std::nullopt;
    return t->item_as_double();
  }

 private:
  const Graph& g_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> readers_;
  std::set<std::string> returned_;
};

bool near(std::optional<double> v, double want) { return v && std::abs(*v - want) <= 1e-6 * std::abs(want); }

// A binary node `i` of type `op` with one operand the constant `c` (either side; only the right
// one when `right_only`): its other operand, else "".
std::string other_than_constant(const Graph& g, const Uses& u, size_t i, const char* op, double c,
                                bool right_only = false) {
  if (i == kNone) return "";
  const Node& n = g.nodes[i];
  if (!n.domain.empty() || n.op_type != op || n.inputs.size() != 2 || n.outputs.size() != 1) return "";
  if (near(u.scalar(n.inputs[1]), c)) return n.inputs[0];
  if (!right_only && near(u.scalar(n.inputs[0]), c)) return n.inputs[1];
  return "";
}

// The operand of binary node `i` that is not `x` when the other one is, else "".
std::string other_than(const Graph& g, size_t i, const std::string& x) {
  if (i == kNone || g.nodes[i].inputs.size() != 2) return "";
  const Node& n = g.nodes[i];
  if (n.inputs[0] == x) return n.inputs[1];
  if (n.inputs[1] == x) return n.inputs[0];
  return "";
}

struct Chain {
  std::string x, y;
  std::vector<size_t> nodes;  // every node of the chain; the last writes y
  size_t named_after = kNone;
  bool tanh = false;
};

// x * (1 + f) / 2 from f (the Erf or Tanh output): the chain's tail, in either order of the half.
bool match_tail(const Graph& g, const Uses& u, const std::string& f, Chain& c) {
  const size_t add = u.sole_reader(f);
  if (other_than_constant(g, u, add, "Add", 1.0).empty()) return false;
  const std::string a = g.nodes[add].outputs[0];
  const size_t mul = u.sole_reader(a);
  const std::string other = other_than(g, mul, a);
  if (other.empty() || g.nodes[mul].op_type != "Mul" || !g.nodes[mul].domain.empty()) return false;
  c.nodes.push_back(add);
  if (other == c.x) {  // (x * a) * 0.5
    const size_t half = u.sole_reader(g.nodes[mul].outputs[0]);
    if (other_than_constant(g, u, half, "Mul", 0.5).empty()) return false;
    c.nodes.insert(c.nodes.end(), {mul, half});
  } else {  // (x * 0.5) * a
    const size_t half = u.producer(other, "Mul");
    if (other_than_constant(g, u, half, "Mul", 0.5) != c.x || u.sole_reader(other) != mul) return false;
    c.nodes.insert(c.nodes.end(), {half, mul});
  }
  c.y = g.nodes[c.nodes.back()].outputs[0];
  return true;
}

// Erf(x / sqrt 2) or Erf(x * (1 / sqrt 2)), then the tail.
std::optional<Chain> match_erf(const Graph& g, const Uses& u, size_t erf) {
  const Node& e = g.nodes[erf];
  if (e.inputs.size() != 1 || e.outputs.size() != 1) return std::nullopt;
  Chain c;
  size_t scale = u.producer(e.inputs[0], "Div");
  c.x = other_than_constant(g, u, scale, "Div", std::sqrt(2.0), true);
  if (c.x.empty()) {
    scale = u.producer(e.inputs[0], "Mul");
    c.x = other_than_constant(g, u, scale, "Mul", std::sqrt(0.5));
  }
  if (c.x.empty() || u.sole_reader(e.inputs[0]) != erf) return std::nullopt;
  c.nodes = {scale, erf};
  c.named_after = erf;
  if (!match_tail(g, u, e.outputs[0], c)) return std::nullopt;
  return c;
}

// x^3 as Pow(x, 3) or x * (x * x), read only by `reader`: x, and the nodes, else "".
std::string match_cube(const Graph& g, const Uses& u, const std::string& v, size_t reader, std::vector<size_t>& nodes) {
  if (u.sole_reader(v) != reader) return "";
  if (const size_t pow = u.producer(v, "Pow"); pow != kNone) {
    std::string x = other_than_constant(g, u, pow, "Pow", 3.0, true);
    if (!x.empty()) nodes.push_back(pow);
    return x;
  }
  const size_t outer = u.producer(v, "Mul");
  if (outer == kNone || g.nodes[outer].inputs.size() != 2) return "";
  for (int side = 0; side < 2; ++side) {
    const std::string& x = g.nodes[outer].inputs[side];
    const std::string& sq = g.nodes[outer].inputs[1 - side];
    const size_t inner = u.producer(sq, "Mul");
    if (inner == kNone || u.sole_reader(sq) != outer) continue;
    const Node& m = g.nodes[inner];
    if (m.inputs.size() == 2 && m.inputs[0] == x && m.inputs[1] == x) {
      nodes.insert(nodes.end(), {inner, outer});
      return x;
    }
  }
  return "";
}

// Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), then the tail.
std::optional<Chain> match_tanh(const Graph& g, const Uses& u, size_t tanh) {
  const Node& t = g.nodes[tanh];
  if (t.inputs.size() != 1 || t.outputs.size() != 1) return std::nullopt;
  Chain c;
  c.tanh = true;
  const size_t scale = u.producer(t.inputs[0], "Mul");
  const std::string sum = other_than_constant(g, u, scale, "Mul", std::sqrt(2.0 / M_PI));
  const size_t add = sum.empty() ? kNone : u.producer(sum, "Add");
  if (add == kNone || u.sole_reader(t.inputs[0]) != tanh || u.sole_reader(sum) != scale ||
      g.nodes[add].inputs.size() != 2)
    return std::nullopt;
  for (int side = 0; side < 2 && c.x.empty(); ++side) {
    const std::string x = g.nodes[add].inputs[side], term = g.nodes[add].inputs[1 - side];
    const size_t cubic = u.producer(term, "Mul");
    const std::string cube = other_than_constant(g, u, cubic, "Mul", 0.044715);
    if (cube.empty() || u.sole_reader(term) != add) continue;
    std::vector<size_t> nodes;
    if (match_cube(g, u, cube, cubic, nodes) != x) continue;
    c.x = x;
    c.nodes = nodes;
    c.nodes.insert(c.nodes.end(), {cubic, add, scale, tanh});
  }
  if (c.x.empty()) return std::nullopt;
  c.named_after = tanh;
  if (!match_tail(g, u, t.outputs[0], c)) return std::nullopt;
  return c;
}

// "/mlp/Erf" -> "/mlp/Gelu".
std::string gelu_name(const std::string& named_after) {
  const size_t slash = named_after.rfind('/');
  return (slash == std::string::npos ? std::string() : named_after.substr(0, slash + 1)) + "Gelu";
}

}  // namespace

size_t fuse_gelu(Model& model) {
  Graph& g = model.graph;
  std::vector<Chain> chains;
  {
    const Uses uses(g);
    std::set<size_t> taken;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (!n.domain.empty() || (n.op_type != "Erf" && n.op_type != "Tanh")) continue;
      std::optional<Chain> c = n.op_type == "Erf" ? match_erf(g, uses, i) : match_tanh(g, uses, i);
      if (!c) continue;
      bool free = true;
      for (size_t k : c->nodes) free = free && !taken.count(k);
      if (!free) continue;
      taken.insert(c->nodes.begin(), c->nodes.end());
      chains.push_back(std::move(*c));
    }
  }
  if (chains.empty()) return 0;
  GraphEditor names(model);
  std::map<size_t, Node> replace;  // the chain's last node -> the fused node
  std::set<size_t> remove;
  std::set<std::string> gone;  // values the removed nodes wrote
  for (const Chain& c : chains) {
    Node fused;
    fused.name = names.fresh(gelu_name(g.nodes[c.named_after].name));
    fused.domain = kKilnDomain;
    fused.op_type = "Gelu";
    fused.inputs = {c.x};
    fused.outputs = {c.y};
    fused.attrs["approximate"] = Attribute::of_string(c.tanh ? "tanh" : "none");
    replace.emplace(c.nodes.back(), std::move(fused));
    for (size_t k : c.nodes) {
      if (k == c.nodes.back()) continue;
      remove.insert(k);
      for (const std::string& v : g.nodes[k].outputs) gone.insert(v);
    }
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
  // Constant nodes only the chains read (their scales and offsets) go too.
  const Uses after(g);
  std::erase_if(g.nodes, [&](const Node& n) {
    if (!n.domain.empty() || n.op_type != "Constant" || n.outputs.size() != 1 || after.read(n.outputs[0])) return false;
    gone.insert(n.outputs[0]);
    return true;
  });
  std::erase_if(g.value_info, [&](const ValueInfo& v) { return gone.count(v.name) != 0; });
  if (!model.opsets.count(kKilnDomain)) model.opsets[kKilnDomain] = 1;
  return chains.size();
}

}  // namespace kiln
