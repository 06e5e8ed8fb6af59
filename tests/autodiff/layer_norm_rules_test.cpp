// Finite-difference checks of the LayerNormalization rule (ai.kiln.LayerNormalizationGrad): axes,
// broadcast Scale / B, no B; and the path that reuses the forward's Mean / InvStdDev outputs.
#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"
#include "kiln/autodiff.h"
#include "kiln/session.h"

namespace kiln::testing {
namespace {

Node layer_norm(size_t n_in, std::vector<std::string> outputs, int64_t axis) {
  Node n;
  n.op_type = "LayerNormalization";
  n.inputs.assign(n_in, "in");
  n.outputs = std::move(outputs);
  n.attrs = {{"axis", Attribute::of_int(axis)}, {"epsilon", Attribute::of_float(1e-3f)}};
  return n;
}

TEST(LayerNormRules, AxesAndBroadcastParameters) {
  struct Case {
    Shape x, scale, bias;
    int64_t axis;
  };
  uint64_t seed = 200;
  for (const Case& c : std::vector<Case>{{{3, 5}, {5}, {5}, -1},
                                         {{2, 3, 4}, {3, 4}, {4}, 1},
                                         {{2, 3, 4}, {1, 4}, {3, 1}, -2},
                                         {{4, 2, 3}, {2, 3}, {2, 3}, 0}}) {
    SCOPED_TRACE(to_string(c.x));
    both({layer_norm(3, {"out"}, c.axis),
          {random_tensor(c.x, seed, -2.0, 2.0), random_tensor(c.scale, seed + 1, 0.5, 1.5),
           random_tensor(c.bias, seed + 2)},
          {0, 1, 2},
          17,
          seed});
    seed += 10;
  }
}

TEST(LayerNormRules, WithoutBias) {
  both({layer_norm(2, {"out"}, -1),
        {random_tensor({3, 6}, 250, -2.0, 2.0), random_tensor({6}, 251, 0.5, 1.5)},
        {0, 1},
        17,
        250});
}

// The float32 forward's Mean / InvStdDev outputs are reused by the gradient kernel: the gradient
// of a node with them must equal the gradient of the node without them. (They cannot enter the
// finite-difference loss: they are float32 even for float64 X, so central differences at h = 1e-6
// would see their rounding.)
TEST(LayerNormRules, SavedStatisticsGiveTheSameGradient) {
  auto grads = [](bool with_stats) {
    Model m;
    m.opsets = {{"", 17}};
    Tensor x = random_tensor({4, 6}, 260, -2.0, 2.0), s = random_tensor({6}, 261, 0.5, 1.5),
           r = random_tensor({4, 6}, 262);
    auto f32 = [](const Tensor& t) {
      Tensor o = Tensor::empty(DType::Float32, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) o.data<float>()[i] = float(t.item_as_double(i));
      return o;
    };
    m.graph.initializers = {{"x", f32(x)}, {"s", f32(s)}, {"r", f32(r)}};
    Node n =
        layer_norm(2, with_stats ? std::vector<std::string>{"y", "mean", "inv"} : std::vector<std::string>{"y"}, -1);
    n.inputs = {"x", "s"};
    n.name = "ln";
    Node mul;
    mul.op_type = "Mul";
    mul.inputs = {"y", "r"};
    mul.outputs = {"p"};
    Node sum;
    sum.op_type = "ReduceSum";
    sum.inputs = {"p"};
    sum.outputs = {"loss"};
    sum.attrs["keepdims"] = Attribute::of_int(0);
    m.graph.nodes = {n, mul, sum};
    ValueInfo loss;
    loss.name = "loss";
    loss.dtype = DType::Float32;
    loss.has_type = loss.has_shape = true;
    m.graph.outputs = {loss};
    GradientGraph g = build_gradient_graph(m, {.loss = "loss", .requires_grad = {"x", "s"}});
    bool saved = false;
    for (const Node& k : g.model.graph.nodes)
      if (k.op_type == "LayerNormalizationGrad")
        saved = k.inputs.size() > 4 && k.inputs[3] == "mean" && k.inputs[4] == "inv";
    EXPECT_EQ(saved, with_stats);
    Session session(g.model);
    return session.run({});
  };
  auto a = grads(true), b = grads(false);
  for (const char* name : {"x_grad", "s_grad"}) {
    const Tensor& ga = a.at(name);
    const Tensor& gb = b.at(name);
    ASSERT_EQ(ga.shape(), gb.shape());
    for (int64_t i = 0; i < ga.numel(); ++i)
      EXPECT_NEAR(ga.item_as_double(i), gb.item_as_double(i), 1e-5 * std::max(1.0, std::abs(gb.item_as_double(i))))
          << name;
  }
}

}  // namespace
}  // namespace kiln::testing
