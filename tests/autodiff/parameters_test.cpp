// select_parameters: the one set of rules for which initializers are trained (the gradient builder,
// generate_artifacts and `kiln grad` all use it), checked on small hand-made graphs.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "kiln/autodiff.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using Names = std::vector<std::string>;

// loss = mean(relu(BatchNorm(x @ w + b))) + 0 * (causal mask compared, no gradient); "unused" is read
// by nothing; "steps" is an integer initializer.
Model net(int64_t bn_training_mode) {
  GraphBuilder b("net", 3);
  std::string x = b.input("x", DType::Float32, {-1, 2});
  b.initializer("w", Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4}));
  b.initializer("b", Tensor::from_vector<float>({2}, {0, 0}));
  b.initializer("scale", Tensor::from_vector<float>({2}, {1, 1}));
  b.initializer("shift", Tensor::from_vector<float>({2}, {0, 0}));
  b.initializer("mean", Tensor::from_vector<float>({2}, {0, 0}));
  b.initializer("var", Tensor::from_vector<float>({2}, {1, 1}));
  b.initializer("mask", Tensor::from_vector<float>({2}, {1, 0}));
  b.initializer("unused", Tensor::from_vector<float>({1}, {5}));
  b.initializer("steps", Tensor::from_vector<int64_t>({1}, {7}));
  std::string h = b.op("Add", {b.op("MatMul", {x, "w"}), "b"});
  std::string y = b.op("BatchNormalization", {h, "scale", "shift", "mean", "var"},
                       {{"training_mode", Attribute::of_int(bn_training_mode)}}, "bn");
  std::string keep = b.op("Cast", {b.op("Greater", {"mask", b.op("Cast", {"steps"}, {{"to", Attribute::of_int(1)}})})},
                          {{"to", Attribute::of_int(1)}});
  std::string loss = b.op("ReduceMean", {b.op("Mul", {b.op("Relu", {y}), keep})}, {{"keepdims", Attribute::of_int(0)}});
  b.output(loss, "loss", DType::Float32, {});
  return b.build();
}

TEST(SelectParameters, DefaultIsEveryFloatInitializerAGradientReachesInForwardOrder) {
  const ParameterSelection p = select_parameters(net(0), "loss", {}, {});
  // "mask" only feeds a comparison, "unused" nothing, "steps" is an integer; inference-mode
  // statistics are constants.
  EXPECT_EQ(p.trainable, (Names{"w", "b", "scale", "shift"}));
  EXPECT_TRUE(p.buffers.empty());
  EXPECT_TRUE(p.updates.empty());
}

TEST(SelectParameters, TrainingModeBatchNormStatisticsAreBuffersWithTheirUpdates) {
  Model m = net(1);
  // A training-mode BatchNormalization has the running-statistics outputs.
  for (Node& n : m.graph.nodes)
    if (n.op_type == "BatchNormalization") n.outputs = {n.outputs[0], "mean_out", "var_out"};
  const ParameterSelection p = select_parameters(m, "loss", {}, {});
  EXPECT_EQ(p.trainable, (Names{"w", "b", "scale", "shift"}));
  EXPECT_EQ(p.buffers, (Names{"mean", "var"}));
  ASSERT_EQ(p.updates.size(), 2u);
  EXPECT_EQ(p.updates[0], (std::pair<std::string, std::string>{"mean", "mean_out"}));
  EXPECT_EQ(p.updates[1], (std::pair<std::string, std::string>{"var", "var_out"}));
  expect_error<InvalidArgument>(
      [&] { select_parameters(m, "loss", {"mean"}, {}); },
      "requires_grad names 'mean', a running statistic of a training-mode BatchNormalization");
  // Gradients alone may be taken with respect to a statistic (its updated value depends on it).
  EXPECT_EQ(select_parameters(m, "loss", {"mean"}, {}, Purpose::Differentiate).trainable, (Names{"mean"}));
}

TEST(SelectParameters, FrozenAndRequestedSets) {
  const Model m = net(0);
  const ParameterSelection frozen = select_parameters(m, "loss", {}, {"w", "scale"});
  EXPECT_EQ(frozen.trainable, (Names{"b", "shift"}));
  EXPECT_EQ(frozen.frozen, (Names{"w", "scale"}));
  // An explicit request is taken as given (in its order), even for a value the loss does not reach.
  const ParameterSelection requested = select_parameters(m, "loss", {"unused", "b"}, {});
  EXPECT_EQ(requested.trainable, (Names{"unused", "b"}));
}

TEST(SelectParameters, ClearErrors) {
  const Model m = net(0);
  expect_error<InvalidArgument>([&] { select_parameters(m, "loss", {"x"}, {}); },
                                "requires_grad names 'x', which is not an initializer of the model");
  expect_error<TypeError>([&] { select_parameters(m, "loss", {"steps"}, {}); },
                          "requires_grad names 'steps', which is int64[1]; only floating-point parameters are trained");
  expect_error<InvalidArgument>([&] { select_parameters(m, "loss", {"w"}, {"w"}); },
                                "'w' is listed both in requires_grad and in frozen_params");
  expect_error<InvalidArgument>([&] { select_parameters(m, "loss", {}, {"nope"}); },
                                "frozen_params names 'nope', which is not an initializer of the model");
  expect_error<InvalidArgument>(
      [&] {
        select_parameters(m, "loss", {}, {"w", "b", "scale", "shift"});
      },
      "no trainable parameter");
}

TEST(SelectParameters, RunningStatisticInputsAreBatchNormInputsThreeAndFour) {
  Node bn;
  bn.op_type = "BatchNormalization";
  EXPECT_FALSE(is_running_statistic_input(bn, 2));
  EXPECT_TRUE(is_running_statistic_input(bn, 3));
  EXPECT_TRUE(is_running_statistic_input(bn, 4));
  bn.domain = "com.example";
  EXPECT_FALSE(is_running_statistic_input(bn, 3));
}

}  // namespace
}  // namespace kiln
