// Backbones: Hugging Face's out_features / out_indices rules and messages
// (transformers.utils.backbone_utils), the ResNet and ConvNeXt backbones' stages, channels and
// feature-map shapes (HF's documented ResNet-50 example on 224x224), and re-selecting outputs.
#include "kiln/nn/backbone.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace kiln::nn {
namespace {

using kiln::test::error_message;
using kiln::test::expect_error;
using Names = std::vector<std::string>;
using Indices = std::vector<int64_t>;

const Names kStages{"stem", "stage1", "stage2", "stage3", "stage4"};

std::string align_error(std::optional<Names> f, std::optional<Indices> i) {
  return error_message<InvalidArgument>([&] { align_output_features_output_indices(f, i, kStages); });
}

TEST(BackboneAlign, NeitherSelectsTheLastStage) {
  const auto [f, i] = align_output_features_output_indices(std::nullopt, std::nullopt, kStages);
  EXPECT_EQ(f, Names{"stage4"});
  EXPECT_EQ(i, Indices{4});
}

TEST(BackboneAlign, FeaturesGiveIndices) {
  const auto [f, i] = align_output_features_output_indices(Names{"stem", "stage2"}, std::nullopt, kStages);
  EXPECT_EQ(f, (Names{"stem", "stage2"}));
  EXPECT_EQ(i, (Indices{0, 2}));
}

TEST(BackboneAlign, IndicesGiveFeaturesAndNegativeOnesAreKept) {
  auto [f, i] = align_output_features_output_indices(std::nullopt, Indices{1, 3}, kStages);
  EXPECT_EQ(f, (Names{"stage1", "stage3"}));
  EXPECT_EQ(i, (Indices{1, 3}));
  std::tie(f, i) = align_output_features_output_indices(std::nullopt, Indices{-2, -1}, kStages);
  EXPECT_EQ(f, (Names{"stage3", "stage4"}));
  EXPECT_EQ(i, (Indices{-2, -1}));  // HF keeps them as given
}

TEST(BackboneAlign, BothMustAgree) {
  const auto [f, i] = align_output_features_output_indices(Names{"stage1", "stage4"}, Indices{1, -1}, kStages);
  EXPECT_EQ(f, (Names{"stage1", "stage4"}));
  EXPECT_EQ(i, (Indices{1, -1}));
  EXPECT_EQ(align_error(Names{"stage1", "stage2"}, Indices{1, 3}),
            "out_features and out_indices should correspond to the same stages if both are set");
  EXPECT_EQ(align_error(Names{"stage1", "stage2"}, Indices{1}),
            "out_features and out_indices should have the same length if both are set");
}

TEST(BackboneAlign, OutOfRangeAndUnknownNames) {
  EXPECT_EQ(
      align_error(std::nullopt, Indices{0, 5}),
      "out_indices must be valid indices for stage_names ['stem', 'stage1', 'stage2', 'stage3', 'stage4'], got [0, 5]");
  EXPECT_EQ(
      align_error(std::nullopt, Indices{-6}),
      "out_indices must be valid indices for stage_names ['stem', 'stage1', 'stage2', 'stage3', 'stage4'], got [-6]");
  EXPECT_EQ(align_error(Names{"stage1", "stage5"}, std::nullopt),
            "out_features must be a subset of stage_names: ['stem', 'stage1', 'stage2', 'stage3', 'stage4'] got "
            "['stage1', 'stage5']");
}

TEST(BackboneAlign, DuplicatesAndWrongOrder) {
  EXPECT_EQ(align_error(Names{"stage1", "stage1"}, std::nullopt),
            "out_features must not contain any duplicates, got ['stage1', 'stage1']");
  EXPECT_EQ(align_error(std::nullopt, Indices{2, 2}), "out_indices must not contain any duplicates, got [2, 2]");
  EXPECT_EQ(align_error(std::nullopt, Indices{4, -1}),
            "out_indices must not contain any duplicates, got [4, -1] (equivalent to (4, 4))");
  EXPECT_EQ(
      align_error(Names{"stage2", "stage1"}, std::nullopt),
      "out_features must be in the same order as stage_names, expected ['stage1', 'stage2'] got ['stage2', 'stage1']");
  EXPECT_EQ(align_error(std::nullopt, Indices{-1, 1}),
            "out_indices must be in the same order as stage_names, expected [1, -1] got [-1, 1]");
}

Tensor image(Shape shape) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(std::sin(0.013 * double(i)) + 0.1);
  return t;
}

// HF's documented example: ResNet-50 on 224x224 gives stem 64x56x56 and stages 256x56x56,
// 512x28x28, 1024x14x14, 2048x7x7.
TEST(Backbone, ResNet50FeatureMapsOnTheDocumentedExample) {
  manual_seed(0);
  auto bb = AutoBackbone::from_config("resnet50", {}, {.out_indices = Indices{0, 1, 2, 3, 4}});
  EXPECT_EQ(bb->stage_names(), kStages);
  EXPECT_EQ(bb->channels(), (Indices{64, 256, 512, 1024, 2048}));
  EXPECT_EQ(bb->out_feature_channels().at("stage3"), 1024);
  bb->eval();
  const auto maps = (*bb)({image({1, 3, 224, 224})});
  ASSERT_EQ(maps.size(), 5u);
  EXPECT_EQ(maps[0].shape(), (Shape{1, 64, 56, 56}));
  EXPECT_EQ(maps[1].shape(), (Shape{1, 256, 56, 56}));
  EXPECT_EQ(maps[2].shape(), (Shape{1, 512, 28, 28}));
  EXPECT_EQ(maps[3].shape(), (Shape{1, 1024, 14, 14}));
  EXPECT_EQ(maps[4].shape(), (Shape{1, 2048, 7, 7}));
}

TEST(Backbone, FromConfigWithOutIndicesAndSetters) {
  manual_seed(0);
  auto bb = AutoBackbone::from_config("resnet50", {}, {.out_indices = Indices{1, 2}});
  EXPECT_EQ(bb->out_features(), (Names{"stage1", "stage2"}));
  EXPECT_EQ(bb->out_indices(), (Indices{1, 2}));
  EXPECT_EQ(bb->channels(), (Indices{256, 512}));
  bb->set_out_features({"stem", "stage4"});
  EXPECT_EQ(bb->out_indices(), (Indices{0, 4}));
  EXPECT_EQ(bb->channels(), (Indices{64, 2048}));
  bb->set_out_indices({-1});
  EXPECT_EQ(bb->out_features(), Names{"stage4"});
  EXPECT_EQ(bb->out_indices(), Indices{-1});
  // A rejected selection leaves the current one.
  EXPECT_EQ(
      error_message<InvalidArgument>([&] { bb->set_out_features({"stage9"}); }),
      "out_features must be a subset of stage_names: ['stem', 'stage1', 'stage2', 'stage3', 'stage4'] got ['stage9']");
  EXPECT_EQ(bb->out_features(), Names{"stage4"});
  // The default: the last stage only.
  EXPECT_EQ(AutoBackbone::from_config("resnet18")->out_features(), Names{"stage4"});
}

// Re-selecting outputs changes what a run returns (the traced plan is dropped).
TEST(Backbone, SettersChangeTheOutputsOfARun) {
  manual_seed(0);
  auto bb = AutoBackbone::from_config("resnet18", {{"num_channels", 1}}, {.out_features = Names{"stage4"}});
  bb->eval();
  const Tensor x = image({2, 1, 32, 32});
  auto maps = (*bb)({x});
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].shape(), (Shape{2, 512, 1, 1}));
  bb->set_out_indices({0, 2});
  maps = (*bb)({x});
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].shape(), (Shape{2, 64, 8, 8}));
  EXPECT_EQ(maps[1].shape(), (Shape{2, 128, 4, 4}));
}

TEST(Backbone, KeysAreTheClassifiersWithoutItsHead) {
  manual_seed(0);
  auto bb = AutoBackbone::from_config("resnet18");
  auto net = zoo::create_model("resnet18");
  std::vector<std::string> expected, got;
  for (const auto& [k, t] : net->state_dict())
    if (k.rfind("fc.", 0) != 0) expected.push_back(k);
  for (const auto& [k, t] : bb->state_dict()) got.push_back(k);
  EXPECT_EQ(got, expected);
  const auto cn = AutoBackbone::from_config("convnext_tiny");
  for (const auto& [k, t] : cn->state_dict()) EXPECT_EQ(k.rfind("features.", 0), 0u) << k;
}

TEST(Backbone, ConvNextStagesAndShapes) {
  manual_seed(0);
  auto bb = AutoBackbone::from_config("convnext_tiny", {}, {.out_features = kStages});
  EXPECT_EQ(bb->channels(), (Indices{96, 96, 192, 384, 768}));
  bb->eval();
  const auto maps = (*bb)({image({1, 3, 64, 64})});
  ASSERT_EQ(maps.size(), 5u);
  EXPECT_EQ(maps[0].shape(), (Shape{1, 96, 16, 16}));
  EXPECT_EQ(maps[1].shape(), (Shape{1, 96, 16, 16}));
  EXPECT_EQ(maps[2].shape(), (Shape{1, 192, 8, 8}));
  EXPECT_EQ(maps[3].shape(), (Shape{1, 384, 4, 4}));
  EXPECT_EQ(maps[4].shape(), (Shape{1, 768, 2, 2}));
}

TEST(Backbone, UnknownModelsAndConfigKeys) {
  expect_error<InvalidArgument>([] { AutoBackbone::from_config("mlp"); },
                                "AutoBackbone: the model 'mlp' has no backbone; models with one: ");
  const auto names = AutoBackbone::names();
  for (const char* n : {"convnext_tiny", "resnet18", "resnet34", "resnet50"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  expect_error<InvalidArgument>(
      [] {
        AutoBackbone::from_config("resnet50", {{"depth", 3}});
      },
      "'resnet50' has no config key 'depth'");
  expect_error<InvalidArgument>([] { AutoBackbone::from_config("resnet50", {}, {.out_indices = Indices{7}}); },
                                "out_indices must be valid indices");
}

}  // namespace
}  // namespace kiln::nn
