// The zoo's transformer entries (vit, bert, gpt2) and the ViT backbone: state_dict keys as the
// references name them, exported inputs and the tied GPT-2 head, behaviour the architectures
// promise (causality, padding ignored), config errors, and a short Trainer run of a small BERT
// whose loss falls. Numerical parity with torch: tests/python/test_zoo_transformers.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "kiln/error.h"
#include "kiln/nn/backbone.h"
#include "kiln/nn/zoo.h"
#include "kiln/onnx_io.h"
#include "kiln/trainer.h"
#include "test_util.h"
#include "trainer/trainer_fixtures.h"

namespace kiln::nn::zoo {
namespace {

namespace fs = std::filesystem;
using kiln::test::expect_error;

const Config kSmallBert = {{"vocab_size", 20},
                           {"hidden_size", 32},
                           {"num_hidden_layers", 2},
                           {"num_attention_heads", 4},
                           {"intermediate_size", 64},
                           {"max_position_embeddings", 16},
                           {"hidden_dropout_prob", 0.0},
                           {"attention_probs_dropout_prob", 0.0},
                           {"num_labels", 2}};
const Config kSmallGpt2 = {{"vocab_size", 30}, {"n_positions", 16},  {"n_embd", 32},      {"n_layer", 2},
                           {"n_head", 4},      {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}};
const Config kSmallVit = {{"image_size", 32},       {"patch_size", 8},          {"hidden_size", 32},
                          {"num_hidden_layers", 3}, {"num_attention_heads", 2}, {"intermediate_size", 64},
                          {"num_labels", 5}};

std::set<std::string> keys_of(Module& m) {
  std::set<std::string> keys;
  for (const auto& [k, t] : m.state_dict()) keys.insert(k);
  return keys;
}

Tensor ids(std::vector<int64_t> values, int64_t batch) {
  const int64_t seq = static_cast<int64_t>(values.size()) / batch;
  return Tensor::from_vector<int64_t>({batch, seq}, values);
}

float at(const Tensor& t, std::vector<int64_t> index) {
  int64_t flat = 0;
  for (size_t i = 0; i < index.size(); ++i) flat = flat * t.dim(static_cast<int64_t>(i)) + index[i];
  return t.contiguous().data<float>()[flat];
}

TEST(ZooTransformers, BertStateDictKeysAreHuggingFaces) {
  manual_seed(0);
  ModulePtr m = create_model("bert", kSmallBert);
  const std::set<std::string> keys = keys_of(*m);
  EXPECT_EQ(keys.size(), 5u + 2 * 16u + 2u + 2u);  // embeddings, 2 layers, pooler, classifier
  for (const char* k :
       {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
        "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
        "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.1.attention.self.value.bias",
        "bert.encoder.layer.0.attention.output.dense.weight", "bert.encoder.layer.0.attention.output.LayerNorm.bias",
        "bert.encoder.layer.1.intermediate.dense.weight", "bert.encoder.layer.1.output.dense.bias",
        "bert.encoder.layer.1.output.LayerNorm.weight", "bert.pooler.dense.weight", "classifier.weight",
        "classifier.bias"})
    EXPECT_TRUE(keys.count(k)) << k;
  EXPECT_EQ(m->get_parameter("bert.encoder.layer.0.intermediate.dense.weight").shape(), (Shape{64, 32}));
  // HF's _init_weights: the padding row of the word embeddings is zero, biases zero, LayerNorm ones.
  const Tensor& word = m->get_parameter("bert.embeddings.word_embeddings.weight");
  for (int64_t j = 0; j < 32; ++j) EXPECT_EQ(at(word, {0, j}), 0.f);
  EXPECT_EQ(at(m->get_parameter("classifier.bias"), {1}), 0.f);
}

TEST(ZooTransformers, BertExportHasInt64InputsAndIgnoresPaddedTokens) {
  const Model onnx = export_model("bert", kSmallBert, 0);
  ASSERT_EQ(onnx.graph.inputs.size(), 3u);
  const std::vector<std::string> names{"input_ids", "attention_mask", "token_type_ids"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(onnx.graph.inputs[i].name, names[i]);
    EXPECT_EQ(onnx.graph.inputs[i].dtype, DType::Int64);
  }
  ASSERT_EQ(onnx.graph.outputs.size(), 1u);
  EXPECT_EQ(onnx.graph.outputs[0].name, "logits");

  // What the masked positions hold must not matter (HF's extended attention mask).
  manual_seed(1);
  ModulePtr m = create_model("bert", kSmallBert);
  m->eval();
  const Tensor mask = ids({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, 2);
  const Tensor types = ids({0, 0, 0, 0, 0, 0, 0, 1, 1, 1}, 2);
  const Tensor a = (*m)({ids({2, 5, 7, 9, 11, 2, 4, 6, 8, 3}, 2), mask, types}).at(0);
  const Tensor b = (*m)({ids({2, 5, 7, 13, 1, 2, 4, 6, 8, 3}, 2), mask, types}).at(0);
  ASSERT_EQ(a.shape(), (Shape{2, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) EXPECT_NEAR(at(a, {i, j}), at(b, {i, j}), 1e-6) << i << "," << j;
  // ...while an unmasked token does.
  const Tensor c = (*m)({ids({2, 5, 8, 9, 11, 2, 4, 6, 8, 3}, 2), mask, types}).at(0);
  EXPECT_GT(std::abs(at(a, {0, 0}) - at(c, {0, 0})) + std::abs(at(a, {0, 1}) - at(c, {0, 1})), 1e-5);
}

TEST(ZooTransformers, Gpt2HeadIsTiedToTheWordEmbeddings) {
  manual_seed(0);
  ModulePtr m = create_model("gpt2", kSmallGpt2);
  const std::set<std::string> keys = keys_of(*m);
  EXPECT_EQ(keys.size(), 2u + 2 * 12u + 2u + 1u);  // wte, wpe, 2 blocks, ln_f, lm_head
  for (const char* k :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
        "transformer.h.0.attn.c_attn.weight", "transformer.h.1.attn.c_proj.bias", "transformer.h.1.mlp.c_fc.weight",
        "transformer.h.1.mlp.c_proj.weight", "transformer.ln_f.bias", "lm_head.weight"})
    EXPECT_TRUE(keys.count(k)) << k;
  EXPECT_EQ(m->get_parameter("transformer.h.0.attn.c_attn.weight").shape(), (Shape{32, 96}));  // Conv1D: [in, out]
  EXPECT_EQ(m->get_parameter("transformer.h.0.mlp.c_fc.weight").shape(), (Shape{32, 128}));  // n_inner null: 4 * n_embd
  EXPECT_EQ(m->get_parameter("lm_head.weight").raw_data(), m->get_parameter("transformer.wte.weight").raw_data());
  // torch's parameters() and parameter count see the tied matrix once.
  int64_t unique = 0;
  for (const auto& [k, t] : m->named_parameters()) {
    EXPECT_NE(k, "lm_head.weight");
    unique += t->numel();
  }
  EXPECT_EQ(m->num_parameters(), unique);
  EXPECT_EQ(static_cast<size_t>(m->named_parameters().size()), keys.size() - 1);

  // Loading writes both keys into the one matrix, the later (lm_head.weight) last, as torch does.
  std::map<std::string, Tensor> state;
  for (const auto& [k, t] : m->state_dict()) state[k] = Tensor::zeros(t.dtype(), t.shape());
  state["lm_head.weight"] = Tensor::zeros(DType::Float32, {30, 32});
  state["lm_head.weight"].data<float>()[5] = 3.f;
  m->load_state_dict(state);
  EXPECT_EQ(at(m->get_parameter("transformer.wte.weight"), {0, 5}), 3.f);

  // One initializer for the tied matrix in the exported model.
  const Model onnx = export_model("gpt2", kSmallGpt2, 0);
  EXPECT_TRUE(onnx.graph.initializers.count("transformer.wte.weight"));
  EXPECT_FALSE(onnx.graph.initializers.count("lm_head.weight"));
  ASSERT_EQ(onnx.graph.inputs.size(), 1u);
  EXPECT_EQ(onnx.graph.inputs[0].name, "input_ids");
  EXPECT_EQ(onnx.graph.inputs[0].dtype, DType::Int64);
}

TEST(ZooTransformers, Gpt2IsCausal) {
  manual_seed(2);
  ModulePtr m = create_model("gpt2", kSmallGpt2);
  m->eval();
  const Tensor a = (*m)({ids({1, 2, 3, 4, 5, 6}, 1)}).at(0);
  const Tensor b = (*m)({ids({1, 2, 3, 4, 9, 8}, 1)}).at(0);
  ASSERT_EQ(a.shape(), (Shape{1, 6, 30}));
  double before = 0, after = 0;
  for (int64_t v = 0; v < 30; ++v) {
    for (int64_t s = 0; s < 4; ++s) before = std::max(before, double(std::abs(at(a, {0, s, v}) - at(b, {0, s, v}))));
    after = std::max(after, double(std::abs(at(a, {0, 4, v}) - at(b, {0, 4, v}))));
  }
  EXPECT_LE(before, 1e-6);  // positions before the change do not see it
  EXPECT_GT(after, 1e-4);
}

TEST(ZooTransformers, VitStateDictKeysAreTorchvisions) {
  manual_seed(0);
  ModulePtr m = create_model("vit", kSmallVit);
  const std::set<std::string> keys = keys_of(*m);
  EXPECT_EQ(keys.size(), 4u + 3 * 12u + 2u + 2u);  // class_token, conv_proj, pos_embedding; 3 blocks; ln; head
  for (const char* k :
       {"class_token", "conv_proj.weight", "conv_proj.bias", "encoder.pos_embedding",
        "encoder.layers.encoder_layer_0.ln_1.weight", "encoder.layers.encoder_layer_0.self_attention.in_proj_weight",
        "encoder.layers.encoder_layer_2.self_attention.out_proj.bias", "encoder.layers.encoder_layer_1.ln_2.bias",
        "encoder.layers.encoder_layer_1.mlp.0.weight", "encoder.layers.encoder_layer_1.mlp.3.bias", "encoder.ln.weight",
        "heads.head.weight", "heads.head.bias"})
    EXPECT_TRUE(keys.count(k)) << k;
  EXPECT_EQ(m->get_parameter("encoder.pos_embedding").shape(), (Shape{1, 17, 32}));
  m->eval();
  EXPECT_EQ((*m)({Tensor::zeros(DType::Float32, {3, 3, 32, 32})}).at(0).shape(), (Shape{3, 5}));
  EXPECT_THROW((*m)({Tensor::zeros(DType::Float32, {1, 3, 24, 32})}), ShapeError);  // torchvision's image-size check
}

TEST(ZooTransformers, VitBackboneStagesAndFeatureMaps) {
  manual_seed(0);
  auto bb = AutoBackbone::from_config("vit", kSmallVit, {.out_indices = std::vector<int64_t>{0, 1, 3}});
  EXPECT_EQ(bb->stage_names(), (std::vector<std::string>{"stem", "stage1", "stage2", "stage3"}));
  EXPECT_EQ(bb->out_features(), (std::vector<std::string>{"stem", "stage1", "stage3"}));
  EXPECT_EQ(bb->channels(), (std::vector<int64_t>{32, 32, 32}));
  const std::set<std::string> keys = keys_of(*bb);
  EXPECT_FALSE(keys.count("heads.head.weight"));
  EXPECT_FALSE(keys.count("encoder.ln.weight"));
  EXPECT_TRUE(keys.count("encoder.layers.encoder_layer_2.mlp.3.weight"));
  bb->eval();
  const auto maps = (*bb)({Tensor::zeros(DType::Float32, {2, 3, 32, 32})});
  ASSERT_EQ(maps.size(), 3u);
  for (const auto& f : maps) EXPECT_EQ(f.shape(), (Shape{2, 32, 4, 4}));
  // Asking only for an early stage runs only the layers it needs.
  auto early = AutoBackbone::from_config("vit", kSmallVit, {.out_features = std::vector<std::string>{"stage1"}});
  const Model onnx = early->to_onnx({{"pixel_values", {1, 3, 32, 32}}});
  EXPECT_FALSE(onnx.graph.initializers.count("encoder.layers.encoder_layer_1.ln_1.weight"));
  EXPECT_TRUE(onnx.graph.initializers.count("encoder.layers.encoder_layer_0.ln_1.weight"));
}

TEST(ZooTransformers, ConfigErrorsNameTheKey) {
  expect_error<Unsupported>(
      [] {
        create_model("bert", {{"hidden_act", "mish"}});
      },
      "hidden_act 'mish' is not supported");
  expect_error<ShapeError>(
      [] {
        create_model("bert", {{"hidden_size", 30}, {"num_attention_heads", 4}});
      },
      "hidden_size (30) is not a multiple of num_attention_heads (4)");
  expect_error<InvalidArgument>(
      [] {
        create_model("gpt2", {{"attn_pdrop", 1.5}});
      },
      "'attn_pdrop' must be a probability in [0, 1), got 1.5");
  expect_error<ShapeError>(
      [] {
        create_model("vit", {{"image_size", 30}, {"patch_size", 8}});
      },
      "image_size (30) is not a multiple of patch_size (8)");
  expect_error<Unsupported>(
      [] {
        create_model("bert", {{"position_embedding_type", "relative_key"}});
      },
      "relative_key");
  expect_error<InvalidArgument>([] { create_model("gpt2", {{"n_embd", "wide"}}); }, "n_embd");
}

// The Trainer trains the exported BERT (dropout on) on a trivially learnable task: the label is
// which of two tokens (3 or 4) stands first, where the pooler reads; the rest is random tokens and
// padding.
TEST(ZooTransformers, TrainerTrainsASmallBert) {
  using namespace kiln::trainer;
  const kiln::test::TempDir dir;
  Config config = kSmallBert;
  config["hidden_dropout_prob"] = 0.1;
  config["attention_probs_dropout_prob"] = 0.1;
  save_model(export_model("bert", config, 0), (dir / "bert.onnx").string());

  const int64_t n = 64, seq = 8;
  std::mt19937_64 gen(7);
  std::vector<int64_t> input_ids, mask, types, labels;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t length = 4 + static_cast<int64_t>(gen() % 5);  // 4..8 tokens, the rest padding
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t token = s == 0       ? 3 + static_cast<int64_t>(gen() % 2)
                            : s < length ? 2 + static_cast<int64_t>(gen() % 18)
                                         : 0;
      input_ids.push_back(token);
      mask.push_back(s < length ? 1 : 0);
      types.push_back(0);
    }
    labels.push_back(input_ids[static_cast<size_t>(i * seq)] - 3);
  }
  auto data = std::make_shared<data::TensorDataset>(
      std::map<std::string, Tensor>{{"input_ids", Tensor::from_vector<int64_t>({n, seq}, input_ids)},
                                    {"attention_mask", Tensor::from_vector<int64_t>({n, seq}, mask)},
                                    {"token_type_ids", Tensor::from_vector<int64_t>({n, seq}, types)},
                                    {"labels", Tensor::from_vector<int64_t>({n}, labels)}});
  TrainingArguments args = testing::base_args(dir / "out");
  args.learning_rate = 2e-3;
  args.per_device_train_batch_size = 16;
  args.max_steps = 60;
  Trainer t(ModelSource::onnx((dir / "bert.onnx").string(), training::LossType::CrossEntropyLoss), args, data);
  t.train();
  std::vector<double> losses;
  for (const auto& e : t.state().log_history)
    if (e.contains("loss")) losses.push_back(e["loss"].get<double>());
  ASSERT_EQ(losses.size(), 60u);
  auto mean = [](auto b, auto e) { return std::accumulate(b, e, 0.0) / double(e - b); };
  const double first = mean(losses.begin(), losses.begin() + 8), last = mean(losses.end() - 8, losses.end());
  EXPECT_NEAR(first, std::log(2.0), 0.25);  // chance level at the start
  EXPECT_LT(last, 0.3 * first) << "first " << first << ", last " << last;
}

}  // namespace
}  // namespace kiln::nn::zoo
