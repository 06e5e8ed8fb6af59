// The GradientBuilder's own duties: summing repeated uses, constants for non-differentiable paths,
// frozen parameters, zero gradients, and the errors it raises.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "kiln/autodiff.h"
#include "kiln/kernel.h"
#include "kiln/session.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

// loss = ReduceSum(op(x, x)) for x = [1, 2, 3].
std::map<std::string, Tensor> grads_of_self_op(const std::string& op) {
  GraphBuilder b("g", 1);
  b.initializer("x", Tensor::from_vector<float>({3}, {1, 2, 3}));
  const std::string y = b.op(op, {"x", "x"});
  b.output(b.op("ReduceSum", {y}, {{"keepdims", Attribute::of_int(0)}}), "loss", DType::Float32, {});
  GradientGraph g = build_gradient_graph(b.build(), {.loss = "loss"});
  Session s(g.model);
  return s.run({});
}

TEST(GradientBuilder, SumsRepeatedUses) {
  auto square = grads_of_self_op("Mul");  // d/dx sum(x*x) = 2x
  EXPECT_EQ(square.at("x_grad").to_int64_vector(), (std::vector<int64_t>{2, 4, 6}));
  auto twice = grads_of_self_op("Add");  // d/dx sum(x+x) = 2
  EXPECT_EQ(twice.at("x_grad").to_int64_vector(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(square.at("loss").item_as_double(), 14.0);
}

// y = relu(x @ w + b); loss = mean(y). Non-differentiable shape path: Reshape by Shape(x).
Model small_net() {
  GraphBuilder b("net", 7);
  std::string x = b.input("x", DType::Float32, {-1, 4});
  b.initializer("w", Tensor::from_vector<float>({4, 2}, {1, -1, 2, 0.5f, -0.5f, 1, 0.25f, 2}));
  b.initializer("b", Tensor::from_vector<float>({2}, {0.1f, -0.2f}));
  b.initializer("unused", Tensor::from_vector<float>({3}, {1, 2, 3}));
  std::string h = b.op("Add", {b.op("MatMul", {x, "w"}), "b"});
  h = b.op("Reshape", {h, b.op("Shape", {h})});
  b.output(b.op("ReduceMean", {b.op("Relu", {h})}, {{"keepdims", Attribute::of_int(0)}}), "loss", DType::Float32, {});
  return b.build();
}

TEST(GradientBuilder, FrozenParametersGetNoGradientOutput) {
  GradientGraph g = build_gradient_graph(small_net(), {.loss = "loss", .frozen_params = {"w", "unused"}});
  EXPECT_EQ(g.parameters, std::vector<std::string>{"b"});
  Session s(g.model);
  auto out = s.run({{"x", Tensor::from_vector<float>({1, 4}, {1, 1, 1, 1})}});
  EXPECT_EQ(out.count("w_grad"), 0u);
  // x @ w = [2.75, 2.5]; + b = [2.85, 2.3], both positive: d mean / d b = 1/2 each.
  EXPECT_FLOAT_EQ(out.at("b_grad").data<float>()[0], 0.5f);
  EXPECT_FLOAT_EQ(out.at("b_grad").data<float>()[1], 0.5f);
}

TEST(GradientBuilder, ParameterThatDoesNotReachTheLossHasZeroGradient) {
  GradientGraph g = build_gradient_graph(small_net(), {.loss = "loss", .requires_grad = {"unused", "w"}});
  Session s(g.model);
  auto out = s.run({{"x", Tensor::from_vector<float>({2, 4}, {1, 0, 0, 0, 0, 1, 0, 0})}});
  EXPECT_EQ(out.at("unused_grad").to_int64_vector(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(out.at("w_grad").shape(), (Shape{4, 2}));
  // Row 0 of x is e0 and row 1 is e1, so dL/dw[0] and dL/dw[1] are 1/4 where relu passes.
  EXPECT_FLOAT_EQ(out.at("w_grad").data<float>()[0], 0.25f);
}

TEST(GradientBuilder, ClearErrors) {
  const Model m = small_net();
  expect_error<InvalidArgument>([&] { build_gradient_graph(m, {.loss = "nope"}); },
                                "loss 'nope' is not a value of the graph");
  expect_error<InvalidArgument>([&] { build_gradient_graph(m, {.loss = "loss", .requires_grad = {"x"}}); },
                                "requires_grad names 'x', which is not an initializer of the model");
  expect_error<InvalidArgument>(
      [&] { build_gradient_graph(m, {.loss = "loss", .requires_grad = {"w"}, .frozen_params = {"w"}}); },
      "'w' is listed both in requires_grad and in frozen_params");
  GraphBuilder b("vec", 1);
  b.initializer("w", Tensor::from_vector<float>({3}, {1, 2, 3}));
  b.output(b.op("Relu", {"w"}), "y", DType::Float32, {3});
  expect_error<ShapeError>([&] { build_gradient_graph(b.build(), {.loss = "y"}); },
                           "loss 'y' must be a scalar (one element) but has shape [3]");
}

TEST(GradientBuilder, OpWithoutRuleOnThePathNamesNodeOpAndParameter) {
  GraphBuilder b("g", 1);
  b.initializer("w", Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  const std::string y = b.op("Frobnicate", {"w"}, {}, "frob");
  b.output(b.op("ReduceSum", {y}, {{"keepdims", Attribute::of_int(0)}}), "loss", DType::Float32, {});
  Model m = b.build();
  for (Node& n : m.graph.nodes)
    if (n.name == "frob") n.domain = "com.example";
  m.opsets["com.example"] = 1;
  expect_error<Unsupported>(
      [&] { build_gradient_graph(m, {.loss = "loss"}); },
      "node 'frob' (com.example.Frobnicate) is on the path from parameter 'w' to loss 'loss', but Kiln has "
      "no gradient for op Frobnicate");
}

}  // namespace
}  // namespace kiln
