// The zoo's convolutional entries: torchvision's state_dict keys, counts and parameter totals (the
// numbers torchvision 0.14 reports), torchvision's initialisation, configs and their errors, and
// the built-in models the Trainer trains (mlp, lenet and zoo entries, input "input").
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/nn/zoo.h"
#include "models/builtin.h"
#include "test_util.h"

namespace kiln::nn::zoo {
namespace {

using kiln::test::expect_error;
using kiln::test::has;

std::map<std::string, Tensor> by_key(Module& m) {
  std::map<std::string, Tensor> out;
  for (auto& [k, t] : m.state_dict()) out[k] = t;
  return out;
}

double mean(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.item_as_double(i);
  return s / double(t.numel());
}

double stddev(const Tensor& t) {
  const double m = mean(t);
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += (t.item_as_double(i) - m) * (t.item_as_double(i) - m);
  return std::sqrt(s / double(t.numel()));
}

void expect_all(const Tensor& t, double v, const std::string& key) {
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.item_as_double(i), v) << key << " element " << i;
}

TEST(VisionZoo, EntriesAreRegistered) {
  const auto names = model_names();
  for (const char* n : {"mlp", "lenet", "resnet18", "resnet34", "resnet50", "convnext_tiny"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

// torchvision 0.14: len(state_dict()) and sum(p.numel() for p in parameters()).
TEST(VisionZoo, StateDictKeysAndParameterCountsAreTorchvisions) {
  struct Case {
    std::string name;
    size_t keys;
    int64_t params;
  };
  for (const Case& c : {Case{"resnet18", 122, 11689512}, Case{"resnet34", 218, 21797672},
                        Case{"resnet50", 320, 25557032}, Case{"convnext_tiny", 182, 28589128}}) {
    manual_seed(0);
    ModulePtr m = create_model(c.name);
    EXPECT_EQ(m->state_dict().size(), c.keys) << c.name;
    EXPECT_EQ(m->num_parameters(), c.params) << c.name;
  }
}

TEST(VisionZoo, ResNetKeysAndShapes) {
  manual_seed(0);
  auto r50 = by_key(*create_model("resnet50"));
  EXPECT_EQ(r50.at("conv1.weight").shape(), (Shape{64, 3, 7, 7}));
  EXPECT_EQ(r50.at("layer1.0.conv1.weight").shape(), (Shape{64, 64, 1, 1}));
  EXPECT_EQ(r50.at("layer1.0.conv3.weight").shape(), (Shape{256, 64, 1, 1}));
  EXPECT_EQ(r50.at("layer1.0.downsample.0.weight").shape(), (Shape{256, 64, 1, 1}));
  EXPECT_EQ(r50.at("layer2.0.conv2.weight").shape(), (Shape{128, 128, 3, 3}));  // v1.5: stride on the 3x3
  EXPECT_EQ(r50.at("layer4.2.bn3.running_var").shape(), (Shape{2048}));
  EXPECT_EQ(r50.at("fc.weight").shape(), (Shape{1000, 2048}));
  EXPECT_FALSE(r50.count("layer1.1.downsample.0.weight"));

  auto r18 = by_key(*create_model("resnet18", {{"num_channels", 1}, {"num_labels", 10}}));
  EXPECT_EQ(r18.at("conv1.weight").shape(), (Shape{64, 1, 7, 7}));
  EXPECT_FALSE(r18.count("layer1.0.downsample.0.weight"));  // 64 -> 64, stride 1: no projection
  EXPECT_EQ(r18.at("layer2.0.downsample.0.weight").shape(), (Shape{128, 64, 1, 1}));
  EXPECT_EQ(r18.at("layer2.0.downsample.1.num_batches_tracked").dtype(), DType::Int64);
  EXPECT_EQ(r18.at("fc.weight").shape(), (Shape{10, 512}));
}

TEST(VisionZoo, ConvNextKeysAndShapes) {
  manual_seed(0);
  ModulePtr m = create_model("convnext_tiny");
  auto s = by_key(*m);
  EXPECT_EQ(s.at("features.0.0.weight").shape(), (Shape{96, 3, 4, 4}));
  EXPECT_EQ(s.at("features.0.1.weight").shape(), (Shape{96}));
  EXPECT_EQ(s.at("features.1.0.block.0.weight").shape(), (Shape{96, 1, 7, 7}));  // depthwise
  EXPECT_EQ(s.at("features.1.0.block.3.weight").shape(), (Shape{384, 96}));
  EXPECT_EQ(s.at("features.1.0.layer_scale").shape(), (Shape{96, 1, 1}));
  EXPECT_EQ(s.at("features.2.1.weight").shape(), (Shape{192, 96, 2, 2}));
  EXPECT_EQ(s.at("features.5.8.block.5.weight").shape(), (Shape{384, 1536}));
  EXPECT_EQ(s.at("classifier.2.weight").shape(), (Shape{1000, 768}));
  EXPECT_FALSE(s.count("features.8.0.weight"));
  // torchvision's stochastic depth grows linearly to 0.1 over the 18 blocks.
  EXPECT_TRUE(has(m->get_submodule("features.1.0.stochastic_depth")->repr(), "p=0.0, mode=row"));
  EXPECT_TRUE(has(m->get_submodule("features.7.2.stochastic_depth")->repr(), "p=0.1, mode=row"));
}

// kaiming_normal_(fan_out, relu) convolutions, BatchNorm at (1, 0); trunc_normal(0.02) and zero
// biases for ConvNeXt. Sample std within 3% (tens of thousands of draws: the error is < 1%).
TEST(VisionZoo, InitialisationIsTorchvisions) {
  manual_seed(1);
  auto r = by_key(*create_model("resnet18"));
  EXPECT_NEAR(stddev(r.at("layer1.0.conv1.weight")), std::sqrt(2.0 / (64 * 9)), 0.03 * std::sqrt(2.0 / (64 * 9)));
  EXPECT_NEAR(stddev(r.at("layer4.1.conv2.weight")), std::sqrt(2.0 / (512 * 9)), 0.03 * std::sqrt(2.0 / (512 * 9)));
  EXPECT_NEAR(mean(r.at("layer4.1.conv2.weight")), 0.0, 1e-3);
  expect_all(r.at("layer3.1.bn2.weight"), 1.0, "bn weight");
  expect_all(r.at("layer3.1.bn2.bias"), 0.0, "bn bias");
  // fc keeps torch's Linear default: U(-1/sqrt(512), 1/sqrt(512)), std = bound / sqrt(3).
  EXPECT_NEAR(stddev(r.at("fc.weight")), 1.0 / std::sqrt(512.0 * 3.0), 0.03 / std::sqrt(512.0 * 3.0));

  auto c = by_key(*create_model("convnext_tiny"));
  EXPECT_NEAR(stddev(c.at("features.1.0.block.3.weight")), 0.02, 0.03 * 0.02);
  EXPECT_NEAR(stddev(c.at("classifier.2.weight")), 0.02, 0.03 * 0.02);
  expect_all(c.at("features.1.0.block.3.bias"), 0.0, "linear bias");
  expect_all(c.at("features.0.0.bias"), 0.0, "stem conv bias");
  expect_all(c.at("features.1.0.layer_scale"), float(1e-6), "layer_scale");

  manual_seed(1);
  auto again = by_key(*create_model("resnet18"));
  manual_seed(2);
  auto other = by_key(*create_model("resnet18"));
  const Tensor& a = r.at("layer1.0.conv1.weight");
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(a.item_as_double(i), again.at("layer1.0.conv1.weight").item_as_double(i));
  EXPECT_NE(a.item_as_double(0), other.at("layer1.0.conv1.weight").item_as_double(0));
}

TEST(VisionZoo, ConfigErrorsNameTheModelAndKey) {
  expect_error<InvalidArgument>(
      [] {
        create_model("resnet18", {{"layer_type", "wide"}});
      },
      "resnet18 config: layer_type must be \"basic\" or \"bottleneck\", got \"wide\"");
  expect_error<InvalidArgument>(
      [] {
        create_model("resnet50", {{"depths", {3, 4}}});
      },
      "hidden_sizes [256, 512, 1024, 2048] and depths [3, 4] must be non-empty and of one length");
  expect_error<InvalidArgument>(
      [] {
        create_model("resnet50", {{"hidden_sizes", {256, 512, 1024, 2046}}});
      },
      "divisible by 4");
  expect_error<InvalidArgument>(
      [] {
        create_model("convnext_tiny", {{"depths", {3, 0, 9, 3}}});
      },
      "convnext_tiny config: 'depths' must be a list of integers >= 1, got [3,0,9,3]");
  expect_error<InvalidArgument>(
      [] {
        create_model("convnext_tiny", {{"drop_path_rate", 1.5}});
      },
      "'drop_path_rate' must be a number in [0, 0.999], got 1.5");
  expect_error<InvalidArgument>([] { create_model("resnet18", {{"num_label", 10}}); }, "num_label");
  expect_error<InvalidArgument>(
      [] {
        create_model("mlp", {{"input_size", 100}});
      },
      "mlp config: input_shape [1, 28, 28] has 784 elements but input_size is 100");
  expect_error<InvalidArgument>([] { create_model("lenet", {{"image_size", 8}}); }, "image_size 8 is too small");
}

// Runs in Kiln at Fashion-MNIST's size: every zoo image model takes any size (dynamic H, W).
TEST(VisionZoo, ResNetRunsOnSmallImages) {
  manual_seed(0);
  ModulePtr m = create_model("resnet18", {{"num_channels", 1}, {"num_labels", 10}});
  m->eval();
  Tensor x = Tensor::empty(DType::Float32, {2, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(std::sin(0.37 * double(i)));
  const Tensor y = (*m)({x}).at(0);
  ASSERT_EQ(y.shape(), (Shape{2, 10}));
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.item_as_double(i)));
  EXPECT_NE(y.item_as_double(0), y.item_as_double(10));  // the two examples differ
}

// torchvision's StochasticDepth(p, "row") in training: each example's residual branch is dropped
// whole or kept and scaled by 1 / (1 - p). Seen through a hook on the second block (p = 0.5; the
// first has p = 0), against the same block in eval mode (no BatchNorm: only the masks differ).
TEST(VisionZoo, ConvNextStochasticDepthDropsWholeExamples) {
  manual_seed(0);
  ModulePtr m = create_model("convnext_tiny", {{"hidden_sizes", {8}},
                                               {"depths", {2}},
                                               {"drop_path_rate", 0.5},
                                               {"layer_scale_init_value", 100.0},
                                               {"num_labels", 4}});
  std::vector<Tensor> in, out;
  m->get_submodule("features.1.1")
      ->register_forward_hook([&](Module&, const std::vector<Tensor>& i, const std::vector<Tensor>& o) {
        in.push_back(i.at(0).clone());
        out.push_back(o.at(0).clone());
      });
  Tensor x = Tensor::empty(DType::Float32, {8, 3, 8, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(std::sin(0.91 * double(i)));
  m->eval();
  (*m)({x});
  m->train();
  (*m)({x});
  ASSERT_EQ(in.size(), 2u);
  const int64_t per = in[0].numel() / 8;
  int dropped = 0, kept = 0;
  for (int64_t b = 0; b < 8; ++b) {
    double diff_drop = 0, diff_keep = 0, scale = 0;
    for (int64_t k = b * per; k < (b + 1) * per; ++k) {
      const double branch_eval = out[0].item_as_double(k) - in[0].item_as_double(k);
      const double branch_train = out[1].item_as_double(k) - in[1].item_as_double(k);
      ASSERT_NEAR(in[1].item_as_double(k), in[0].item_as_double(k), 1e-6);
      diff_drop = std::max(diff_drop, std::abs(branch_train));
      diff_keep = std::max(diff_keep, std::abs(branch_train - 2.0 * branch_eval));
      scale = std::max(scale, std::abs(branch_eval));
    }
    ASSERT_GT(scale, 0.1);
    if (diff_drop <= 1e-4 * scale) ++dropped;
    else if (diff_keep <= 1e-4 * scale) ++kept;
    else ADD_FAILURE() << "example " << b << ": the branch is neither dropped nor kept and doubled";
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GT(kept, 0);
}

TEST(VisionZoo, ExportMarksBatchAndImageSizeDynamic) {
  const Model m = export_model("resnet18", {{"num_labels", 10}}, 7);
  ASSERT_EQ(m.graph.inputs.size(), 1u);
  const ValueInfo& in = m.graph.inputs[0];
  EXPECT_EQ(in.name, "pixel_values");
  ASSERT_EQ(in.dims.size(), 4u);
  EXPECT_EQ(in.dims[0].param, "batch");
  EXPECT_EQ(in.dims[1].value, 3);
  EXPECT_EQ(in.dims[2].param, "height");
  EXPECT_EQ(in.dims[3].param, "width");
  ASSERT_EQ(m.graph.outputs.size(), 1u);
  EXPECT_EQ(m.graph.outputs[0].name, "logits");
  EXPECT_TRUE(m.graph.initializers.count("layer4.1.bn2.running_mean"));
  EXPECT_TRUE(m.graph.initializers.count("fc.weight"));
}

// The Trainer's built-ins: mlp and lenet keep their names and input; zoo entries take a config.
TEST(VisionZoo, BuiltinModelsAreZooBacked) {
  const Model mlp = make_builtin_model("mlp", 42);
  EXPECT_EQ(mlp.graph.inputs.at(0).name, "input");
  EXPECT_EQ(mlp.graph.outputs.at(0).name, "logits");
  EXPECT_EQ(mlp.graph.initializers.at("fc1.weight").shape(), (Shape{128, 784}));
  EXPECT_EQ(mlp.graph.initializers.at("fc2.weight").shape(), (Shape{10, 128}));
  EXPECT_EQ(mlp.graph.initializers.size(), 4u);

  const Model lenet = make_builtin_model("lenet", 42);
  ASSERT_EQ(lenet.graph.inputs.at(0).dims.size(), 4u);
  EXPECT_EQ(lenet.graph.inputs.at(0).dims[2].value, 28);
  for (const char* k : {"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                        "conv2.weight", "bn2.running_var", "fc1.weight", "fc2.weight", "fc3.weight", "fc3.bias"})
    EXPECT_TRUE(lenet.graph.initializers.count(k)) << k;
  EXPECT_EQ(lenet.graph.initializers.at("fc1.weight").shape(), (Shape{120, 400}));
  int training_bn = 0;
  for (const Node& n : lenet.graph.nodes)
    if (n.op_type == "BatchNormalization" && n.outputs.size() == 3) ++training_bn;
  EXPECT_EQ(training_bn, 2);  // running statistics are outputs: training updates them

  const Model r = make_builtin_model("resnet18", 1, {{"num_channels", 1}, {"num_labels", 10}});
  EXPECT_EQ(r.graph.inputs.at(0).name, "input");  // Kiln's image datasets' column
  EXPECT_EQ(r.graph.initializers.at("conv1.weight").shape(), (Shape{64, 1, 7, 7}));
  expect_error<InvalidArgument>([] { make_builtin_model("resnet19", 1); }, "resnet18");
}

}  // namespace
}  // namespace kiln::nn::zoo
