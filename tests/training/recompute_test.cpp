// Gradient checkpointing (RecomputeOptions, autodiff/recompute.h): the zoo's GPT-2- and BERT-style
// models with dropout active and ResNet-18 with training-mode BatchNorm give bitwise the same loss,
// gradients and running statistics with and without recompute (the copies run the same kernels on
// the same inputs, and a recomputed Dropout draws the original's mask), while the planned peak
// memory falls; boundaries are found per sublayer / block or named, and a bad name is a clear error.
#include "autodiff/recompute.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kiln/artifacts.h"
#include "kiln/nn/zoo.h"
#include "kiln/random.h"
#include "kiln/session.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using kiln::testing::random_tensor;
using kiln::testing::token_ids;

struct Step {
  std::map<std::string, Tensor> outputs;
  size_t peak_bytes = 0;
  size_t nodes = 0;
};

Step train_step(const Model& forward, const std::map<std::string, Tensor>& batch, RecomputeOptions recompute) {
  training::ArtifactOptions options;
  options.loss = training::LossType::MSELoss;
  options.recompute = std::move(recompute);
  const training::Artifacts a = training::build_artifacts(forward, options);
  std::map<std::string, Tensor> feeds;
  for (const ValueInfo& in : a.training_model.graph.inputs) {
    if (auto it = batch.find(in.name); it != batch.end()) feeds[in.name] = it->second;
    else feeds[in.name] = a.checkpoint.parameter(in.name).data();
  }
  set_random_seed(5);  // Dropout seeds from it when its Session is made
  Session session(a.training_model);
  Step step;
  step.outputs = session.run(feeds);
  step.peak_bytes = session.last_plan_stats().peak_bytes;
  step.nodes = a.training_model.graph.nodes.size();
  return step;
}

void expect_bitwise_equal(const Step& plain, const Step& recomputed) {
  ASSERT_EQ(plain.outputs.size(), recomputed.outputs.size());
  for (const auto& [name, want] : plain.outputs) {
    const Tensor& got = recomputed.outputs.at(name);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    const Tensor a = want.contiguous(), b = got.contiguous();
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << name << " differs";
  }
}

TEST(Recompute, Gpt2WithDropoutIsBitwiseTheSameWithLessMemory) {
  const nn::zoo::Config cfg = {{"vocab_size", 40}, {"n_positions", 64},  {"n_embd", 32},      {"n_layer", 3},
                               {"n_head", 4},      {"resid_pdrop", 0.1}, {"embd_pdrop", 0.1}, {"attn_pdrop", 0.1}};
  const Model forward = nn::zoo::export_model("gpt2", cfg);
  const std::map<std::string, Tensor> batch = {{"input_ids", token_ids(2, 64, 40)},
                                               {"labels", random_tensor({2, 64, 40}, 1)}};
  const Step plain = train_step(forward, batch, {});
  const Step recomputed = train_step(forward, batch, {.enabled = true});
  expect_bitwise_equal(plain, recomputed);
  EXPECT_GT(recomputed.nodes, plain.nodes);
  EXPECT_LT(recomputed.peak_bytes, plain.peak_bytes * 3 / 4)
      << "plain " << plain.peak_bytes << " recomputed " << recomputed.peak_bytes;
}

TEST(Recompute, BertWithDropoutAndPaddingIsBitwiseTheSame) {
  const nn::zoo::Config cfg = {{"vocab_size", 30},
                               {"hidden_size", 32},
                               {"num_hidden_layers", 2},
                               {"num_attention_heads", 4},
                               {"intermediate_size", 64},
                               {"max_position_embeddings", 32},
                               {"hidden_dropout_prob", 0.1},
                               {"attention_probs_dropout_prob", 0.1},
                               {"num_labels", 3}};
  const Model forward = nn::zoo::export_model("bert", cfg);
  Tensor mask = Tensor::zeros(DType::Int64, {2, 32});
  for (int64_t i = 0; i < 2 * 32; ++i) mask.data<int64_t>()[i] = (i % 32) < (i < 32 ? 32 : 20) ? 1 : 0;
  const std::map<std::string, Tensor> batch = {{"input_ids", token_ids(2, 32, 30)},
                                               {"attention_mask", mask},
                                               {"token_type_ids", Tensor::zeros(DType::Int64, {2, 32})},
                                               {"labels", random_tensor({2, 3}, 2)}};
  expect_bitwise_equal(train_step(forward, batch, {}), train_step(forward, batch, {.enabled = true}));
}

TEST(Recompute, ResNetBatchNormStatisticsAreUpdatedOnceAndGradientsAreTheSame) {
  const Model forward = nn::zoo::export_model("resnet18", {{"num_labels", 4}});  // torchvision's ResNet-18
  const std::map<std::string, Tensor> batch = {{"pixel_values", random_tensor({2, 3, 32, 32}, 3)},
                                               {"labels", random_tensor({2, 4}, 4)}};
  const Step plain = train_step(forward, batch, {});
  const Step recomputed = train_step(forward, batch, {.enabled = true});
  expect_bitwise_equal(plain, recomputed);  // the ".updated" running statistics among the outputs
  EXPECT_GT(recomputed.nodes, plain.nodes);
}

TEST(Recompute, BoundariesAreFoundPerSublayerOrNamed) {
  const nn::zoo::Config cfg = {{"vocab_size", 20}, {"n_positions", 16},  {"n_embd", 16},      {"n_layer", 2},
                               {"n_head", 2},      {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}};
  Model forward = nn::zoo::export_model("gpt2", cfg);
  GradientOptions plain;
  plain.loss = "loss";
  // A scalar loss over the logits, so that the forward graph has one.
  Node mean;
  mean.op_type = "ReduceMean";
  mean.name = "loss_mean";
  mean.inputs = {"logits"};
  mean.outputs = {"loss"};
  mean.attrs["keepdims"] = Attribute::of_int(0);
  forward.graph.nodes.push_back(mean);
  forward.graph.outputs = {ValueInfo::of("loss", Tensor::scalar<float>(0.f))};
  GradientOptions found = plain;
  found.recompute.enabled = true;
  const GradientGraph g = build_gradient_graph(forward, found);
  // About sqrt(S) stashed values per segment: here the residual stream after each layer's attention.
  ASSERT_GE(g.recompute_boundaries.size(), 2u);
  for (const auto& b : g.recompute_boundaries) EXPECT_NE(b.find("Add"), std::string::npos) << b;
  EXPECT_GT(g.recomputed_nodes, 0u);
  GradientOptions named = found;
  named.recompute.boundaries = {g.recompute_boundaries.at(1)};
  const GradientGraph one = build_gradient_graph(forward, named);
  EXPECT_EQ(one.recompute_boundaries, std::vector<std::string>{g.recompute_boundaries.at(1)});
  named.recompute.boundaries = {"no_such_value"};
  expect_error<InvalidArgument>([&] { build_gradient_graph(forward, named); },
                                {"gradient checkpointing boundary 'no_such_value'", "not a value the forward"});
}

}  // namespace
}  // namespace kiln
