// fuse_gelu (ir/fusion.h): the GELU chains exporters write become one ai.kiln.Gelu whose outputs
// match the unfused chain's (the chain in float32 ops against Gelu in double, rounded once: within
// 4 float ulps); chains whose intermediates are read elsewhere, or whose constants are not GELU's,
// stay; and a gradient graph built through the fusion matches finite differences.
#include "ir/fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "graph_builder.h"
#include "kiln/autodiff.h"
#include "kiln/session.h"

namespace kiln {
namespace {

// Which way each chain is written: the forms torch.onnx exports and Hugging Face's GELU classes.
enum class Form { TorchErf, ErfTimesRecipSqrt2HalfFirst, TanhMulCube, TanhPowCube };

std::string c(GraphBuilder& b, float v) {
  return b.op("Constant", {}, {{"value", Attribute::of_tensor(Tensor::scalar<float>(v))}});
}

// y = GELU(x) written in `form`; `leak` also returns an intermediate of the chain as an output.
Model gelu_model(Form form, bool leak = false, float half = 0.5f) {
  GraphBuilder b("gelu", 1);
  const std::string x = b.input("x", DType::Float32, {-1, 37});
  std::string inner;
  std::string y;
  if (form == Form::TorchErf || form == Form::ErfTimesRecipSqrt2HalfFirst) {
    const std::string t =
        form == Form::TorchErf ? b.op("Div", {x, c(b, 1.4142135381698608f)}) : b.op("Mul", {c(b, 0.70710678f), x});
    inner = b.op("Erf", {t});
    const std::string a = b.op("Add", {inner, c(b, 1.f)});
    y = form == Form::TorchErf ? b.op("Mul", {b.op("Mul", {x, a}), c(b, half)})
                               : b.op("Mul", {b.op("Mul", {x, c(b, half)}), a});
  } else {
    const std::string cube =
        form == Form::TanhPowCube ? b.op("Pow", {x, c(b, 3.f)}) : b.op("Mul", {x, b.op("Mul", {x, x})});
    const std::string s = b.op("Add", {x, b.op("Mul", {c(b, 0.044714998453855515f), cube})});
    inner = b.op("Tanh", {b.op("Mul", {c(b, 0.7978845834732056f), s})});
    y = b.op("Mul", {c(b, half), b.op("Mul", {x, b.op("Add", {c(b, 1.f), inner})})});
  }
  b.output(y, "y", DType::Float32, {-1, 37});
  if (leak) b.output(inner, "leak", DType::Float32, {-1, 37});  // a second reader of the Erf / Tanh output
  Model m = b.build();
  return m;
}

Tensor normal(Shape shape, uint64_t seed, float scale) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::normal_distribution<float> d(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return t;
}

TEST(GeluFusion, EveryFormBecomesOneNodeThatMatchesTheChain) {
  for (const Form form : {Form::TorchErf, Form::ErfTimesRecipSqrt2HalfFirst, Form::TanhMulCube, Form::TanhPowCube}) {
    SCOPED_TRACE(static_cast<int>(form));
    const Model chain = gelu_model(form);
    Model fused = chain;
    ASSERT_EQ(fuse_gelu(fused), 1u);
    EXPECT_EQ(count(fused, "Gelu"), 1u);
    for (const char* gone : {"Erf", "Tanh", "Mul", "Add", "Div", "Pow", "Constant"})
      EXPECT_EQ(count(fused, gone), 0u) << gone;
    EXPECT_EQ(fused.opset(kKilnDomain), 1);
    const Node& gelu = *std::find_if(fused.graph.nodes.begin(), fused.graph.nodes.end(),
                                     [](const Node& n) { return n.op_type == "Gelu"; });
    EXPECT_EQ(gelu.domain, kKilnDomain);
    EXPECT_EQ(gelu.attr_string("approximate"), form >= Form::TanhMulCube ? "tanh" : "none");
    const std::map<std::string, Tensor> feeds{{"x", normal({300, 37}, 7, 3.f)}};
    const Tensor want = Session(chain, {.fuse = false}).run(feeds).at("y");
    const Tensor got = Session(fused).run(feeds).at("y");
    const bool tanh = form >= Form::TanhMulCube;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double v = feeds.at("x").data<float>()[i];
      const double exact = tanh ? v / (1 + std::exp(-2 * 0.7978845608028654 * (v + 0.044715 * v * v * v)))
                                : 0.5 * v * std::erfc(-v / std::sqrt(2.0));
      const float w = want.data<float>()[i], g = got.data<float>()[i];
      // The node: the tanh form within one rounding of the double value, the erf form within 4 ulp
      // (vector_math.h). The float32 chain: within its own error, which cancellation in 1 + erf
      // (1 + tanh) makes absolute for x < 0.
      ASSERT_LE(std::abs(g - exact),
                (tanh ? 1.2 : 2.0) * std::numeric_limits<float>::epsilon() * std::abs(exact) + 1e-38)
          << "x = " << v;
      ASSERT_LE(std::abs(g - w), 1e-6f * std::max(1.f, std::abs(w))) << "x = " << v;
    }
  }
}

TEST(GeluFusion, ChainsThatAreNotPlainGeluStay) {
  for (const Form form : {Form::TorchErf, Form::TanhMulCube}) {
    Model leaked = gelu_model(form, /*leak=*/true);
    EXPECT_EQ(fuse_gelu(leaked), 0u);
    Model returned = gelu_model(form);  // an intermediate the graph returns
    for (const Node& n : returned.graph.nodes)
      if (n.op_type == "Add") returned.graph.outputs.push_back(ValueInfo{.name = n.outputs[0]});
    EXPECT_EQ(fuse_gelu(returned), 0u);
    Model other = gelu_model(form, false, 0.6f);  // not GELU's half
    EXPECT_EQ(fuse_gelu(other), 0u);
    EXPECT_EQ(count(other, "Gelu"), 0u);
  }
}

// A session fuses by default, and keeps the chain where a training graph's backward reads it.
TEST(GeluFusion, SessionsFuseAndGradientsAreBuiltFromTheFusedNode) {
  GraphBuilder b("mlp", 3);
  const std::string x = b.input("x", DType::Float32, {-1, 8});
  const std::string h = b.linear(x, 8, 16, "fc1");
  const std::string t = b.op("Erf", {b.op("Div", {h, c(b, 1.4142135381698608f)})});
  const std::string g = b.op("Mul", {b.op("Mul", {h, b.op("Add", {t, c(b, 1.f)})}), c(b, 0.5f)});
  const std::string y = b.linear(g, 16, 1, "fc2");
  b.output(b.op("ReduceSum", {y}, {{"keepdims", Attribute::of_int(0)}}), "loss", DType::Float32, {});
  const Model forward = b.build();
  Session plain(forward);
  EXPECT_EQ(count(plain.model(), "Gelu"), 1u);
  const GradientGraph grads = build_gradient_graph(forward, {.loss = "loss"});
  EXPECT_EQ(count(grads.model, "Gelu"), 1u);
  EXPECT_EQ(count(grads.model, "GeluGrad"), 1u);
  EXPECT_EQ(count(grads.model, "Erf"), 0u);
  // fc1's weight gradient against central differences of the unfused forward, in float64 sums.
  const Tensor input = normal({5, 8}, 11, 1.5f);
  auto loss_at = [&](const Model& m) {
    return Session(m, {.fuse = false}).run({{"x", input}}).at("loss").item_as_double();
  };
  const Tensor dw = Session(grads.model).run({{"x", input}}).at(grads.grads.at("fc1.weight"));
  Model probe = forward;
  Tensor& w = probe.graph.initializers.at("fc1.weight");
  for (int64_t i : {0, 17, 63, 100}) {
    const float saved = w.data<float>()[i], step = 1e-2f;
    w.data<float>()[i] = saved + step;
    const double up = loss_at(probe);
    w.data<float>()[i] = saved - step;
    const double down = loss_at(probe);
    w.data<float>()[i] = saved;
    EXPECT_NEAR(dw.data<float>()[i], (up - down) / (2 * step), 2e-3) << "element " << i;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// forward_identities: a chain of Identities after a node (an eval-mode Dropout, then the Identity an
// exporter adds to name the graph output) collapses onto the producer, which then writes the
// graph output itself.
TEST(ForwardIdentities, ChainsEndAtTheGraphOutput) {
  GraphBuilder b("identities", 1);
  const std::string x = b.input("x", DType::Float32, {2, 3});
  const std::string relu = b.op("Relu", {x});
  b.output(b.op("Identity", {b.op("Identity", {relu})}), "y", DType::Float32, {2, 3});
  Model m = b.build();
  EXPECT_GE(forward_identities(m), 2u);  // the builder may name the output with one more
  ASSERT_EQ(m.graph.nodes.size(), 1u);
  EXPECT_EQ(m.graph.nodes[0].outputs, std::vector<std::string>{"y"});
  const Tensor in = Tensor::from_vector<float>({2, 3}, {-1.f, 2.f, -3.f, 4.f, 0.f, 6.f});
  const Tensor y = Session(b.build()).run({{"x", in}}).at("y");
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 6), (std::vector<float>{0, 2, 0, 4, 0, 6}));
}

}  // namespace
}  // namespace kiln
