#include "ir/fusion.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "ir/fusion_rewrite.h"
#include "ir/graph_editor.h"

namespace kiln {
namespace {

using namespace fusion;  // the shared rewrite pieces (fusion_rewrite.h)

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

}  // namespace

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

namespace {

// Whether Transpose node `t` swaps the last two axes of its input and nothing else.
bool swaps_last_two(const Node& t) {
  const std::vector<int64_t> perm = t.attr_ints("perm");
  const size_t r = perm.size();
  if (r < 2 || perm[r - 2] != static_cast<int64_t>(r - 1) || perm[r - 1] != static_cast<int64_t>(r - 2)) return false;
  for (size_t d = 0; d + 2 < r; ++d)
    if (perm[d] != static_cast<int64_t>(d)) return false;
  return true;
}

// MatMul `mm` with an operand from such a Transpose that only it reads: FusedMatMul reading the
// Transpose's input with its flag set.
std::optional<Rewrite> match_transposed_operand(const Graph& g, const Uses& u, size_t mm, GraphEditor&) {
  const Node& n = g.nodes[mm];
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  const std::optional<DType> dtype = hinted_dtype(g, n.outputs[0]);
  if (dtype != DType::Float32 && dtype != DType::Float64) return std::nullopt;  // FusedMatMul's kernels
  Rewrite r;
  r.fused = n;
  r.fused.domain = kKilnDomain;
  r.fused.op_type = "FusedMatMul";
  for (int side = 0; side < 2; ++side) {
    const size_t t = u.producer(n.inputs[side], "Transpose");
    const bool folds = t != kNone && u.sole_reader(n.inputs[side]) == mm && g.nodes[t].inputs.size() == 1 &&
                       swaps_last_two(g.nodes[t]);
    r.fused.attrs[side == 0 ? "transA" : "transB"] = Attribute::of_int(folds ? 1 : 0);
    if (!folds) continue;
    r.fused.inputs[static_cast<size_t>(side)] = g.nodes[t].inputs[0];
    r.nodes.push_back(t);
  }
  if (r.nodes.empty()) return std::nullopt;
  r.nodes.push_back(mm);
  return r;
}

// The 16-bit type `v` has by the hints, or as the output of a Cast to bfloat16 or float16 (the
// gradient graph's backward values have no hints, but its products read such Casts).
std::optional<DType> low_dtype(const Graph& g, const Uses& u, const std::string& v) {
  std::optional<DType> t = hinted_dtype(g, v);
  if (!t) {
    const size_t c = u.producer(v, "Cast");
    const auto to = c == kNone ? g.nodes[0].attrs.end() : g.nodes[c].attrs.find("to");
    if (c != kNone && to != g.nodes[c].attrs.end() && to->second.kind == Attribute::Kind::Int)
      t = dtype_from_onnx(to->second.i);
  }
  return t == DType::BFloat16 || t == DType::Float16 ? t : std::nullopt;
}

bool casts_to_float(const Node& c) {
  const auto to = c.attrs.find("to");
  return c.domain.empty() && c.op_type == "Cast" && c.outputs.size() == 1 && to != c.attrs.end() &&
         to->second.kind == Attribute::Kind::Int && to->second.i == dtype_to_onnx(DType::Float32);
}

// MatMul or FusedMatMul `mm` computing bfloat16 or float16 (mixed precision's products) whose
// result only a Cast to float32 reads, directly or through a SumToShapeOf (the gradient rules
// reduce a product's gradient to its operand's shape): the product becomes a FusedMatMul writing
// float32 (out_dtype), the SumToShapeOf sums in float32, and the Cast goes. Appends the rewrites.
void match_result_cast(const Graph& g, const Uses& u, size_t mm, std::set<size_t>& taken,
                       std::vector<Rewrite>& rewrites) {
  const Node& n = g.nodes[mm];
  if (n.inputs.size() != 2 || n.outputs.size() != 1 || n.attrs.count("out_dtype")) return;
  if (!low_dtype(g, u, n.outputs[0]) && !low_dtype(g, u, n.inputs[0]) && !low_dtype(g, u, n.inputs[1])) return;
  size_t reader = u.sole_reader(n.outputs[0]);
  if (reader == kNone) return;
  size_t sum = kNone;
  if (g.nodes[reader].domain == kKilnDomain && g.nodes[reader].op_type == "SumToShapeOf" &&
      g.nodes[reader].inputs[0] == n.outputs[0] && g.nodes[reader].outputs.size() == 1) {
    sum = reader;
    reader = u.sole_reader(g.nodes[sum].outputs[0]);
    if (reader == kNone) return;
  }
  if (!casts_to_float(g.nodes[reader])) return;
  if (!claim(taken, sum == kNone ? std::vector<size_t>{mm, reader} : std::vector<size_t>{mm, sum, reader})) return;
  Rewrite product{{mm}, n};
  product.fused.domain = kKilnDomain;
  product.fused.op_type = "FusedMatMul";
  for (const char* flag : {"transA", "transB"})
    if (!product.fused.attrs.count(flag)) product.fused.attrs[flag] = Attribute::of_int(0);
  product.fused.attrs["out_dtype"] = Attribute::of_int(dtype_to_onnx(DType::Float32));
  if (sum == kNone) {
    product.fused.outputs = g.nodes[reader].outputs;
    product.nodes.push_back(reader);
    rewrites.push_back(std::move(product));
    return;
  }
  Rewrite summed{{sum, reader}, g.nodes[sum]};
  summed.fused.outputs = g.nodes[reader].outputs;
  rewrites.push_back(std::move(product));
  rewrites.push_back(std::move(summed));
}

// Applies the cast folds' rewrites: a node given out_dtype that keeps its output's name (a rewrite
// of that node alone) loses the name's old dtype hint. Returns how many nodes took out_dtype.
size_t apply_retyping(Model& model, std::vector<Rewrite>& rewrites) {
  if (rewrites.empty()) return 0;
  std::set<std::string> retyped;
  size_t folded = 0;
  for (const Rewrite& r : rewrites) {
    if (!r.fused.has_attr("out_dtype")) continue;
    ++folded;
    if (r.nodes.size() == 1) retyped.insert(r.fused.outputs[0]);
  }
  apply(model, rewrites);
  std::erase_if(model.graph.value_info, [&](const ValueInfo& v) { return retyped.count(v.name) != 0; });
  return folded;
}

// The node whose output `v` is, directly or through one Reshape, when each value on the way has
// one reader; the Reshape (or kNone) in `reshape`.
size_t sole_source(const Graph& g, const Uses& u, const std::string& v, size_t& reshape) {
  reshape = kNone;
  size_t p = u.producer_any(v);
  if (p != kNone && g.nodes[p].domain.empty() && g.nodes[p].op_type == "Reshape" && !g.nodes[p].inputs.empty() &&
      u.sole_reader(g.nodes[p].inputs[0]) == p) {
    reshape = p;
    p = u.producer_any(g.nodes[p].inputs[0]);
  }
  return p;
}

// Whether node `p` can write its first output in 16 bits itself (out_dtype), by the hints: an
// ai.kiln.Gelu of a float32 X, or the gradient of a SoftmaxCrossEntropyLoss over float32 scores
// [N, C] (ai.kiln.SoftmaxCrossEntropyLossAndGrad, or its LossGrad recomputing from the scores).
bool writes_16_bits(const Graph& g, const Node& n) {
  if (n.domain != kKilnDomain || n.has_attr("out_dtype") || n.outputs.empty()) return false;
  if (n.op_type == "Gelu") return n.inputs.size() == 1 && hinted_dtype(g, n.inputs[0]) == DType::Float32;
  const bool from_scores = n.op_type == "SoftmaxCrossEntropyLossAndGrad" ||
                           (n.op_type == "SoftmaxCrossEntropyLossGrad" && n.attr_int("x_is_log_prob", 1) == 0);
  if (!from_scores || n.inputs.size() < 3) return false;
  const std::optional<ValueInfo> scores = hinted_info(g, n.inputs[1]);
  return scores && scores->has_type && scores->dtype == DType::Float32 && scores->has_shape && scores->dims.size() == 2;
}

// A Cast to bfloat16 or float16 of a value that only it reads, made by a node writes_16_bits
// accepts (through a Reshape): that node, with out_dtype, writes the 16-bit value, the Reshape
// reshapes it under the Cast's output name, and the Cast goes. Appends the rewrites.
void match_16_bit_cast(const Graph& g, const Uses& u, size_t cast, std::set<size_t>& taken,
                       std::vector<Rewrite>& rewrites) {
  const Node& c = g.nodes[cast];
  const auto to = c.attrs.find("to");
  if (c.inputs.size() != 1 || c.outputs.size() != 1 || to == c.attrs.end() || to->second.kind != Attribute::Kind::Int)
    return;
  const std::optional<DType> low = dtype_from_onnx(to->second.i);
  if (low != DType::BFloat16 && low != DType::Float16) return;
  if (u.sole_reader(c.inputs[0]) != cast) return;
  size_t reshape = kNone;
  const size_t p = sole_source(g, u, c.inputs[0], reshape);
  if (p == kNone || !writes_16_bits(g, g.nodes[p])) return;
  if (!claim(taken, reshape == kNone ? std::vector<size_t>{p, cast} : std::vector<size_t>{p, reshape, cast})) return;
  Rewrite producer{{p}, g.nodes[p]};
  producer.fused.attrs["out_dtype"] = Attribute::of_int(dtype_to_onnx(*low));
  if (reshape == kNone) {
    producer.nodes.push_back(cast);
    producer.fused.outputs[0] = c.outputs[0];
    rewrites.push_back(std::move(producer));
    return;
  }
  Rewrite reshaped{{reshape, cast}, g.nodes[reshape]};
  reshaped.fused.outputs = c.outputs;
  rewrites.push_back(std::move(producer));
  rewrites.push_back(std::move(reshaped));
}

}  // namespace

size_t fold_16_bit_casts(Model& model) {
  const Graph& g = model.graph;
  const Uses uses(g);
  std::set<size_t> taken;
  std::vector<Rewrite> rewrites;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].domain.empty() && g.nodes[i].op_type == "Cast") match_16_bit_cast(g, uses, i, taken, rewrites);
  return apply_retyping(model, rewrites);
}

size_t forward_identities(Model& model) {
  Graph& g = model.graph;
  std::set<std::string> sources;  // graph inputs and initializers: no node writes them
  for (const ValueInfo& v : g.inputs) sources.insert(v.name);
  for (const auto& [name, t] : g.initializers) sources.insert(name);
  std::map<std::string, std::string> rename;  // the producer's output -> the Identity's
  std::set<size_t> dropped;
  {
    const Uses uses(g);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (!n.domain.empty() || n.op_type != "Identity" || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
      const std::string& x = n.inputs[0];
      if (x.empty() || sources.count(x) || uses.producer_any(x) == kNone || uses.sole_reader(x) != i) continue;
      if (uses.producer_any(x) > i) continue;  // keep the node order topological
      rename[x] = n.outputs[0];
      dropped.insert(i);
    }
  }
  if (rename.empty()) return 0;
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dropped.count(i)) continue;
    Node& n = g.nodes[i];
    for (auto& o : n.outputs)  // through chains of Identities (x -> y -> z: x becomes z)
      for (auto it = rename.find(o); it != rename.end(); it = rename.find(o)) o = it->second;
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  std::erase_if(g.value_info, [&](const ValueInfo& v) { return rename.count(v.name) != 0; });
  return rename.size();
}

size_t fold_result_casts_into_products(Model& model) {
  const Graph& g = model.graph;
  const Uses uses(g);
  std::set<size_t> taken;
  std::vector<Rewrite> rewrites;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if ((n.domain.empty() && n.op_type == "MatMul") || (n.domain == kKilnDomain && n.op_type == "FusedMatMul"))
      match_result_cast(g, uses, i, taken, rewrites);
  }
  return apply_retyping(model, rewrites);
}

size_t fold_transposes_into_matmul(Model& model) {
  std::vector<Rewrite> rewrites = find_rewrites(
      model, [](const Node& n) { return n.domain.empty() && n.op_type == "MatMul"; }, match_transposed_operand);
  if (rewrites.empty()) return 0;
  apply(model, rewrites);
  return rewrites.size();
}

size_t fuse(Model& model, bool for_training, bool attention_views) {
  // First: its ranks follow the standard ops the other passes replace.
  const size_t folded = fold_score_slices_into_labels(model);
  const size_t n = folded + drop_inactive_dropout(model) + fuse_gelu(model) + fuse_masked_softmax(model);
  const size_t m = fuse_attention(model, for_training) + (attention_views ? fold_views_into_attention(model) : 0) +
                   fold_transposes_into_matmul(model);
  // Not in the gradient builder's forward graph, whose products have no Casts yet and whose
  // gradient rules do not take out_dtype.
  if (for_training) return n + m;
  const size_t k = fold_result_casts_into_products(model) + to_channels_last(model) + forward_identities(model);
  const size_t l = join_slice_gradients(model) + fuse_loss_with_gradient(model);
  return n + m + k + l + fold_16_bit_casts(model);  // after the loss fusion, whose node it may fold into
}

}  // namespace kiln
