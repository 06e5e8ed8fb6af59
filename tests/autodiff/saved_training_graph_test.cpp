// A training graph written as ONNX (ai.kiln opset declared) passes ONNX's checker, loads back, and
// runs with bit-identical results.
#include <gtest/gtest.h>
#include <onnx/checker.h>

#include <filesystem>

#include "graph_builder.h"
#include "kiln/autodiff.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "test_util.h"

namespace kiln {
namespace {

TEST(SavedTrainingGraph, LoadsBackAndRunsIdentically) {
  // The demo CNN (Conv, BatchNorm, MaxPool, Gemm...) with a cross-entropy loss on top.
  Model cnn = make_small_cnn(3);
  Model m = cnn;
  ValueInfo labels;
  labels.name = "labels";
  labels.dtype = DType::Int64;
  labels.has_type = labels.has_shape = true;
  labels.dims = {Dim{-1, "batch"}};
  m.graph.inputs.push_back(labels);
  Node loss;
  loss.op_type = "SoftmaxCrossEntropyLoss";
  loss.name = "loss";
  loss.inputs = {"logits", "labels"};
  loss.outputs = {"loss"};
  m.graph.nodes.push_back(loss);
  ValueInfo loss_info;
  loss_info.name = "loss";
  loss_info.has_type = loss_info.has_shape = true;
  m.graph.outputs = {loss_info};

  const GradientGraph g = build_gradient_graph(m, {.loss = "loss"});
  EXPECT_EQ(g.model.opset(kKilnDomain), 1);
  const kiln::test::TempDir tmp;
  const auto path = tmp / "saved_training_graph.onnx";
  save_model(g.model, path.string());
  EXPECT_NO_THROW(onnx::checker::check_model(path.string()));
  Model reloaded = load_model(path.string());

  Tensor x = Tensor::empty(DType::Float32, {4, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 101) / 50.f - 1.f;
  const std::map<std::string, Tensor> feeds = {{"images", x},
                                               {"labels", Tensor::from_vector<int64_t>({4}, {0, 3, 9, 3})}};
  Session a(g.model), c(std::move(reloaded));
  const auto ra = a.run(feeds);
  const auto rc = c.run(feeds);
  ASSERT_EQ(ra.size(), rc.size());
  for (const auto& [name, t] : ra) {
    const Tensor& u = rc.at(name);
    ASSERT_EQ(t.describe(), u.describe()) << name;
    EXPECT_EQ(std::memcmp(t.raw_data(), u.raw_data(), t.nbytes()), 0) << name;
  }
  EXPECT_EQ(g.parameters.size(), 10u);  // conv1/2, bn1 weight+bias, fc1/2; not the BN statistics
}

}  // namespace
}  // namespace kiln
