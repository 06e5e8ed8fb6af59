// fold_score_slices_into_labels (fusion.h): a causal language model's shifted loss, as Hugging
// Face writes it (logits[..., :-1, :] against labels[..., 1:], both flattened), slices the whole
// [batch, seq, vocabulary] logits and, in the backward, pads their gradient back: two copies of the
// largest tensor of the step. Padding the labels with ignore_index instead (a few integers) gives
// the same loss over the unsliced logits.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ir/fusion.h"
#include "ir/fusion_rewrite.h"

namespace kiln {
namespace {

using fusion::Uses;

// A constant's value as integers (an initializer or a Constant node), if it is one; also a Concat
// over axis 0 and an Unsqueeze of such values (torch exports view(-1, x.size(-1)) as
// Concat(Unsqueeze(-1), Unsqueeze(C))).
std::optional<std::vector<int64_t>> constant_ints(const Graph& g, const Uses& uses, const std::string& v,
                                                  int depth = 0) {
  if (depth > 8) return std::nullopt;
  if (const size_t c = uses.producer(v, "Concat"); c != fusion::kNone && g.nodes[c].attr_int("axis", -1) == 0) {
    std::vector<int64_t> all;
    for (const std::string& part : g.nodes[c].inputs) {
      const auto p = constant_ints(g, uses, part, depth + 1);
      if (!p) return std::nullopt;
      all.insert(all.end(), p->begin(), p->end());
    }
    return all;
  }
  if (const size_t u = uses.producer(v, "Unsqueeze"); u != fusion::kNone && !g.nodes[u].inputs.empty()) {
    const auto one = constant_ints(g, uses, g.nodes[u].inputs[0], depth + 1);  // [x] or x: the same values
    return one && one->size() == 1 ? one : std::nullopt;
  }
  return uses.ints(v);
}

bool same_dim(const Dim& a, const Dim& b) {
  return a.value >= 0 ? a.value == b.value : !a.param.empty() && a.param == b.param;
}

// The rank of each value, from the hints and initializers, then node by node (in order) by what
// each op's rank is from its inputs': through the whole graph, where ONNX's inference stops at the
// first computed Reshape of an attention block.
class Ranks {
 public:
  Ranks(const Graph& g, const Uses& uses) {
    for (const Node& n : g.nodes) {
      if (!n.domain.empty() || n.outputs.empty() || n.outputs[0].empty()) continue;
      if (const auto r = rank_by_op(g, uses, n)) rank_.emplace(n.outputs[0], *r);
    }
  }
  std::optional<size_t> of(const Graph& g, const std::string& v) const {
    if (const auto h = fusion::hinted_info(g, v)) return h->dims.size();
    const auto it = rank_.find(v);
    return it == rank_.end() ? std::nullopt : std::optional(it->second);
  }

 private:
  std::optional<size_t> rank_by_op(const Graph& g, const Uses& uses, const Node& n) const {
    static const std::set<std::string> kElementwise{"Add", "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min"};
    static const std::set<std::string> kSameRank{"Cast",
                                                 "Identity",
                                                 "Relu",
                                                 "Neg",
                                                 "Softmax",
                                                 "LogSoftmax",
                                                 "Dropout",
                                                 "Sqrt",
                                                 "Exp",
                                                 "Log",
                                                 "Tanh",
                                                 "Sigmoid",
                                                 "Erf",
                                                 "Abs",
                                                 "Slice",
                                                 "Concat",
                                                 "Clip",
                                                 "Tile",
                                                 "Trilu",
                                                 "LeakyRelu",
                                                 "Reciprocal",
                                                 "LayerNormalization",
                                                 "BatchNormalization"};
    const std::string& op = n.op_type;
    std::vector<size_t> in;
    for (const std::string& x : n.inputs) {
      const auto r = x.empty() ? std::nullopt : of(g, x);
      if (!r) break;
      in.push_back(*r);
    }
    const bool all = !n.inputs.empty() && in.size() == n.inputs.size();
    if (op == "Constant") {
      const auto a = n.attrs.find("value");
      if (a != n.attrs.end() && a->second.kind == Attribute::Kind::Tensor) return a->second.t.shape().size();
      return std::nullopt;
    }
    if (kElementwise.count(op) && all) return *std::max_element(in.begin(), in.end());
    if (kSameRank.count(op) && !in.empty()) return in[0];
    if (op == "Transpose" && n.has_attr("perm")) return n.attr_ints("perm").size();
    if (op == "Transpose" && !in.empty()) return in[0];
    if (op == "Gemm") return 2;
    if (op == "Gather" && all && in.size() == 2 && in[0] >= 1) return in[0] + in[1] - 1;
    if (op == "MatMul" && all && in.size() == 2) {
      if (in[0] == 1 || in[1] == 1) return in[0] + in[1] - 2;  // a vector operand's axis goes
      return std::max(in[0], in[1]);
    }
    if (op == "Reshape" && n.inputs.size() == 2) {
      if (const auto shape = constant_ints(g, uses, n.inputs[1])) return shape->size();
      const auto h = fusion::hinted_info(g, n.inputs[1]);
      if (h && h->dims.size() == 1 && h->dims[0].value >= 0) return static_cast<size_t>(h->dims[0].value);
    }
    return std::nullopt;
  }

  std::map<std::string, size_t> rank_;
};

// A found shifted loss: the SoftmaxCrossEntropyLoss at `loss` reads Reshape(Slice(scores)) (nodes
// `reshape`, `slice`) and Reshape(labels) (node `labels_reshape`); the labels padded by `before`
// and `after` on `axis` line up with the unsliced scores. `rows`: the reshape's target when it is
// [-1, the scores' own last dim] computed, else empty (then `classes` is the constant's).
struct SlicedScores {
  size_t loss, reshape, slice, labels_reshape;
  std::string scores, labels, rows;
  int64_t classes, axis, before, after, rank;
  int64_t start, end;
  int64_t classes_dim;  // with `rows`: the dim of the scores it reads
  DType labels_dtype;
};

// The pads of a Slice of [start, end) (ONNX's clamping) over an axis of `extent` (-1: unknown).
std::optional<std::pair<int64_t, int64_t>> slice_pads(int64_t start, int64_t end, int64_t extent) {
  constexpr int64_t kToTheEnd = std::numeric_limits<int32_t>::max();  // torch writes INT64_MAX
  if (extent >= 0) {
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + extent : v, int64_t{0}, extent); };
    const int64_t s = clamp(start), e = clamp(end);
    if (e <= s) return std::nullopt;
    return std::pair{s, extent - e};
  }
  if (start < 0) return std::nullopt;
  if (end < 0) return std::pair{start, -end};  // [start, extent + end), not empty in a working graph
  if (end >= kToTheEnd) return std::pair{start, int64_t{0}};
  return std::nullopt;
}

// Which dim of `x` `v` is, as torch exports x.size(k) with dynamic axes: [Unsqueeze / Squeeze of]
// Gather(Shape(x), k) or Slice(Shape(x), [k], [to the end]) with k = -1; nullopt if neither.
std::optional<int64_t> dim_of(const Graph& g, const Uses& uses, std::string v, const std::string& x) {
  for (int hops = 0; hops < 4; ++hops) {
    size_t p = uses.producer(v, "Unsqueeze");
    if (p == fusion::kNone) p = uses.producer(v, "Squeeze");
    if (p == fusion::kNone) break;
    v = g.nodes[p].inputs[0];
  }
  size_t p = uses.producer(v, "Gather");
  if (p == fusion::kNone) p = uses.producer(v, "Slice");
  if (p == fusion::kNone || g.nodes[p].inputs.size() < 2) return std::nullopt;
  const Node& pick = g.nodes[p];
  const size_t shape = uses.producer(pick.inputs[0], "Shape");
  if (shape == fusion::kNone || g.nodes[shape].inputs[0] != x || !g.nodes[shape].attrs.empty()) return std::nullopt;
  const auto first = constant_ints(g, uses, pick.inputs[1]);
  if (!first || first->size() != 1) return std::nullopt;
  if (pick.op_type == "Gather") return pick.attr_int("axis", 0) == 0 ? std::optional((*first)[0]) : std::nullopt;
  const auto last = pick.inputs.size() > 2 ? constant_ints(g, uses, pick.inputs[2]) : std::nullopt;
  const bool to_the_end = (*first)[0] == -1 && last && last->size() == 1 &&
                          (*last)[0] >= std::numeric_limits<int32_t>::max() &&
                          (pick.inputs.size() < 5 || pick.inputs[4].empty());
  return to_the_end ? std::optional<int64_t>(-1) : std::nullopt;
}

// The Slice of the scores: [start, end) on one axis, step 1.
bool find_slice(const Graph& g, const Uses& uses, SlicedScores& m) {
  const Node& reshape = g.nodes[m.reshape];
  m.slice = uses.producer(reshape.inputs[0], "Slice");
  if (m.slice == fusion::kNone || uses.sole_reader(reshape.inputs[0]) != m.reshape) return false;
  const Node& slice = g.nodes[m.slice];
  if (slice.inputs.size() < 4) return false;  // the axis is named
  const auto starts = constant_ints(g, uses, slice.inputs[1]), ends = constant_ints(g, uses, slice.inputs[2]);
  const auto axes = constant_ints(g, uses, slice.inputs[3]);
  const auto steps = slice.inputs.size() > 4 && !slice.inputs[4].empty() ? constant_ints(g, uses, slice.inputs[4])
                                                                         : std::optional(std::vector<int64_t>{1});
  if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1 || axes->size() != 1 ||
      steps->size() != 1 || (*steps)[0] != 1)
    return false;
  m.scores = slice.inputs[0];
  m.start = (*starts)[0];
  m.end = (*ends)[0];
  m.axis = (*axes)[0];
  return true;
}

// Reshape(sliced scores, [n, classes]) with constant classes, or [-1, the scores' last dim].
bool find_rows(const Graph& g, const Uses& uses, SlicedScores& m) {
  const Node& reshape = g.nodes[m.reshape];
  if (reshape.inputs.size() != 2 || reshape.attr_int("allowzero", 0) != 0) return false;
  if (const auto rows = constant_ints(g, uses, reshape.inputs[1])) {
    m.classes = rows->size() == 2 ? (*rows)[1] : 0;
    return m.classes > 0;
  }
  const size_t concat = uses.producer(reshape.inputs[1], "Concat");
  if (concat == fusion::kNone || g.nodes[concat].inputs.size() != 2 || g.nodes[concat].attr_int("axis", -1) != 0)
    return false;
  const auto lead = constant_ints(g, uses, g.nodes[concat].inputs[0]);
  if (!lead || *lead != std::vector<int64_t>{-1}) return false;
  const auto dim = dim_of(g, uses, g.nodes[concat].inputs[1], m.scores);
  if (!dim) return false;
  m.rows = reshape.inputs[1];
  m.classes = -1;
  m.classes_dim = *dim;  // the last: checked once the rank is known
  return true;
}

// Whether `x` is MatMul(A, B) with B [..., k, n] by its hint.
bool product_columns_are(const Graph& g, const Uses& uses, const std::string& x, int64_t n) {
  const size_t p = uses.producer(x, "MatMul");
  if (p == fusion::kNone || g.nodes[p].inputs.size() != 2) return false;
  const auto hb = fusion::hinted_info(g, g.nodes[p].inputs[1]);
  return hb && hb->dims.size() >= 2 && hb->dims.back().value == n;
}

// The labels, shaped as the sliced scores without the classes: the pads that line them up, from
// both hints, or (the scores unshaped, behind a computed Reshape) from the ops that make the scores.
bool line_up_labels(const Graph& g, const Uses& uses, SlicedScores& m) {
  m.labels_reshape = uses.producer(g.nodes[m.loss].inputs[1], "Reshape");
  if (m.labels_reshape == fusion::kNone) return false;
  m.labels = g.nodes[m.labels_reshape].inputs[0];
  const auto hl = fusion::hinted_info(g, m.labels);
  if (!hl || !hl->has_type || (hl->dtype != DType::Int64 && hl->dtype != DType::Int32)) return false;
  m.labels_dtype = hl->dtype;
  m.rank = static_cast<int64_t>(hl->dims.size()) + 1;
  if (m.axis < 0) m.axis += m.rank;
  if (m.axis < 0 || m.axis >= m.rank - 1) return false;
  if (!m.rows.empty() && m.classes_dim != -1 && m.classes_dim != m.rank - 1) return false;
  const auto hs = fusion::hinted_info(g, m.scores);
  if (!hs) {
    // Scores [a, b, classes] by their producers, labels [a', b']: the loss's row count, (b - pads) a
    // = a' b', and the padded labels', b a = a' (b' + pads), which the rewritten loss checks, leave
    // a = a' and b = b' + pads. The classes are the scores' last dim: read from their Shape, or
    // the columns of the product that makes them (a language-model head).
    if (m.rank != 3 || Ranks(g, uses).of(g, m.scores) != std::optional<size_t>(3)) return false;
    if (m.rows.empty() && !product_columns_are(g, uses, m.scores, m.classes)) return false;
    const auto pads = slice_pads(m.start, m.end, -1);
    if (pads) std::tie(m.before, m.after) = *pads;
    return pads.has_value();
  }
  if (static_cast<int64_t>(hs->dims.size()) != m.rank || (m.classes > 0 && hs->dims.back().value != m.classes))
    return false;
  const auto pads = slice_pads(m.start, m.end, hs->dims[static_cast<size_t>(m.axis)].value);
  if (!pads) return false;
  std::tie(m.before, m.after) = *pads;
  for (int64_t d = 0; d + 1 < m.rank; ++d) {
    const Dim& label = hl->dims[static_cast<size_t>(d)];
    const Dim& score = hs->dims[static_cast<size_t>(d)];
    if (d != m.axis && !same_dim(label, score)) return false;
    if (d == m.axis && score.value >= 0 && label.value != score.value - m.before - m.after) return false;
  }
  return true;
}

std::optional<SlicedScores> sliced_scores(const Graph& g, const Uses& uses, size_t i) {
  const Node& loss = g.nodes[i];
  if (loss.inputs.size() < 2 || loss.attr_string("reduction", "mean") == "none") return std::nullopt;
  if (loss.outputs.size() > 1 && !loss.outputs[1].empty() && uses.read(loss.outputs[1])) return std::nullopt;
  SlicedScores m{};
  m.loss = i;
  m.reshape = uses.producer(loss.inputs[0], "Reshape");
  if (m.reshape == fusion::kNone || uses.sole_reader(loss.inputs[0]) != i) return std::nullopt;
  if (!find_slice(g, uses, m) || !find_rows(g, uses, m) || !line_up_labels(g, uses, m)) return std::nullopt;
  return m;
}

// Reshape(scores, [-1, classes]) and Reshape(Pad(labels, ignore_index), [-1]) for the loss.
std::vector<Node> unsliced_inputs(GraphEditor& names, const Graph& g, const SlicedScores& m, Node& loss) {
  const Node& reshape = g.nodes[m.reshape];
  const bool wide = m.labels_dtype == DType::Int64;
  const int64_t ignore = loss.has_attr("ignore_index")
                             ? loss.attr_int("ignore_index")
                             : (wide ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min());
  std::vector<int64_t> pads(static_cast<size_t>(2 * (m.rank - 1)), 0);
  pads[static_cast<size_t>(m.axis)] = m.before;
  pads[static_cast<size_t>(m.rank - 1 + m.axis)] = m.after;
  const std::string rows =
      !m.rows.empty() ? m.rows
                      : names.constant(reshape.name + "/rows", Tensor::from_vector<int64_t>({2}, {-1, m.classes}));
  const std::string pad_sizes = names.constant(loss.name + "/label_pads",
                                               Tensor::from_vector<int64_t>({static_cast<int64_t>(pads.size())}, pads));
  const std::string fill =
      names.constant(loss.name + "/ignored",
                     wide ? Tensor::scalar<int64_t>(ignore) : Tensor::scalar<int32_t>(static_cast<int32_t>(ignore)));
  const std::string flat = names.constant(loss.name + "/flat", Tensor::from_vector<int64_t>({1}, {-1}));
  auto node = [&](const char* op, std::vector<std::string> in, const std::string& base) {
    Node n;
    n.op_type = op;
    n.name = names.fresh(base);
    n.inputs = std::move(in);
    n.outputs = {names.fresh(base)};
    return n;
  };
  std::vector<Node> out;
  out.push_back(node("Reshape", {m.scores, rows}, reshape.name + "/unsliced"));
  out.push_back(node("Pad", {m.labels, pad_sizes, fill}, loss.name + "/padded_labels"));
  out.push_back(node("Reshape", {out.back().outputs[0], flat}, loss.name + "/flat_labels"));
  loss.inputs[0] = out[0].outputs[0];
  loss.inputs[1] = out[2].outputs[0];
  loss.attrs["ignore_index"] = Attribute::of_int(ignore);
  return out;
}

}  // namespace

size_t fold_score_slices_into_labels(Model& model) {
  Graph& g = model.graph;
  if (const auto it = model.opsets.find(""); it == model.opsets.end() || it->second < 13) return 0;  // Pad's inputs
  std::vector<SlicedScores> found;
  {
    const Uses uses(g);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].domain.empty() && g.nodes[i].op_type == "SoftmaxCrossEntropyLoss")
        if (auto m = sliced_scores(g, uses, i)) found.push_back(*m);
  }
  if (found.empty()) return 0;
  GraphEditor names(model);
  std::map<size_t, std::vector<Node>> before;  // loss node -> the nodes it now reads
  std::set<size_t> gone;
  std::set<std::string> gone_values, labels_reshapes;
  for (const SlicedScores& m : found) {
    labels_reshapes.insert(g.nodes[m.labels_reshape].outputs[0]);
    before[m.loss] = unsliced_inputs(names, g, m, g.nodes[m.loss]);
    for (size_t k : {m.slice, m.reshape}) {
      gone.insert(k);
      gone_values.insert(g.nodes[k].outputs[0]);
    }
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (gone.count(i)) continue;
    if (const auto it = before.find(i); it != before.end())
      for (Node& n : it->second) kept.push_back(std::move(n));
    kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  // The labels' old Reshape and the Slice's constants, when nothing else reads them.
  const Uses after(g);
  std::erase_if(g.nodes, [&](const Node& n) {
    const bool dead = n.domain.empty() && (n.op_type == "Constant" || n.op_type == "Reshape") &&
                      n.outputs.size() == 1 && !after.read(n.outputs[0]) &&
                      (n.op_type == "Constant" || labels_reshapes.count(n.outputs[0]));
    if (dead) gone_values.insert(n.outputs[0]);
    return dead;
  });
  std::erase_if(g.value_info, [&](const ValueInfo& v) { return gone_values.count(v.name) != 0; });
  return found.size();
}

}  // namespace kiln
