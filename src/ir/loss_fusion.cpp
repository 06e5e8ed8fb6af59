// fuse_loss_with_gradient (fusion.h): a training graph's SoftmaxCrossEntropyLoss and the gradient
// the gradient builder wrote for it, ai.kiln.SoftmaxCrossEntropyLossGrad from the scores, become
// one ai.kiln.SoftmaxCrossEntropyLossAndGrad where the gradient was: the scores are read and
// exponentiated once instead of twice (a language model's [tokens, vocabulary] logits are the
// largest values of its step).
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/fusion.h"
#include "ir/fusion_rewrite.h"

namespace kiln {
namespace {

using fusion::Rewrite;
using fusion::Uses;

// The forward's reduction and ignore_index are the gradient's.
bool same_loss_attrs(const Node& loss, const Node& grad) {
  if (loss.attr_string("reduction", "mean") != grad.attr_string("reduction", "mean")) return false;
  if (loss.has_attr("ignore_index") != grad.has_attr("ignore_index")) return false;
  return !loss.has_attr("ignore_index") || loss.attr_int("ignore_index") == grad.attr_int("ignore_index");
}

bool is_shape(const Node& n) { return n.domain.empty() && n.op_type == "Shape" && n.outputs.size() == 1; }

// Shape(loss) of a reduced (scalar) loss written later: an empty int64 constant.
void make_scalar_shape(Node& shape) {
  shape.op_type = "Constant";
  shape.inputs.clear();
  shape.attrs = {{"value", Attribute::of_tensor(Tensor::empty(DType::Int64, {0}))}};
}

// The SoftmaxCrossEntropyLoss whose gradient is `grad` (the node at index i), when fusing them
// keeps the graph's meaning and order, else kNone.
size_t loss_of(const Graph& g, const Uses& uses, size_t i) {
  const Node& grad = g.nodes[i];
  if (grad.inputs.size() < 3 || grad.attr_int("x_is_log_prob", 1) != 0) return fusion::kNone;
  const std::string weights = grad.inputs.size() > 3 ? grad.inputs[3] : std::string();
  for (size_t j : uses.readers(grad.inputs[1])) {
    const Node& loss = g.nodes[j];
    if (j >= i || !loss.domain.empty() || loss.op_type != "SoftmaxCrossEntropyLoss" || loss.inputs.size() < 2) continue;
    const std::string w = loss.inputs.size() > 2 ? loss.inputs[2] : std::string();
    if (loss.inputs[0] != grad.inputs[1] || loss.inputs[1] != grad.inputs[2] || w != weights) continue;
    if (!same_loss_attrs(loss, grad) || loss.outputs.empty() || loss.outputs[0].empty()) continue;
    // log_prob asked for and read: the fused node does not write it.
    if (loss.outputs.size() > 1 && !loss.outputs[1].empty() && uses.read(loss.outputs[1])) continue;
    // The loss is written where the gradient was: nothing before that may read it (dY included,
    // which is then not computed from the loss), but for a scalar's shape (the builder's seed, dY =
    // Expand(1, Shape(loss))), which becomes a constant.
    bool later = true;
    const bool scalar = loss.attr_string("reduction", "mean") != "none";
    for (size_t r : uses.readers(loss.outputs[0])) later = later && (r > i || (scalar && is_shape(g.nodes[r])));
    if (later) return j;
  }
  return fusion::kNone;
}

}  // namespace

size_t fuse_loss_with_gradient(Model& model) {
  std::vector<Rewrite> rewrites = fusion::find_rewrites(
      model, [](const Node& n) { return n.domain == kKilnDomain && n.op_type == "SoftmaxCrossEntropyLossGrad"; },
      [](const Graph& g, const Uses& uses, size_t i, GraphEditor& names) -> std::optional<Rewrite> {
        const size_t j = loss_of(g, uses, i);
        if (j == fusion::kNone) return std::nullopt;
        const Node& grad = g.nodes[i];
        Node fused;
        fused.domain = kKilnDomain;
        fused.op_type = "SoftmaxCrossEntropyLossAndGrad";
        fused.name = names.fresh(fusion::renamed(grad.name, "SoftmaxCrossEntropyLossAndGrad"));
        fused.inputs = grad.inputs;
        fused.outputs = {grad.outputs[0], g.nodes[j].outputs[0]};
        if (grad.outputs.size() > 1 && !grad.outputs[1].empty()) fused.outputs.push_back(grad.outputs[1]);
        for (const char* a : {"reduction", "ignore_index"})
          if (const auto it = grad.attrs.find(a); it != grad.attrs.end()) fused.attrs.emplace(a, it->second);
        return Rewrite{{j, i}, std::move(fused)};
      });
  if (rewrites.empty()) return 0;
  std::set<std::string> losses;
  for (const Rewrite& r : rewrites) losses.insert(r.fused.outputs[1]);
  for (Node& n : model.graph.nodes)
    if (is_shape(n) && n.inputs.size() == 1 && losses.count(n.inputs[0])) make_scalar_shape(n);
  fusion::apply(model, rewrites);
  return rewrites.size();
}

}  // namespace kiln
