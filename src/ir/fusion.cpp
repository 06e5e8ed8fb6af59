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
  // The node that writes `v`, whatever its op, else kNone.
  size_t producer_any(const std::string& v) const {
    const auto it = producer_.find(v);
    return it == producer_.end() ? kNone : it->second;
  }
  bool read(const std::string& v) const { return readers_.count(v) != 0 || returned_.count(v) != 0; }
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

// Marks `nodes` taken unless one of them already is (by an overlapping match): whether it did.
bool claim(std::set<size_t>& taken, const std::vector<size_t>& nodes) {
  for (size_t k : nodes)
    if (taken.count(k)) return false;
  taken.insert(nodes.begin(), nodes.end());
  return true;
}

// A fusion found: `nodes` (the last writes the fused output) become `fused`.
struct Rewrite {
  std::vector<size_t> nodes;
  Node fused;
};

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

// Binary node `i` of type `op` with a one-element floating constant as an operand (only the right
// one when `right_only`): {the other operand, the constant}.
std::optional<std::pair<std::string, double>> with_scalar(const Graph& g, const Uses& u, size_t i, const char* op,
                                                          bool right_only) {
  if (i == kNone) return std::nullopt;
  const Node& n = g.nodes[i];
  if (!n.domain.empty() || n.op_type != op || n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  if (const auto c = u.scalar(n.inputs[1])) return std::make_pair(n.inputs[0], *c);
  if (const auto c = u.scalar(n.inputs[0]); c && !right_only) return std::make_pair(n.inputs[1], *c);
  return std::nullopt;
}

// Softmax(Where(cond, fill, X)) or Softmax(Where(cond, X, fill)) along the last axis, X optionally
// Mul(S, k), Mul(k, S) or Div(S, k): ai.kiln.MaskedSoftmax(S, cond).
std::optional<Rewrite> match_masked_softmax(const Graph& g, const Uses& u, size_t softmax, GraphEditor& names) {
  const Node& s = g.nodes[softmax];
  if (s.inputs.size() != 1 || s.outputs.size() != 1 || s.attr_int("axis", -1) != -1) return std::nullopt;
  const std::optional<DType> dtype = hinted_dtype(g, s.outputs[0]);
  if (dtype != DType::Float32 && dtype != DType::Float64) return std::nullopt;
  const size_t where = u.producer(s.inputs[0], "Where");
  if (where == kNone || u.sole_reader(s.inputs[0]) != softmax || g.nodes[where].inputs.size() != 3) return std::nullopt;
  const Node& w = g.nodes[where];
  const std::optional<double> on_true = u.scalar(w.inputs[1]), on_false = u.scalar(w.inputs[2]);
  if (on_true.has_value() == on_false.has_value()) return std::nullopt;
  Rewrite r;
  std::string x = on_true ? w.inputs[2] : w.inputs[1];
  double scale = 1.0;
  if (u.sole_reader(x) == where) {
    const size_t mul = u.producer(x, "Mul"), div = u.producer(x, "Div");
    const auto m = mul != kNone ? with_scalar(g, u, mul, "Mul", false) : with_scalar(g, u, div, "Div", true);
    if (m && (mul != kNone || m->second != 0.0)) {
      r.nodes.push_back(mul != kNone ? mul : div);
      x = m->first;
      scale = mul != kNone ? m->second : 1.0 / m->second;
    }
  }
  r.nodes.insert(r.nodes.end(), {where, softmax});
  r.fused.name = names.fresh(renamed(s.name, "MaskedSoftmax"));
  r.fused.domain = kKilnDomain;
  r.fused.op_type = "MaskedSoftmax";
  r.fused.inputs = {x, w.inputs[0]};
  r.fused.outputs = s.outputs;
  r.fused.attrs["scale"] = Attribute::of_float(static_cast<float>(scale));
  r.fused.attrs["fill"] = Attribute::of_float(static_cast<float>(on_true ? *on_true : *on_false));
  r.fused.attrs["fill_where"] = Attribute::of_int(on_true ? 1 : 0);
  return r;
}

// The hinted info of `v` (value_info, the graph's inputs and outputs, an initializer's shape).
std::optional<ValueInfo> hint(const Graph& g, const std::string& v) {
  for (const auto* list : {&g.value_info, &g.inputs, &g.outputs})
    for (const ValueInfo& info : *list)
      if (info.name == v && info.has_shape) return info;
  if (const auto it = g.initializers.find(v); it != g.initializers.end()) return ValueInfo::of(v, it->second);
  return std::nullopt;
}

// A one-element constant, also through a Cast to a floating type (torch's exports cast the scale).
std::optional<double> scalar_through_cast(const Graph& g, const Uses& u, const std::string& v) {
  if (const auto c = u.scalar(v)) return c;
  const size_t cast = u.producer(v, "Cast");
  if (cast == kNone || g.nodes[cast].inputs.size() != 1) return std::nullopt;
  const int64_t to = g.nodes[cast].attr_int("to", 0);
  if (to != 1 && to != 11) return std::nullopt;  // float, double
  return u.scalar(g.nodes[cast].inputs[0], /*any_numeric=*/true);
}

// The rank of `v`: from its hint, else from the ops that make it (ONNX's inference leaves values
// behind a computed Reshape unshaped): a Transpose's perm, a Reshape's shape length, the largest of
// an elementwise op's operands, a unary op's input. nullopt when that does not tell.
std::optional<size_t> rank_of(const Graph& g, const Uses& u, const std::string& v, int depth = 0) {
  if (const auto h = hint(g, v)) return h->dims.size();
  const size_t at = u.producer_any(v);
  if (at == kNone || depth > 24) return std::nullopt;
  const Node& n = g.nodes[at];
  if (!n.domain.empty() || n.inputs.empty()) return std::nullopt;
  const std::string& op = n.op_type;
  if (op == "Transpose" && n.has_attr("perm")) return n.attrs.at("perm").ints.size();
  if (op == "Constant") {
    const auto a = n.attrs.find("value");
    if (a != n.attrs.end() && a->second.kind == Attribute::Kind::Tensor) return a->second.t.shape().size();
    return n.has_attr("value_float") || n.has_attr("value_int") ? std::optional<size_t>(0) : std::nullopt;
  }
  if (op == "Reshape" && n.inputs.size() == 2) {
    const auto shape = hint(g, n.inputs[1]);
    if (shape && shape->dims.size() == 1 && shape->dims[0].value >= 0) return shape->dims[0].value;
    return std::nullopt;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Where" || op == "Pow" || op == "MatMul") {
    size_t r = 0;
    for (const std::string& x : n.inputs) {
      const auto rx = rank_of(g, u, x, depth + 1);
      if (!rx) return std::nullopt;
      r = std::max(r, *rx);
    }
    return r;
  }
  if (op == "Cast" || op == "Identity" || op == "Relu" || op == "Neg" || op == "Softmax" || op == "Dropout" ||
      op == "Sqrt" || op == "Exp" || op == "Tanh" || op == "Sigmoid")
    return rank_of(g, u, n.inputs[0], depth + 1);
  return std::nullopt;
}

// Q, Kt, V of rank >= 2 (MatMul's 1-D promotion is not attention's), and each mask or bias dim that
// the hints fix either 1 or the scores' own.
bool attention_shapes(const Graph& g, const Uses& u, const std::string& q, const std::string& kt, const std::string& v,
                      const std::vector<std::string>& spread) {
  for (const std::string* x : {&q, &kt, &v}) {
    const auto r = rank_of(g, u, *x);
    if (!r || *r < 2) return false;
  }
  const auto hq = hint(g, q), hk = hint(g, kt);
  const int64_t sq = hq ? hq->dims[hq->dims.size() - 2].value : -1, sk = hk ? hk->dims.back().value : -1;
  for (const std::string& s : spread) {
    const auto h = hint(g, s);
    if (!h) continue;  // the kernel checks them when it plans
    const size_t r = h->dims.size();
    const int64_t rows = r >= 2 ? h->dims[r - 2].value : 1, cols = r >= 1 ? h->dims[r - 1].value : 1;
    if ((rows > 1 && sq >= 0 && rows != sq) || (cols > 1 && sk >= 0 && cols != sk)) return false;
  }
  return true;
}

// The scores' chain back from `z`, which only `reader` reads: S = MatMul(Q, Kt) itself, or S
// scaled (Mul by a constant on either side, Div by one), S read only by the scaling.
struct Scores {
  size_t matmul = kNone, scaling = kNone;
  double scale = 1;
};

std::optional<Scores> scores_of(const Graph& g, const Uses& u, const std::string& z, size_t reader) {
  if (u.sole_reader(z) != reader) return std::nullopt;
  if (const size_t mm = u.producer(z, "MatMul"); mm != kNone) return Scores{mm, kNone, 1};
  const size_t mul = u.producer(z, "Mul"), div = u.producer(z, "Div");
  const size_t at = mul != kNone ? mul : div;
  if (at == kNone || g.nodes[at].inputs.size() != 2) return std::nullopt;
  const Node& n = g.nodes[at];
  for (int side = 1; side >= (mul != kNone ? 0 : 1); --side) {
    const std::optional<double> k = scalar_through_cast(g, u, n.inputs[side]);
    const std::string& s = n.inputs[1 - side];
    const size_t mm = u.producer(s, "MatMul");
    if (!k || (div != kNone && *k == 0.0) || mm == kNone || u.sole_reader(s) != at) continue;
    return Scores{mm, at, mul != kNone ? *k : 1.0 / *k};
  }
  return std::nullopt;
}

// MatMul(P, V) with P = Softmax(Z) (last axis) or ai.kiln.MaskedSoftmax, and Z from the scores
// (scores_of), or the scores plus a bias (Add, either side). Each intermediate value read only by
// the chain: ai.kiln.Attention(Q, Kt, V, mask, bias).
std::optional<Rewrite> match_attention(const Graph& g, const Uses& u, size_t softmax, GraphEditor& names,
                                       bool for_training) {
  const Node& s = g.nodes[softmax];
  if (s.inputs.empty() || s.outputs.size() != 1) return std::nullopt;
  const bool masked = s.domain == kKilnDomain;
  if (!masked && (s.inputs.size() != 1 || s.attr_int("axis", -1) != -1)) return std::nullopt;
  const size_t mm2 = u.sole_reader(s.outputs[0]);
  if (mm2 == kNone || !g.nodes[mm2].domain.empty() || g.nodes[mm2].op_type != "MatMul" ||
      g.nodes[mm2].inputs.size() != 2 || g.nodes[mm2].inputs[0] != s.outputs[0])
    return std::nullopt;
  const std::optional<DType> dtype = hinted_dtype(g, g.nodes[mm2].outputs[0]);
  if (dtype != DType::Float32 && dtype != DType::Float64) return std::nullopt;
  std::string bias, mask = masked && s.inputs.size() > 1 ? s.inputs[1] : "";
  size_t add = kNone;
  std::optional<Scores> sc = scores_of(g, u, s.inputs[0], softmax);
  if (!sc && !masked && (add = u.producer(s.inputs[0], "Add")) != kNone && u.sole_reader(s.inputs[0]) == softmax &&
      g.nodes[add].inputs.size() == 2)
    for (int side = 0; side < 2 && !sc; ++side) {
      sc = scores_of(g, u, g.nodes[add].inputs[side], add);
      if (sc) bias = g.nodes[add].inputs[1 - side];
    }
  if (!sc) return std::nullopt;
  const std::string &q = g.nodes[sc->matmul].inputs[0], &kt = g.nodes[sc->matmul].inputs[1];
  const std::string& v = g.nodes[mm2].inputs[1];
  std::vector<std::string> spread;
  for (const std::string& x : {mask, bias})
    if (!x.empty()) spread.push_back(x);
  if (g.nodes[sc->matmul].inputs.size() != 2 || !attention_shapes(g, u, q, kt, v, spread)) return std::nullopt;
  Rewrite r;
  r.nodes.push_back(sc->matmul);
  for (const size_t k : {sc->scaling, add})
    if (k != kNone) r.nodes.push_back(k);
  r.nodes.insert(r.nodes.end(), {softmax, mm2});
  r.fused.name = names.fresh(renamed(s.name, "Attention"));
  r.fused.domain = kKilnDomain;
  r.fused.op_type = "Attention";
  r.fused.inputs = {q, kt, v, mask, bias};
  while (r.fused.inputs.back().empty()) r.fused.inputs.pop_back();
  r.fused.outputs = g.nodes[mm2].outputs;
  if (for_training) r.fused.outputs.push_back(names.fresh(r.fused.outputs[0] + "_probabilities"));
  const double scale = sc->scale * (masked ? s.attr_float("scale", 1.f) : 1.0);
  r.fused.attrs["scale"] = Attribute::of_float(static_cast<float>(scale));
  if (masked) {
    r.fused.attrs["fill"] = Attribute::of_float(s.attr_float("fill", 0.f));
    r.fused.attrs["fill_where"] = Attribute::of_int(s.attr_int("fill_where", 1));
  }
  return r;
}

}  // namespace

namespace {

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

}  // namespace

size_t fuse_attention(Model& model, bool for_training) {
  if (model.opset("") < 13) return 0;  // Softmax flattened to 2-D before opset 13
  std::vector<Rewrite> rewrites = find_rewrites(
      model,
      [](const Node& n) {
        return (n.domain.empty() && n.op_type == "Softmax") ||
               (n.domain == kKilnDomain && n.op_type == "MaskedSoftmax");
      },
      [&](const Graph& g, const Uses& u, size_t i, GraphEditor& names) {
        return match_attention(g, u, i, names, for_training);
      });
  if (rewrites.empty()) return 0;
  Graph& g = model.graph;
  std::vector<ValueInfo> probabilities;  // typed, so that a graph returning them (a split) stays valid
  for (const Rewrite& r : rewrites)
    if (r.fused.outputs.size() > 1) {
      ValueInfo v;
      v.name = r.fused.outputs[1];
      v.dtype = hinted_dtype(g, r.fused.outputs[0]).value_or(DType::Float32);
      v.has_type = true;
      probabilities.push_back(v);
    }
  apply(model, rewrites);
  g.value_info.insert(g.value_info.end(), probabilities.begin(), probabilities.end());
  return rewrites.size();
}

size_t fuse_masked_softmax(Model& model) {
  if (model.opset("") < 13) return 0;  // Softmax flattened to 2-D before opset 13
  std::vector<Rewrite> rewrites = find_rewrites(
      model, [](const Node& n) { return n.domain.empty() && n.op_type == "Softmax"; }, match_masked_softmax);
  if (rewrites.empty()) return 0;
  apply(model, rewrites);
  return rewrites.size();
}

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
      if (c && claim(taken, c->nodes)) chains.push_back(std::move(*c));
    }
  }
  if (chains.empty()) return 0;
  GraphEditor names(model);
  std::vector<Rewrite> rewrites;
  for (const Chain& c : chains) {
    Rewrite r{c.nodes, {}};
    r.fused.name = names.fresh(renamed(g.nodes[c.named_after].name, "Gelu"));
    r.fused.domain = kKilnDomain;
    r.fused.op_type = "Gelu";
    r.fused.inputs = {c.x};
    r.fused.outputs = {c.y};
    r.fused.attrs["approximate"] = Attribute::of_string(c.tanh ? "tanh" : "none");
    rewrites.push_back(std::move(r));
  }
  apply(model, rewrites);
  return chains.size();
}

size_t drop_inactive_dropout(Model& model) {
  Graph& g = model.graph;
  const Uses uses(g);
  const int64_t opset = model.opset("");
  size_t dropped = 0;
  for (Node& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "Dropout" || n.inputs.empty() || n.outputs.empty()) continue;
    if (n.outputs.size() > 1 && !n.outputs[1].empty() && uses.read(n.outputs[1])) continue;  // the mask is read
    bool identity = false;
    if (opset < 12) {  // the ratio an attribute
      identity = n.attr_float("ratio", 0.5f) == 0.f;
    } else {
      const bool has_ratio = n.inputs.size() > 1 && !n.inputs[1].empty();
      const bool has_mode = n.inputs.size() > 2 && !n.inputs[2].empty();
      const std::optional<double> ratio = has_ratio ? uses.scalar(n.inputs[1]) : std::optional<double>(0.5);
      const std::optional<double> mode = has_mode ? uses.boolean(n.inputs[2]) : std::optional<double>(0.0);
      identity = (ratio && *ratio == 0.0) || (mode && *mode == 0.0);
    }
    if (!identity) continue;
    n.op_type = "Identity";
    n.inputs.resize(1);
    n.outputs.resize(1);
    n.attrs.clear();
    ++dropped;
  }
  return dropped;
}

size_t fuse(Model& model, bool for_training) {
  const size_t n = drop_inactive_dropout(model) + fuse_gelu(model) + fuse_masked_softmax(model);
  return n + fuse_attention(model, for_training);
}

}  // namespace kiln
