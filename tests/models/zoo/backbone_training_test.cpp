// Training zoo models with the Trainer: a ResNet-18 backbone (one input channel) with a small head
// (AdaptiveAvgPool2d, Flatten, Linear) exported from kiln::nn, and the built-in resnet18 with a
// config, each trained for 30 steps on 512 Fashion-MNIST images: the logged loss falls.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "kiln/data.h"
#include "kiln/nn/backbone.h"
#include "kiln/nn/layers.h"
#include "kiln/trainer.h"
#include "models/builtin.h"
#include "test_util.h"

namespace kiln::nn {
namespace {

namespace fs = std::filesystem;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

// The first n training images and labels ("input" [n, 1, 28, 28], "labels" [n]).
std::shared_ptr<data::TensorDataset> fashion_subset(int64_t n) {
  auto all = data::load_idx(kFashion + "/train-images-idx3-ubyte.gz", kFashion + "/train-labels-idx1-ubyte.gz",
                            {.normalize = data::kFashionMnistNormalization});
  std::map<std::string, Tensor> columns;
  for (const char* name : {"input", "labels"}) {
    const Tensor& c = all->column(name);
    Shape shape = c.shape();
    shape[0] = n;
    Tensor part = Tensor::empty(c.dtype(), shape);
    std::memcpy(part.raw_data(), c.raw_data(), part.nbytes());
    columns[name] = part;
  }
  return std::make_shared<data::TensorDataset>(columns);
}

std::vector<double> logged_losses(const trainer::TrainerState& s) {
  std::vector<double> losses;
  for (const auto& e : s.log_history)
    if (e.contains("loss")) losses.push_back(e.at("loss").get<double>());
  return losses;
}

trainer::TrainingArguments args(const fs::path& out) {
  return trainer::TrainingArguments::parse_args({"--output_dir", out.string(), "--learning_rate", "1e-3", "--max_steps",
                                                 "30", "--per_device_train_batch_size", "32", "--logging_steps", "10",
                                                 "--save_strategy", "no", "--report_to", "none", "--disable_tqdm",
                                                 "true", "--seed", "0"});
}

void expect_loss_falls(const std::vector<double>& losses) {
  ASSERT_EQ(losses.size(), 3u);  // steps 10, 20, 30: each the mean over ten steps
  EXPECT_LT(losses.back(), losses.front()) << losses[0] << " " << losses[1] << " " << losses[2];
}

TEST(ZooTraining, BackboneWithAHeadLearnsFashionMnist) {
  if (!fs::exists(kFashion + "/train-images-idx3-ubyte.gz"))
    FAIL() << kFashion << " is missing: install Debian's dataset-fashion-mnist (run scripts/setup.sh)";
  const kiln::test::TempDir dir;
  manual_seed(0);
  auto backbone = AutoBackbone::from_config("resnet18", {{"num_channels", 1}});
  ASSERT_EQ(backbone->channels(), std::vector<int64_t>{512});
  auto net = std::make_shared<Sequential>(std::vector<std::pair<std::string, ModulePtr>>{
      {"backbone", backbone},
      {"pool", std::make_shared<AdaptiveAvgPool2d>(1)},
      {"flatten", std::make_shared<Flatten>()},
      {"head", std::make_shared<Linear>(backbone->channels().back(), 10)}});
  ExportOptions o;
  o.output_names = {"logits"};
  const fs::path model = dir / "backbone_head.onnx";
  net->export_onnx(model.string(), {{"input", {32, 1, 28, 28}}},
                   {{"input", {{0, "batch"}}}, {"logits", {{0, "batch"}}}}, o);

  trainer::Trainer t(trainer::ModelSource::onnx(model.string(), training::LossType::CrossEntropyLoss),
                     args(dir / "out"), fashion_subset(512));
  t.train();
  expect_loss_falls(logged_losses(t.state()));
  // The backbone's BatchNorm statistics were trained too: running_mean left zero.
  const Tensor& mean = t.checkpoint_state().parameter("backbone.bn1.running_mean").data();
  double sum = 0;
  for (int64_t i = 0; i < mean.numel(); ++i) sum += std::abs(mean.item_as_double(i));
  EXPECT_GT(sum, 0.0);
}

TEST(ZooTraining, BuiltinResNetWithAConfigLearnsFashionMnist) {
  if (!fs::exists(kFashion + "/train-images-idx3-ubyte.gz"))
    FAIL() << kFashion << " is missing: install Debian's dataset-fashion-mnist (run scripts/setup.sh)";
  const kiln::test::TempDir dir;
  trainer::Trainer t(trainer::ModelSource::builtin("resnet18", {{"num_channels", 1}, {"num_labels", 10}}),
                     args(dir / "out"), fashion_subset(512));
  t.train();
  expect_loss_falls(logged_losses(t.state()));
}

// A small ConvNeXt with stochastic depth active (Dropout-drawn per-example masks in training).
TEST(ZooTraining, SmallConvNextWithStochasticDepthLearnsFashionMnist) {
  if (!fs::exists(kFashion + "/train-images-idx3-ubyte.gz"))
    FAIL() << kFashion << " is missing: install Debian's dataset-fashion-mnist (run scripts/setup.sh)";
  const kiln::test::TempDir dir;
  const nlohmann::json config = {{"num_channels", 1}, {"num_labels", 10},      {"hidden_sizes", {32, 64}},
                                 {"depths", {2, 2}},  {"drop_path_rate", 0.3}, {"layer_scale_init_value", 0.1}};
  int dropouts = 0;
  for (const Node& n : make_builtin_model("convnext_tiny", 0, config).graph.nodes) dropouts += n.op_type == "Dropout";
  EXPECT_EQ(dropouts, 3);  // every block but the first (whose drop probability is 0)
  trainer::Trainer t(trainer::ModelSource::builtin("convnext_tiny", config), args(dir / "out"), fashion_subset(512));
  t.train();
  expect_loss_falls(logged_losses(t.state()));
}

}  // namespace
}  // namespace kiln::nn
