// The LM-head serialization (ArtifactOptions::lm_head_chunks, training/serialized_head.h) on the
// zoo's GPT-2 with Hugging Face's causal-LM loss written after it (logits[:, :-1] and labels[:, 1:],
// flattened, SoftmaxCrossEntropyLoss with ignore_index -100): the same loss and gradients as the
// unserialized training model within 1e-5 (relative to each tensor's largest element), for blocks
// of unequal sizes, with less peak memory (the logits dominate it here); and the clear errors when
// there is no head to serialize.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph_builder.h"
#include "ir/graph_editor.h"
#include "kiln/artifacts.h"
#include "kiln/nn/zoo.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using kiln::testing::token_ids;

constexpr int64_t kVocab = 1999, kBatch = 2, kSeq = 24;

// The zoo GPT-2 (tied LM head) and HF's GPT2LMHeadModel loss after it, as torch exports it.
Model gpt2_with_loss() {
  const nn::zoo::Config cfg = {{"vocab_size", kVocab}, {"n_positions", 32},  {"n_embd", 32},      {"n_layer", 2},
                               {"n_head", 4},          {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}};
  Model m = nn::zoo::export_model("gpt2", cfg);
  GraphEditor edit(m);
  auto constant = [&](const std::string& base, std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return edit.op("Constant", {}, {{"value", Attribute::of_tensor(Tensor::from_vector<int64_t>({n}, v))}}, base);
  };
  ValueInfo labels;
  labels.name = "labels";
  labels.dtype = DType::Int64;
  labels.has_type = labels.has_shape = true;
  labels.dims = {Dim{kBatch, ""}, Dim{kSeq, ""}};
  m.graph.inputs.push_back(labels);
  const std::string logits = m.graph.outputs.front().name;
  const std::string shifted =
      edit.op("Slice", {logits, constant("s0", {0}), constant("s1", {-1}), constant("s2", {1})}, {}, "shift_logits");
  const std::string flat = edit.op("Reshape", {shifted, constant("v", {-1, kVocab})}, {}, "flat_logits");
  const std::string later = edit.op(
      "Slice", {"labels", constant("l0", {1}), constant("l1", {kSeq}), constant("l2", {1})}, {}, "shift_labels");
  const std::string flat_labels = edit.op("Reshape", {later, constant("m1", {-1})}, {}, "flat_labels");
  const std::string loss =
      edit.op("SoftmaxCrossEntropyLoss", {flat, flat_labels}, {{"ignore_index", Attribute::of_int(-100)}}, "loss");
  m.graph.outputs.insert(m.graph.outputs.begin(), ValueInfo::of(loss, Tensor::scalar<float>(0.f)));
  infer_shapes(m);
  return m;
}

struct Step {
  std::map<std::string, Tensor> outputs;
  size_t peak_bytes = 0;
  training::Artifacts artifacts;
};

Step train_step(const Model& forward, int64_t chunks) {
  training::ArtifactOptions options;
  options.loss = training::LossType::None;
  options.lm_head_chunks = chunks;
  options.additional_output_names = {forward.graph.outputs[1].name};  // the logits, as the Trainer asks
  Step s;
  s.artifacts = training::build_artifacts(forward, options);
  Tensor labels = token_ids(kBatch, kSeq, kVocab);
  for (int64_t i = 0; i < labels.numel(); i += 5) labels.data<int64_t>()[i] = -100;  // ignored rows too
  std::map<std::string, Tensor> feeds{{"input_ids", token_ids(kBatch, kSeq, kVocab)}, {"labels", labels}};
  for (const ValueInfo& in : s.artifacts.training_model.graph.inputs)
    if (!feeds.count(in.name)) feeds[in.name] = s.artifacts.checkpoint.parameter(in.name).data();
  Session session(s.artifacts.training_model);
  s.outputs = session.run(feeds);
  s.peak_bytes = session.last_plan_stats().peak_bytes;
  return s;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const Tensor a = got.contiguous(), b = want.contiguous();
  double scale = 1e-30, err = 0;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, std::fabs(double(b.data<float>()[i])));
  for (int64_t i = 0; i < b.numel(); ++i)
    err = std::max(err, std::fabs(double(a.data<float>()[i]) - double(b.data<float>()[i])));
  EXPECT_LE(err, 1e-5 * scale) << what;
}

TEST(SerializedHead, Gpt2LossAndGradientsMatchTheWholeHeadWithLessMemory) {
  const Model forward = gpt2_with_loss();
  const Step whole = train_step(forward, 1);
  for (int64_t chunks : {4, 7}) {  // 1999 classes: blocks of 500 and 499, of 286 and 283
    const Step part = train_step(forward, chunks);
    const Graph& g = part.artifacts.training_model.graph;
    EXPECT_EQ(
        std::count_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op_type == "LinearCrossEntropy"; }),
        1);
    EXPECT_EQ(std::count_if(g.nodes.begin(), g.nodes.end(),
                            [](const Node& n) { return n.op_type == "SoftmaxCrossEntropyLoss"; }),
              0);
    // The training model returns the loss and gradients, not the logits; the eval model keeps them.
    EXPECT_FALSE(part.outputs.count(forward.graph.outputs[1].name));
    EXPECT_TRUE(whole.outputs.count(forward.graph.outputs[1].name));
    EXPECT_EQ(part.artifacts.eval_model.graph.outputs.size(), whole.artifacts.eval_model.graph.outputs.size());
    for (const auto& [name, got] : part.outputs) expect_close(got, whole.outputs.at(name), name);
    EXPECT_LT(part.peak_bytes, whole.peak_bytes) << "chunks " << chunks;
  }
}

TEST(SerializedHead, WithoutAHeadAndItsLossItIsAClearError) {
  GraphBuilder b("mse", 13);
  std::string x = b.input("x", DType::Float32, {4, 6});
  x = b.linear(x, 6, 3, "fc");
  b.output(x, "y", DType::Float32, {4, 3});
  training::ArtifactOptions o;
  o.loss = training::LossType::MSELoss;
  o.lm_head_chunks = 2;
  expect_error<Unsupported>([&] { training::build_artifacts(b.build(), o); },
                            {"projection_serialization_factor=2", "the model has no SoftmaxCrossEntropyLoss"});
  // The logits read by something else than the loss: the head cannot go.
  Model m = gpt2_with_loss();
  GraphEditor edit(m);
  const std::string logits = m.graph.outputs[1].name;
  const std::string extra = edit.op("ReduceMean", {logits}, {{"keepdims", Attribute::of_int(0)}}, "logit_mean");
  m.graph.outputs.push_back(ValueInfo::of(extra, Tensor::scalar<float>(0.f)));
  o.loss = training::LossType::None;
  expect_error<Unsupported>([&] { training::build_artifacts(m, o); }, "'logits' is also read by node 'logit_mean");
}

}  // namespace
}  // namespace kiln
