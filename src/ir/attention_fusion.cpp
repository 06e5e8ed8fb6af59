// fuse_attention (fusion.h): attention's MatMul(Softmax(Z), V) into ai.kiln.Attention.
#include <algorithm>
#include <cmath>

#include "ir/fusion.h"
#include "ir/fusion_rewrite.h"

namespace kiln {
namespace {

using namespace fusion;  // the shared rewrite pieces (fusion_rewrite.h)

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
  if (const auto h = hinted_info(g, v)) return h->dims.size();
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
    const auto shape = hinted_info(g, n.inputs[1]);
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
  const auto hq = hinted_info(g, q), hk = hinted_info(g, kt);
  const int64_t sq = hq ? hq->dims[hq->dims.size() - 2].value : -1, sk = hk ? hk->dims.back().value : -1;
  for (const std::string& s : spread) {
    const auto h = hinted_info(g, s);
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

// The ai.kiln.Attention at `at` with the Transposes around it folded into its perm attributes
// (attention_common.h's layouts): Q, Kt and V read through a Transpose that only the node reads,
// its perm keeping the operand's columns the stored last axis (Kt: its rows or its columns), and Y
// written through a Transpose that alone reads it, keeping Y's last axis last. A scaling of Q or
// Kt by a constant (Div, or Mul on either side) that only the node reads, the exporters' q /
// sqrt(d), goes into the scale first. nullopt when nothing folds.
std::optional<Rewrite> match_attention_views(const Graph& g, const Uses& u, size_t at) {
  const Node& a = g.nodes[at];
  if (a.inputs.size() < 3 || a.outputs.empty() || a.has_attr("perm_q") || a.has_attr("perm_kt") ||
      a.has_attr("perm_v") || a.has_attr("perm_y"))
    return std::nullopt;
  const std::optional<DType> dtype = hinted_dtype(g, a.outputs[0]);
  if (dtype != DType::Float32 && dtype != DType::Float64) return std::nullopt;
  Rewrite r;
  r.fused = a;
  double scale = a.attr_float("scale", 1.f);
  for (size_t i = 0; i < 2; ++i) {
    const std::string& x = r.fused.inputs[i];
    const size_t div = u.producer(x, "Div"), mul = u.producer(x, "Mul");
    const size_t s = div != kNone ? div : mul;
    if (s == kNone || u.sole_reader(x) != at || g.nodes[s].inputs.size() != 2) continue;
    const Node& n = g.nodes[s];
    for (int side = 1; side >= (mul != kNone ? 0 : 1); --side) {
      const std::optional<double> k = scalar_through_cast(g, u, n.inputs[side]);
      if (!k || *k == 0.0 || !std::isfinite(*k)) continue;
      scale *= div != kNone ? 1.0 / *k : *k;
      r.fused.inputs[i] = n.inputs[1 - side];
      r.nodes.push_back(s);
      break;
    }
  }
  static constexpr const char* kPerms[] = {"perm_q", "perm_kt", "perm_v"};
  for (size_t i = 0; i < 3; ++i) {
    const std::string& x = r.fused.inputs[i];
    const size_t t = u.producer(x, "Transpose");
    // The scaled operand's Transpose is read by the scaling, which the node replaces.
    const size_t reader =
        std::find(r.nodes.begin(), r.nodes.end(), u.sole_reader(x)) != r.nodes.end() ? u.sole_reader(x) : at;
    if (t == kNone || u.sole_reader(x) != reader || !g.nodes[t].has_attr("perm") || g.nodes[t].inputs.size() != 1)
      continue;
    const std::vector<int64_t>& perm = g.nodes[t].attrs.at("perm").ints;
    const auto rank = static_cast<int64_t>(perm.size());
    const bool keeps = rank >= 2 && (perm.back() == rank - 1 || (i == 1 && perm[perm.size() - 2] == rank - 1));
    if (!keeps) continue;
    r.fused.inputs[i] = g.nodes[t].inputs[0];
    r.fused.attrs[kPerms[i]] = Attribute::of_ints(perm);
    r.nodes.insert(r.nodes.begin(), t);
  }
  r.nodes.push_back(at);
  if (const size_t t = u.sole_reader(a.outputs[0]); t != kNone && g.nodes[t].domain.empty() &&
                                                    g.nodes[t].op_type == "Transpose" && g.nodes[t].has_attr("perm") &&
                                                    g.nodes[t].outputs.size() == 1) {
    const std::vector<int64_t>& perm = g.nodes[t].attrs.at("perm").ints;
    const auto rank = static_cast<int64_t>(perm.size());
    if (rank >= 2 && perm.back() == rank - 1) {
      std::vector<int64_t> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
      r.fused.attrs["perm_y"] = Attribute::of_ints(inverse);
      r.fused.outputs[0] = g.nodes[t].outputs[0];
      r.nodes.push_back(t);
    }
  }
  if (r.nodes.size() == 1) return std::nullopt;
  r.fused.attrs["scale"] = Attribute::of_float(static_cast<float>(scale));
  return r;
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

size_t fold_views_into_attention(Model& model) {
  std::vector<Rewrite> rewrites = find_rewrites(
      model, [](const Node& n) { return n.domain == kKilnDomain && n.op_type == "Attention"; },
      [](const Graph& g, const Uses& u, size_t i, GraphEditor&) { return match_attention_views(g, u, i); });
  if (rewrites.empty()) return 0;
  // The probabilities keep their type (a split graph may return them), which apply would drop with
  // the node that wrote them.
  Graph& g = model.graph;
  std::vector<ValueInfo> kept;
  for (const Rewrite& r : rewrites)
    for (size_t o = 1; o < r.fused.outputs.size(); ++o)
      for (const ValueInfo& v : g.value_info)
        if (v.name == r.fused.outputs[o]) kept.push_back(v);
  apply(model, rewrites);
  g.value_info.insert(g.value_info.end(), kept.begin(), kept.end());
  return rewrites.size();
}

}  // namespace kiln
