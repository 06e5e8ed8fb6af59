// fuse_masked_softmax and drop_inactive_dropout (ir/fusion.h). Attention's Softmax(Where(mask,
// fill, scores * scale)) becomes one ai.kiln.MaskedSoftmax whose outputs match the unfused ops
// (float32: within 1e-6), in each order of Where's operands and with the scale as Mul or Div or
// absent; what is not that pattern stays; a gradient graph built through it (MaskedSoftmaxGrad)
// matches central differences. A Dropout whose constants make it the identity becomes an Identity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "graph_builder.h"
#include "ir/fusion.h"
#include "kernels/kernel_test_util.h"
#include "kiln/autodiff.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln {
namespace {

enum class Scale { MulRight, MulLeft, Div, None };

std::string constant(GraphBuilder& b, float v) {
  return b.op("Constant", {}, {{"value", Attribute::of_tensor(Tensor::scalar<float>(v))}});
}

// A causal mask over [5, 7] keys: true above the diagonal (masked when the fill goes where true).
Tensor causal(bool masked_value) {
  Tensor t = Tensor::empty(DType::Bool, {1, 1, 5, 7});
  for (int64_t q = 0; q < 5; ++q)
    for (int64_t k = 0; k < 7; ++k) t.data<bool>()[q * 7 + k] = (k > q + 2) == masked_value;
  return t;
}

// y = softmax over the last axis of where(mask, fill, s * 0.25) (fill_where) or where(mask, s * 0.25,
// fill); `leak` also returns the Where's output.
Model attention(Scale scale, bool fill_where, float fill, bool leak = false, int64_t axis = -1) {
  GraphBuilder b("attention", 1);
  const std::string s = b.input("s", DType::Float32, {2, 3, 5, 7});
  const std::string mask = b.initializer("mask", causal(fill_where));
  std::string x = s;
  if (scale == Scale::MulRight) x = b.op("Mul", {s, constant(b, 0.25f)});
  if (scale == Scale::MulLeft) x = b.op("Mul", {constant(b, 0.25f), s});
  if (scale == Scale::Div) x = b.op("Div", {s, constant(b, 4.f)});
  const std::string f = constant(b, fill);
  const std::string w =
      b.op("Where", fill_where ? std::vector<std::string>{mask, f, x} : std::vector<std::string>{mask, x, f});
  b.output(b.op("Softmax", {w}, {{"axis", Attribute::of_int(axis)}}), "y", DType::Float32, {2, 3, 5, 7});
  if (leak) b.output(w, "scores", DType::Float32, {2, 3, 5, 7});
  Model m = b.build();
  infer_shapes(m);  // the dtype hints a loaded model has
  return m;
}

TEST(MaskedSoftmaxFusion, EveryFormBecomesOneNodeThatMatchesTheOps) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const Scale scale : {Scale::MulRight, Scale::MulLeft, Scale::Div, Scale::None})
    for (const bool fill_where : {true, false})
      for (const float fill : {-inf, -1e4f}) {
        SCOPED_TRACE(testing::Message() << "scale form " << static_cast<int>(scale) << ", fill where " << fill_where
                                        << ", fill " << fill);
        const Model ops = attention(scale, fill_where, fill);
        Model fused = ops;
        ASSERT_EQ(fuse_masked_softmax(fused), 1u);
        EXPECT_EQ(count(fused, "MaskedSoftmax"), 1u);
        for (const char* gone : {"Where", "Softmax", "Mul", "Div"}) EXPECT_EQ(count(fused, gone), 0u) << gone;
        const std::map<std::string, Tensor> feeds{{"s", test_util::random_f32({2, 3, 5, 7}, 5, -6.f, 6.f)}};
        const Tensor want = Session(ops, {.fuse = false}).run(feeds).at("y");
        const Tensor got = Session(fused).run(feeds).at("y");
        for (int64_t i = 0; i < want.numel(); ++i)
          ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-6) << "element " << i;
      }
}

TEST(MaskedSoftmaxFusion, WhatIsNotTheMaskedSoftmaxStays) {
  const float inf = std::numeric_limits<float>::infinity();
  Model leaked = attention(Scale::MulRight, true, -inf, /*leak=*/true);  // the Where's output read twice
  EXPECT_EQ(fuse_masked_softmax(leaked), 0u);
  Model other_axis = attention(Scale::MulRight, true, -inf, false, /*axis=*/1);
  EXPECT_EQ(fuse_masked_softmax(other_axis), 0u);
  Model old = attention(Scale::MulRight, true, -inf);
  old.opsets[""] = 12;  // Softmax flattened to 2-D
  EXPECT_EQ(fuse_masked_softmax(old), 0u);
  Model unhinted = attention(Scale::MulRight, true, -inf);
  unhinted.graph.value_info.clear();  // no dtype known for the softmax's output
  EXPECT_EQ(fuse_masked_softmax(unhinted), 0u);
}

// The gradient graph fuses before differentiating: fc's weight gradient through the mask and scale
// against central differences of the unfused forward.
TEST(MaskedSoftmaxFusion, GradientsAreBuiltFromTheFusedNode) {
  for (const bool fill_where : {true, false}) {
    GraphBuilder b("scores", 4);
    const std::string x = b.input("x", DType::Float32, {6, 7});
    const std::string h = b.linear(x, 7, 7, "fc");
    Tensor mask = Tensor::empty(DType::Bool, {1, 7});
    for (int64_t k = 0; k < 7; ++k) mask.data<bool>()[k] = (k % 3 == 2) == fill_where;
    const std::string m = b.initializer("mask", mask);
    const std::string s = b.op("Div", {h, constant(b, 2.f)});
    const std::string f = constant(b, -std::numeric_limits<float>::infinity());
    const std::string p = b.op(
        "Softmax", {b.op("Where", fill_where ? std::vector<std::string>{m, f, s} : std::vector<std::string>{m, s, f})});
    const std::string weights = b.initializer("weights", test_util::random_f32({6, 7}, 9, -2.f, 2.f));
    b.output(b.op("ReduceSum", {b.op("Mul", {p, weights})}, {{"keepdims", Attribute::of_int(0)}}), "loss",
             DType::Float32, {});
    const Model forward = b.build();
    const GradientGraph grads = build_gradient_graph(forward, {.loss = "loss"});
    EXPECT_EQ(count(grads.model, "MaskedSoftmax"), 1u);
    EXPECT_EQ(count(grads.model, "MaskedSoftmaxGrad"), 1u);
    EXPECT_EQ(count(grads.model, "Where"), 0u);
    const Tensor input = test_util::random_f32({6, 7}, 12, -3.f, 3.f);
    const Tensor dw = Session(grads.model).run({{"x", input}}).at(grads.grads.at("fc.weight"));
    const Tensor db = Session(grads.model).run({{"x", input}}).at(grads.grads.at("fc.bias"));
    Model probe = forward;
    auto loss_at = [&]() { return Session(probe, {.fuse = false}).run({{"x", input}}).at("loss").item_as_double(); };
    for (const auto& [name, grad] : {std::pair{"fc.weight", dw}, std::pair{"fc.bias", db}}) {
      Tensor& w = probe.graph.initializers.at(name);
      for (int64_t i = 0; i < w.numel(); i += 5) {
        const float saved = w.data<float>()[i], step = 1e-2f;
        w.data<float>()[i] = saved + step;
        const double up = loss_at();
        w.data<float>()[i] = saved - step;
        const double down = loss_at();
        w.data<float>()[i] = saved;
        EXPECT_NEAR(grad.data<float>()[i], (up - down) / (2 * step), 2e-3) << name << " element " << i;
      }
    }
  }
}

// y = Dropout(x, ratio, training_mode), both constants; `mask_out` also returns the mask.
Model dropout_model(float ratio, bool training, bool mask_out = false) {
  GraphBuilder b("dropout", 2);
  const std::string x = b.input("x", DType::Float32, {4, 6});
  const std::string r = constant(b, ratio);
  const std::string t = b.op("Constant", {}, {{"value", Attribute::of_tensor(Tensor::scalar<bool>(training))}});
  const std::string y = b.op("Dropout", {x, r, t});
  b.output(y, "y", DType::Float32, {4, 6});
  Model m = b.build();
  for (Node& n : m.graph.nodes)
    if (n.op_type == "Dropout") n.outputs.push_back("mask");
  if (mask_out) m.graph.outputs.push_back(ValueInfo{.name = "mask"});
  return m;
}

TEST(InactiveDropout, BecomesAnIdentityWhenItsConstantsMakeItOne) {
  for (const auto& [ratio, training, dropped] :
       std::vector<std::tuple<float, bool, bool>>{{0.f, true, true}, {0.3f, false, true}, {0.3f, true, false}}) {
    SCOPED_TRACE(testing::Message() << "ratio " << ratio << ", training " << training);
    Model m = dropout_model(ratio, training);
    EXPECT_EQ(drop_inactive_dropout(m), dropped ? 1u : 0u);
    EXPECT_EQ(count(m, "Dropout"), dropped ? 0u : 1u);
    if (!dropped) continue;
    const Tensor x = test_util::random_f32({4, 6}, 3, -1.f, 1.f);
    const Tensor y = Session(m).run({{"x", x}}).at("y");
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);
  }
  Model mask_read = dropout_model(0.f, true, /*mask_out=*/true);  // the mask is returned: it stays
  EXPECT_EQ(drop_inactive_dropout(mask_read), 0u);
  // A gradient graph of a training-mode export with dropout 0 has no Dropout and no DropoutGrad.
  GraphBuilder b("mlp", 5);
  const std::string x = b.input("x", DType::Float32, {3, 4});
  const std::string h = b.linear(x, 4, 4, "fc");
  const std::string t = b.op("Constant", {}, {{"value", Attribute::of_tensor(Tensor::scalar<bool>(true))}});
  const std::string d = b.op("Dropout", {h, constant(b, 0.f), t});
  b.output(b.op("ReduceSum", {d}, {{"keepdims", Attribute::of_int(0)}}), "loss", DType::Float32, {});
  const GradientGraph grads = build_gradient_graph(b.build(), {.loss = "loss"});
  EXPECT_EQ(count(grads.model, "Dropout"), 0u);
  EXPECT_EQ(count(grads.model, "DropoutGrad"), 0u);
}

}  // namespace
}  // namespace kiln
