#include "training/serialized_head.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph_editor.h"
#include "kiln/error.h"

namespace kiln::training {

namespace {

// A head found: the loss node, the chain of ops between the logits and it, and the Shape nodes that
// read the shapes of the values it drops.
struct Head {
  size_t loss = 0;  // the SoftmaxCrossEntropyLoss node
  std::string hidden, weight, logits;
  bool trans_b = true;
  int64_t features = 0, classes = 0;
  std::vector<size_t> chain;          // the nodes from the logits to the loss, in that order
  std::set<std::string> values;       // the logits and the values between them and the loss
  std::vector<size_t> shape_readers;  // Shape nodes reading one of those values
};

struct Uses {
  std::map<std::string, size_t> producer;
  std::map<std::string, std::vector<size_t>> readers;  // the nodes reading each value
  explicit Uses(const Graph& g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer[o] = i;
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) readers[in].push_back(i);
    }
  }
  const Node* made_by(const Graph& g, const std::string& v) const {
    const auto it = producer.find(v);
    return it == producer.end() ? nullptr : &g.nodes[it->second];
  }
};

std::optional<std::vector<int64_t>> constant_ints(const Graph& g, const Uses& u, const std::string& v) {
  const Tensor* t = nullptr;
  if (const auto it = g.initializers.find(v); it != g.initializers.end()) t = &it->second;
  const Node* n = u.made_by(g, v);
  if (!t && n && n->op_type == "Constant" && n->has_attr("value")) t = &n->attr_tensor("value");
  if (!t || (t->dtype() != DType::Int64 && t->dtype() != DType::Int32)) return std::nullopt;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t->numel(); ++i)
    out.push_back(t->dtype() == DType::Int64 ? t->data<int64_t>()[i] : t->data<int32_t>()[i]);
  return out;
}

// A declaration of v with a shape: a graph input or output, or shape inference's value_info.
const ValueInfo* shaped(const Graph& g, const std::string& v) {
  for (const auto* list : {&g.value_info, &g.inputs, &g.outputs})
    for (const ValueInfo& info : *list)
      if (info.name == v && info.has_shape) return &info;
  return nullptr;
}

// The rank of v: declared, else through the ops that keep it (Identity, Slice, Transpose) back to
// a MatMul (its operands' larger rank) or a Reshape to a constant shape. nullopt when unknown.
std::optional<int64_t> rank_of(const Graph& g, const Uses& u, const std::string& v, int depth = 0) {
  if (const ValueInfo* info = shaped(g, v)) return static_cast<int64_t>(info->dims.size());
  if (const auto it = g.initializers.find(v); it != g.initializers.end()) return it->second.rank();
  const Node* n = u.made_by(g, v);
  if (!n || depth > 16 || !n->domain.empty() || n->inputs.empty()) return std::nullopt;
  if (n->op_type == "Identity" || n->op_type == "Slice" || n->op_type == "Transpose")
    return rank_of(g, u, n->inputs[0], depth + 1);
  if (n->op_type == "MatMul") {
    const auto a = rank_of(g, u, n->inputs[0], depth + 1), b = rank_of(g, u, n->inputs.at(1), depth + 1);
    return a && b ? std::optional<int64_t>(std::max(*a, *b)) : std::nullopt;
  }
  if (n->op_type == "Gemm" || n->op_type == "Flatten") return 2;
  if (n->op_type == "Reshape") {
    if (const auto shape = constant_ints(g, u, n->inputs.at(1))) return static_cast<int64_t>(shape->size());
    if (const ValueInfo* info = shaped(g, n->inputs.at(1)); info && info->dims.size() == 1 && info->dims[0].value >= 0)
      return info->dims[0].value;
  }
  return std::nullopt;
}

int64_t known_rank(const Graph& g, const Uses& u, const std::string& v) {
  const auto r = rank_of(g, u, v);
  if (!r) throw Unsupported(fmt::format("the rank of '{}' is not known", v));
  return *r;
}

// Whether an op between the head and the loss keeps the classes as the last axis; `moved`: the
// Transpose that puts them on axis 1 for the loss (allowed last, right before it).
void check_chain_op(const Graph& g, const Uses& u, const Node& n, bool last_before_loss) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) throw Unsupported(fmt::format("{} lies between the head and the loss", n.label()));
  if (op == "Identity" || op == "Reshape") return;  // a Reshape's last dim is checked by the loss's rank
  const int64_t r = known_rank(g, u, n.inputs[0]);
  if (op == "Flatten") {
    const int64_t axis = n.attr_int("axis", 1);
    if ((axis < 0 ? axis + r : axis) != r - 1)
      throw Unsupported(fmt::format("{} merges the classes with other axes", n.label()));
    return;
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm = n.attr_ints("perm", {});
    if (perm.empty())
      for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
    std::vector<int64_t> moved{0, r - 1};
    for (int64_t i = 1; i + 1 < r; ++i) moved.push_back(i);
    if (perm.back() == r - 1 || (last_before_loss && r > 2 && perm == moved)) return;
    throw Unsupported(fmt::format("{} moves the classes off the last axis", n.label()));
  }
  if (op == "Slice") {
    const auto starts = constant_ints(g, u, n.inputs.at(1));
    std::vector<int64_t> axes;
    if (n.inputs.size() > 3 && !n.inputs[3].empty()) {
      const auto a = constant_ints(g, u, n.inputs[3]);
      if (!a) throw Unsupported(fmt::format("{} has axes computed at run time", n.label()));
      axes = *a;
    } else if (starts) {
      for (size_t k = 0; k < starts->size(); ++k) axes.push_back(static_cast<int64_t>(k));
    } else {
      throw Unsupported(fmt::format("{} has starts computed at run time", n.label()));
    }
    for (int64_t a : axes)
      if ((a < 0 ? a + r : a) == r - 1) throw Unsupported(fmt::format("{} slices the classes", n.label()));
    return;
  }
  throw Unsupported(fmt::format("{} lies between the head and the loss", n.label()));
}

// The head whose logits `loss_node` reads, or Unsupported saying why not.
Head find_head(const Graph& g, const Uses& u, size_t loss_node) {
  const Node& sce = g.nodes[loss_node];
  if (sce.inputs.size() > 2 && !sce.inputs[2].empty())
    throw Unsupported(fmt::format("{} has class weights", sce.label()));
  if (sce.outputs.size() > 1 && !sce.outputs[1].empty() && u.readers.count(sce.outputs[1]))
    throw Unsupported(fmt::format("{}'s log_prob output is used", sce.label()));
  const std::string reduction = sce.attr_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum")
    throw Unsupported(fmt::format("{} has reduction '{}'", sce.label(), reduction));
  Head h;
  h.loss = loss_node;
  std::string v = sce.inputs[0];
  const Node* head = nullptr;
  for (;;) {
    h.values.insert(v);
    const auto p = u.producer.find(v);
    if (p == u.producer.end()) throw Unsupported(fmt::format("'{}' is not computed by a MatMul", v));
    for (size_t reader : u.readers.at(v)) {
      const Node& r = g.nodes[reader];
      const bool next = reader == loss_node || (!h.chain.empty() && reader == h.chain.back());
      if (next) continue;
      if (r.op_type != "Shape" || !r.domain.empty() || r.has_attr("start") || r.has_attr("end"))
        throw Unsupported(fmt::format("'{}' is also read by {}", v, r.label()));
      h.shape_readers.push_back(reader);
    }
    const Node& n = g.nodes[p->second];
    if (n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm")) {
      head = &n;
      break;
    }
    check_chain_op(g, u, n, std::all_of(h.chain.begin(), h.chain.end(), [&](size_t k) {
                     return g.nodes[k].op_type == "Identity";  // nothing but Identity between it and the loss
                   }));
    h.chain.push_back(p->second);
    v = n.inputs.at(0);
  }
  std::reverse(h.chain.begin(), h.chain.end());
  h.logits = v;
  const bool gemm = head->op_type == "Gemm";
  if (gemm && ((head->inputs.size() > 2 && !head->inputs[2].empty()) || head->attr_int("transA", 0) != 0 ||
               head->attr_float("alpha", 1.f) != 1.f))
    throw Unsupported(fmt::format("{} has a bias, transA or alpha", head->label()));
  h.hidden = head->inputs.at(0);
  const std::string& b = head->inputs.at(1);
  const auto weight = [&](const std::string& name) {
    const auto it = g.initializers.find(name);
    return it != g.initializers.end() && it->second.rank() == 2 ? &it->second : nullptr;
  };
  const Tensor* w = weight(b);
  h.weight = b;
  h.trans_b = gemm && head->attr_int("transB", 0) != 0;
  if (!w) {
    const Node* t = u.made_by(g, b);
    const auto perm = t ? t->attr_ints("perm", {1, 0}) : std::vector<int64_t>{};
    if (gemm || !t || t->op_type != "Transpose" || perm != std::vector<int64_t>{1, 0} || !weight(t->inputs.at(0)))
      throw Unsupported(
          fmt::format("the weight '{}' of {} is not a matrix of the model (an initializer, or its "
                      "Transpose)",
                      b, head->label()));
    h.weight = t->inputs.at(0);
    w = weight(h.weight);
    h.trans_b = true;
  }
  h.classes = h.trans_b ? w->dim(0) : w->dim(1);
  h.features = h.trans_b ? w->dim(1) : w->dim(0);
  return h;
}

std::string int_constant(GraphEditor& edit, const std::vector<int64_t>& v, const std::string& base) {
  return edit.op("Constant", {},
                 {{"value", Attribute::of_tensor(Tensor::from_vector<int64_t>({int64_t(v.size())}, v))}}, base);
}

// shape with its last entry replaced by `last`.
std::string with_last(GraphEditor& edit, const std::string& shape, int64_t last) {
  const std::string lead =
      edit.op("Slice", {shape, int_constant(edit, {0}, "lm_head_from"), int_constant(edit, {-1}, "lm_head_to")}, {},
              "lm_head_lead");
  return edit.op("Concat", {lead, int_constant(edit, {last}, "lm_head_last")}, {{"axis", Attribute::of_int(0)}},
                 "lm_head_shape");
}

}  // namespace

void serialize_lm_head(Model& m, int64_t chunks) {
  Graph& g = m.graph;
  const Uses uses(g);
  std::vector<std::string> reasons;
  std::optional<Head> found;
  for (size_t i = 0; i < g.nodes.size() && !found; ++i) {
    if (!g.nodes[i].domain.empty() || g.nodes[i].op_type != "SoftmaxCrossEntropyLoss") continue;
    try {
      found = find_head(g, uses, i);
    } catch (const Unsupported& e) {
      reasons.push_back(fmt::format("{}: {}", g.nodes[i].label(), e.what()));
    }
  }
  if (!found)
    throw Unsupported(fmt::format(
        "the LM-head serialization (embedding / projection_serialization_factor={}) needs a MatMul of the model's "
        "weight matrix whose logits a SoftmaxCrossEntropyLoss reads{}{}",
        chunks, reasons.empty() ? "; the model has no SoftmaxCrossEntropyLoss" : ": ", fmt::join(reasons, "; ")));
  const Head& h = *found;
  const Node sce = g.nodes[h.loss];
  GraphEditor edit(m);
  // The ops between the logits and the loss replayed on the head's input (d features instead of V
  // classes): each value's twin has its rows.
  std::map<std::string, std::string> twin{{h.logits, h.hidden}};
  for (size_t i : h.chain) {
    const Node n = g.nodes[i];
    const std::string& in = twin.at(n.inputs[0]);
    std::string out = in;
    const auto perm = n.attr_ints("perm", {});  // a Transpose that moves the classes goes: X keeps them last
    const bool moves_classes =
        n.op_type == "Transpose" && (perm.empty() || perm.back() != static_cast<int64_t>(perm.size()) - 1);
    if (n.op_type == "Reshape") {
      out = edit.op("Reshape", {in, with_last(edit, n.inputs.at(1), h.features)}, {}, "lm_head_rows");
    } else if (n.op_type == "Slice" || n.op_type == "Flatten" || (n.op_type == "Transpose" && !moves_classes)) {
      std::vector<std::string> inputs = n.inputs;
      inputs[0] = in;
      out = edit.op(n.op_type, inputs, n.attrs, "lm_head_rows");
    }
    twin[n.outputs[0]] = out;
  }
  // A Shape read of a value that goes: the shape of its twin, with the classes last.
  for (size_t i : h.shape_readers) {
    Node& shape = g.nodes[i];
    const std::string of = edit.op("Shape", {twin.at(shape.inputs[0])}, {}, "lm_head_rows_shape");
    const std::string lead =
        edit.op("Slice", {of, int_constant(edit, {0}, "lm_head_from"), int_constant(edit, {-1}, "lm_head_to")}, {},
                "lm_head_lead");
    shape.op_type = "Concat";
    shape.inputs = {lead, int_constant(edit, {h.classes}, "lm_head_classes")};
    shape.attrs = {{"axis", Attribute::of_int(0)}};
  }
  Node fused;
  fused.op_type = "LinearCrossEntropy";
  fused.domain = kKilnDomain;
  fused.name = edit.fresh("lm_head/LinearCrossEntropy");
  fused.inputs = {twin.at(sce.inputs[0]), h.weight, sce.inputs[1]};
  fused.outputs = {sce.outputs[0], edit.fresh("lm_head_lse")};
  fused.attrs = {{"chunks", Attribute::of_int(chunks)},
                 {"trans_b", Attribute::of_int(h.trans_b ? 1 : 0)},
                 {"reduction", Attribute::of_string(sce.attr_string("reduction", "mean"))}};
  if (sce.has_attr("ignore_index")) fused.attrs["ignore_index"] = sce.attrs.at("ignore_index");
  g.nodes.erase(g.nodes.begin() + static_cast<long>(h.loss));
  edit.add_node(std::move(fused));
  std::erase_if(g.outputs, [&](const ValueInfo& v) { return h.values.count(v.name) > 0; });
  if (!m.opsets.count(kKilnDomain)) m.opsets[kKilnDomain] = 1;
  // Producers first again (the Shape reads now come after what they read), then what nothing needs goes.
  const std::vector<size_t> order = g.topological_order();
  std::vector<Node> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(sorted);
  std::set<std::string> keep;
  for (const auto& in : g.inputs) keep.insert(in.name);
  prune(g, keep);
}

}  // namespace kiln::training
