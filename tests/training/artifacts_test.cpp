// generate_artifacts: which parameters train, the four files, the loss blocks, and bad options.
#include "kiln/artifacts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln::training {
namespace {

using kiln::test::expect_error;

using kiln::testing::make_bn_mlp;

std::vector<std::string> names(const std::vector<ValueInfo>& vs) {
  std::vector<std::string> n;
  for (const auto& v : vs) n.push_back(v.name);
  return n;
}

ArtifactOptions ce_adamw() {
  ArtifactOptions o;
  o.loss = LossType::CrossEntropyLoss;
  o.optimizer = OptimType::AdamW;
  return o;
}

TEST(Artifacts, DefaultParametersAreTheFloatInitializersAGradientReaches) {
  const Artifacts a = build_artifacts(make_bn_mlp(), ce_adamw());
  // Trainable in forward order; the BatchNorm statistics are updated buffers; "mask", "one" and
  // "half" are not parameters ("half" is a constant scale: a gradient reaches it, so it trains
  // by default as ONNX Runtime's every-float-initializer rule would; "mask" feeds only Equal).
  EXPECT_EQ(a.checkpoint.parameter_names(),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias",
                                      "half", "bn.running_mean", "bn.running_var"}));
  EXPECT_FALSE(a.checkpoint.parameter("bn.running_mean").requires_grad());
  EXPECT_TRUE(a.checkpoint.parameter("fc1.weight").requires_grad());
  EXPECT_EQ(a.training_model.graph.initializers.count("mask"), 1u);

  const auto in = names(a.training_model.graph.inputs);
  EXPECT_EQ(std::vector<std::string>(in.begin(), in.begin() + 2), (std::vector<std::string>{"x", "labels"}));
  const auto out = names(a.training_model.graph.outputs);
  EXPECT_EQ(out.front(), "loss");
  EXPECT_NE(std::find(out.begin(), out.end(), "fc1.weight_grad"), out.end());
  EXPECT_NE(std::find(out.begin(), out.end(), "bn.running_mean.updated"), out.end());
  EXPECT_EQ(std::find(out.begin(), out.end(), "mask_grad"), out.end());

  // Eval: no gradients, BatchNormalization in inference mode.
  EXPECT_EQ(names(a.eval_model.graph.outputs), (std::vector<std::string>{"loss"}));
  for (const Node& n : a.eval_model.graph.nodes) {
    EXPECT_TRUE(n.domain.empty()) << n.label();
    if (n.op_type == "BatchNormalization") {
      EXPECT_EQ(n.attr_int("training_mode", 0), 0);
      EXPECT_EQ(n.outputs.size(), 1u);
    }
  }
  ASSERT_TRUE(a.optimizer_model.has_value());
  EXPECT_EQ(a.optimizer_model->graph.nodes.size(), 7u);  // one update per trainable parameter
}

TEST(Artifacts, RequiresGradAndFrozenParams) {
  ArtifactOptions o = ce_adamw();
  o.requires_grad = {"fc2.weight", "fc2.bias"};
  o.frozen_params = {"fc1.weight"};
  const Artifacts a = build_artifacts(make_bn_mlp(), o);
  EXPECT_EQ(a.checkpoint.parameter_names(),
            (std::vector<std::string>{"fc2.weight", "fc2.bias", "fc1.weight", "bn.running_mean", "bn.running_var"}));
  EXPECT_FALSE(a.checkpoint.parameter("fc1.weight").requires_grad());
  EXPECT_EQ(a.training_model.graph.initializers.count("fc1.bias"), 1u);  // neither: stays a constant
  EXPECT_EQ(a.optimizer_model->graph.nodes.size(), 2u);
}

TEST(Artifacts, BadOptionsAreClearErrors) {
  ArtifactOptions o = ce_adamw();
  o.requires_grad = {"fc1.weight"};
  o.frozen_params = {"fc1.weight"};
  expect_error<InvalidArgument>([&] { build_artifacts(make_bn_mlp(), o); },
                                "'fc1.weight' is listed both in requires_grad and in frozen_params");
  o = ce_adamw();
  o.requires_grad = {"nope"};
  EXPECT_THROW(build_artifacts(make_bn_mlp(), o), InvalidArgument);
  o = ce_adamw();
  o.frozen_params = {"nope"};
  EXPECT_THROW(build_artifacts(make_bn_mlp(), o), InvalidArgument);
  o = ce_adamw();
  o.loss = LossType::None;  // logits [N, 3] is no scalar loss
  EXPECT_THROW(build_artifacts(make_bn_mlp(), o), InvalidArgument);
  o = ce_adamw();
  o.additional_output_names = {"nope"};
  EXPECT_THROW(build_artifacts(make_bn_mlp(), o), InvalidArgument);
  EXPECT_THROW(loss_type_from_string("HingeLoss"), InvalidArgument);
  EXPECT_THROW(optim_type_from_string("Adam"), InvalidArgument);
  EXPECT_EQ(loss_type_from_string("BCEWithLogitsLoss"), LossType::BCEWithLogitsLoss);
}

TEST(Artifacts, FilesAreValidOnnxAndNothingIsWrittenOnError) {
  const auto dir = kiln::testing::fresh_dir("files");
  ArtifactOptions o = ce_adamw();
  o.prefix = "run_";
  const auto written = generate_artifacts(make_bn_mlp(), o, dir.string());
  EXPECT_EQ(written.size(), 4u);
  for (const char* f : {"run_training_model.onnx", "run_eval_model.onnx", "run_optimizer_model.onnx"})
    EXPECT_NO_THROW(load_model((dir / f).string())) << f;  // load_model runs onnx's checker
  EXPECT_TRUE(std::filesystem::exists(dir / "run_checkpoint"));

  const auto bad = kiln::testing::fresh_dir("files_bad");
  o.requires_grad = {"missing"};
  EXPECT_THROW(generate_artifacts(make_bn_mlp(), o, bad.string()), InvalidArgument);
  EXPECT_TRUE(std::filesystem::is_empty(bad));
}

// Each loss block against its definition, computed here on the eval model's inputs.
double run_loss(LossType loss, const Tensor& labels, const Tensor& x, float label_smoothing = 0.0f) {
  ArtifactOptions o;
  o.loss = loss;
  o.label_smoothing = label_smoothing;
  o.requires_grad = {"fc2.weight"};
  const Artifacts a = build_artifacts(make_bn_mlp(), o);
  Model eval = a.eval_model;
  // Parameters back as initializers, so that the eval model runs on its own.
  std::map<std::string, Tensor> feeds{{"x", x}, {"labels", labels}};
  for (const auto& name : a.checkpoint.parameter_names()) feeds[name] = a.checkpoint.parameter(name).data();
  Session s(eval);
  return s.run(feeds).at("loss").item_as_double();
}

std::vector<float> eval_logits(const Tensor& x) {
  Model m = make_bn_mlp();
  for (Node& n : m.graph.nodes)
    if (n.op_type == "BatchNormalization") {
      n.attrs["training_mode"] = Attribute::of_int(0);
      n.outputs.resize(1);
    }
  Session s(m);
  const Tensor y = s.run({{"x", x}}).at("logits");
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

TEST(Artifacts, LossBlocksComputeTorchsDefinitions) {
  const Tensor x = kiln::testing::random_tensor({5, 4}, 3);
  const std::vector<float> z = eval_logits(x);
  const Tensor y = kiln::testing::random_tensor({5, 3}, 4);
  const float* t = y.data<float>();
  double mse = 0, l1 = 0, bce = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    const double d = z[i] - t[i];
    mse += d * d / 15;
    l1 += std::abs(d) / 15;
    bce += (std::max<double>(z[i], 0) - z[i] * t[i] + std::log1p(std::exp(-std::abs(z[i])))) / 15;
  }
  EXPECT_NEAR(run_loss(LossType::MSELoss, y, x), mse, 1e-6);
  EXPECT_NEAR(run_loss(LossType::L1Loss, y, x), l1, 1e-6);
  EXPECT_NEAR(run_loss(LossType::BCEWithLogitsLoss, y, x), bce, 1e-6);

  // Cross-entropy: mean over the rows whose label is not -100.
  Tensor labels = Tensor::from_vector<int64_t>({5}, {0, 2, -100, 1, 2});
  double ce = 0;
  int counted = 0;
  for (int r = 0; r < 5; ++r) {
    const int64_t c = labels.data<int64_t>()[r];
    if (c == -100) continue;
    double m = -1e30, s = 0;
    for (int k = 0; k < 3; ++k) m = std::max<double>(m, z[r * 3 + k]);
    for (int k = 0; k < 3; ++k) s += std::exp(z[r * 3 + k] - m);
    ce += -(z[r * 3 + c] - m - std::log(s));
    ++counted;
  }
  EXPECT_NEAR(run_loss(LossType::CrossEntropyLoss, labels, x), ce / counted, 1e-6);

  // Label smoothing 0.1 (torch's label_smoothing): 0.9 * NLL + 0.1 * mean over kept rows of
  // -sum_c log p_c / C.
  double nll = 0, smooth = 0;
  for (int r = 0; r < 5; ++r) {
    const int64_t c = labels.data<int64_t>()[r];
    if (c == -100) continue;
    double m = -1e30, s = 0;
    for (int k = 0; k < 3; ++k) m = std::max<double>(m, z[r * 3 + k]);
    for (int k = 0; k < 3; ++k) s += std::exp(z[r * 3 + k] - m);
    nll += -(z[r * 3 + c] - m - std::log(s));
    for (int k = 0; k < 3; ++k) smooth += -(z[r * 3 + k] - m - std::log(s)) / 3;
  }
  EXPECT_NEAR(run_loss(LossType::CrossEntropyLoss, labels, x, 0.1f), 0.9 * nll / counted + 0.1 * smooth / counted,
              1e-6);
  EXPECT_THROW(run_loss(LossType::MSELoss, y, x, 0.1f), InvalidArgument);
}

}  // namespace
}  // namespace kiln::training
