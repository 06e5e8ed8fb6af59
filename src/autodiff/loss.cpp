// Gradient rules of SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (kernels/cpu/loss.cpp),
// by ai.kiln kernels that follow ONNX's definitions exactly (reductions, ignore_index, weights and
// the weighted mean); see kernels/cpu/loss_grad.cpp for the math. Labels get no gradient; class
// weights get one when they need it (they are float initializers, so trainable by default).
#include "autodiff/registry.h"

namespace kiln {
namespace {

std::map<std::string, Attribute> loss_attrs(const GradContext& g) {
  std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(g.node.attr_string("reduction", "mean"))}};
  if (g.node.has_attr("ignore_index")) attrs["ignore_index"] = Attribute::of_int(g.node.attr_int("ignore_index"));
  return attrs;
}

// Emits `op`(dY, x, target[, weight]) and hands out the input's and the weight's gradients.
void emit_loss_grad(GradContext& g, const std::string& op, const std::string& x,
                    std::map<std::string, Attribute> attrs) {
  std::vector<std::string> in{g.GO(0), x, g.I(1)};
  if (g.has_input(2)) in.push_back(g.I(2));
  const bool weight = g.needs(2);
  const auto outs = g.emit_multi(kKilnDomain, op, in, weight ? 2 : 1, std::move(attrs));
  g.set_GI(0, outs[0]);
  if (weight) g.set_GI(2, outs[1]);
}

// The forward's log_prob output is log_softmax(scores) over axis 1: when it is read downstream its
// gradient flows back as LogSoftmax's does, dX = G - exp(log_prob) * sum_c G.
void log_prob_grad(GradContext& g) {
  const std::string go = g.GO(1);
  std::map<std::string, Attribute> keep{{"keepdims", Attribute::of_int(1)}};
  std::string total;
  if (g.opset() >= 13) {
    total = g.emit("ReduceSum", {go, g.constant(Tensor::from_vector<int64_t>({1}, {1}))}, keep);
  } else {
    keep["axes"] = Attribute::of_ints({1});
    total = g.emit("ReduceSum", {go}, keep);
  }
  g.set_GI(0, g.emit("Sub", {go, g.emit("Mul", {g.emit("Exp", {g.O(1)}), total})}));
}

void softmax_cross_entropy_grad(GradContext& g) {
  const bool has_log_prob = g.num_outputs() > 1 && !g.node.outputs[1].empty();
  if (!g.GO(0).empty()) {
    auto attrs = loss_attrs(g);
    attrs["x_is_log_prob"] = Attribute::of_int(has_log_prob ? 1 : 0);
    emit_loss_grad(g, "SoftmaxCrossEntropyLossGrad", has_log_prob ? g.O(1) : g.I(0), std::move(attrs));
  }
  if (has_log_prob && !g.GO(1).empty()) log_prob_grad(g);
}

void nll_grad(GradContext& g) { emit_loss_grad(g, "NegativeLogLikelihoodLossGrad", g.I(0), loss_attrs(g)); }

const GradientRegistrar r_sce({"", "SoftmaxCrossEntropyLoss", 1, kMaxOpset}, softmax_cross_entropy_grad);
const GradientRegistrar r_nll({"", "NegativeLogLikelihoodLoss", 1, kMaxOpset}, nll_grad);

}  // namespace
}  // namespace kiln
