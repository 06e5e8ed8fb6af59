// Pipeline stages (kiln/pipeline.h) without MPI: the zoo GPT-2 with dropout active cut into two
// stages, run by hand as two ranks would (stage 0's forward model, stage 1's training model, stage
// 0's training model fed stage 1's gradients), gives the loss and the gradients of the whole model's
// training graph (the tied embedding's as the sum of its two stages' parts). Layers are found from
// the names; stage descriptions and bad cuts are checked.
#include "kiln/pipeline.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/nn/zoo.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using kiln::testing::random_tensor;
using kiln::testing::token_ids;

const nn::zoo::Config kGpt = {{"vocab_size", 40}, {"n_positions", 16},  {"n_embd", 32},      {"n_layer", 2},
                              {"n_head", 4},      {"resid_pdrop", 0.1}, {"embd_pdrop", 0.1}, {"attn_pdrop", 0.1}};

// Runs `path` with the batch's columns, the named tensors and the checkpoint's parameters as feeds.
std::map<std::string, Tensor> run(const std::string& path, const training::CheckpointState& state,
                                  const std::map<std::string, Tensor>& feeds) {
  Session s(load_model(path));
  std::map<std::string, Tensor> in;
  for (const ValueInfo& v : s.inputs()) {
    if (auto it = feeds.find(v.name); it != feeds.end()) in[v.name] = it->second;
    else in[v.name] = state.parameter(v.name).data();
  }
  return s.run(in);
}

double max_relative(const Tensor& got, const Tensor& want) {
  const Tensor a = got.contiguous(), b = want.contiguous();
  double err = 0, scale = 1e-30;
  for (int64_t i = 0; i < a.numel(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b.data<float>()[i])));
  }
  return err / scale;
}

TEST(Pipeline, LayersAreFoundFromNames) {
  const auto layers = training::find_layers(nn::zoo::export_model("gpt2", kGpt));
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].name, "transformer.h.0");
  EXPECT_EQ(layers[1].name, "transformer.h.1");
  EXPECT_LT(layers[0].last, layers[1].first);
  expect_error<InvalidArgument>([] { training::find_layers(nn::zoo::export_model("mlp")); },
                                "no repeated layers found");
}

TEST(Pipeline, TwoStagesByHandGiveTheWholeModelsLossAndGradients) {
  const Model forward = nn::zoo::export_model("gpt2", kGpt);
  training::ArtifactOptions o;
  o.loss = training::LossType::MSELoss;
  kiln::test::TempDir dir;
  const auto infos = training::generate_pipeline_artifacts(forward, o, {1, 1}, dir.path().string());
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].model_inputs, std::vector<std::string>{"input_ids"});
  EXPECT_TRUE(infos[0].received.empty());
  ASSERT_EQ(infos[0].sent.size(), 1u);  // the residual stream
  EXPECT_TRUE(infos[0].sent_differentiable[0]);
  EXPECT_EQ(infos[1].received.size(), 1u);
  ASSERT_EQ(infos[1].shared.size(), 1u);  // the embedding, tied to the LM head
  EXPECT_EQ(infos[1].shared[0].name, "transformer.wte.weight");
  EXPECT_EQ(infos[1].shared[0].stages, (std::vector<int>{0, 1}));
  EXPECT_EQ(training::load_stage_info(training::stage_directory(dir.path().string(), 1)).received, infos[1].received);

  const std::map<std::string, Tensor> batch = {{"input_ids", token_ids(2, 16, 40)},
                                               {"labels", random_tensor({2, 16, 40}, 1)}};
  // The whole model (Dropout draws its masks on the run index, 0 in every fresh session).
  const training::Artifacts whole = training::build_artifacts(forward, o);
  kiln::test::TempDir whole_dir;
  save_model(whole.training_model, (whole_dir.path() / "t.onnx").string());
  const auto want = run((whole_dir.path() / "t.onnx").string(), whole.checkpoint, batch);

  auto stage_file = [&](int s, const char* f) { return (dir.path() / fmt::format("stage-{}", s) / f).string(); };
  const auto state0 = training::CheckpointState::load_checkpoint(stage_file(0, "checkpoint"));
  const auto state1 = training::CheckpointState::load_checkpoint(stage_file(1, "checkpoint"));
  const auto sent = run(stage_file(0, "forward_model.onnx"), state0, batch);
  std::map<std::string, Tensor> feeds1 = batch;
  feeds1[infos[1].received[0]] = sent.at(infos[0].sent[0]);
  const auto out1 = run(stage_file(1, "training_model.onnx"), state1, feeds1);
  std::map<std::string, Tensor> feeds0 = batch;
  feeds0["kiln.pipeline/dy/" + infos[0].sent[0]] = out1.at(infos[1].received[0] + "_grad");
  const auto out0 = run(stage_file(0, "training_model.onnx"), state0, feeds0);

  const std::string loss = whole.training_model.graph.outputs[0].name;
  EXPECT_LE(max_relative(out1.at(loss), want.at(loss)), 1e-6);
  // Each parameter's gradient from the stage that holds it; the shared one summed over both.
  size_t compared = 0;
  for (const auto& [name, p] : whole.checkpoint.parameters()) {
    if (!p.requires_grad()) continue;
    const std::string g = name + "_grad";
    const bool in0 = out0.count(g) != 0, in1 = out1.count(g) != 0;
    ASSERT_TRUE(in0 || in1) << name;
    Tensor got = in0 ? out0.at(g).clone() : out1.at(g).clone();
    if (in0 && in1)
      for (int64_t i = 0; i < got.numel(); ++i) got.data<float>()[i] += out1.at(g).contiguous().data<float>()[i];
    EXPECT_LE(max_relative(got, want.at(g)), 1e-5) << name;
    ++compared;
  }
  EXPECT_EQ(compared, whole.checkpoint.parameters().size());
}

TEST(Pipeline, CutsMustFitTheLayers) {
  const Model forward = nn::zoo::export_model("gpt2", kGpt);
  training::ArtifactOptions o;
  o.loss = training::LossType::MSELoss;
  kiln::test::TempDir dir;
  expect_error<InvalidArgument>(
      [&] {
        training::generate_pipeline_artifacts(forward, o, {2, 1}, dir.path().string());
      },
      "place 3 layers in 2 stages; the model has 2 layers");
  expect_error<InvalidArgument>([&] { training::generate_pipeline_artifacts(forward, o, {2}, dir.path().string()); },
                                "place 2 layers in 1 stages");
  o.mixed_precision = DType::BFloat16;
  expect_error<Unsupported>(
      [&] {
        training::generate_pipeline_artifacts(forward, o, {1, 1}, dir.path().string());
      },
      "train in float32");
}

}  // namespace
}  // namespace kiln
