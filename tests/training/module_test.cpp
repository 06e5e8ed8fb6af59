// Module, Optimizer and LinearLRScheduler over generated artifacts: gradient accumulation,
// parameters in and out, nominal checkpoints, exact resume, export, and bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "kiln/training.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln::training {
namespace {

using kiln::test::expect_error;

using kiln::testing::class_labels;
using kiln::testing::random_tensor;

struct TrainingRun {
  std::filesystem::path dir;
  CheckpointState state;
  std::unique_ptr<Module> module;
  std::unique_ptr<Optimizer> optimizer;

  explicit TrainingRun(std::filesystem::path d, bool with_optimizer = true, const std::string& ckpt = "checkpoint")
      : dir(std::move(d)), state(CheckpointState::load_checkpoint((dir / ckpt).string())) {
    module =
        std::make_unique<Module>((dir / "training_model.onnx").string(), state, (dir / "eval_model.onnx").string());
    if (with_optimizer) optimizer = std::make_unique<Optimizer>((dir / "optimizer_model.onnx").string(), *module);
  }
  float train_step(uint64_t seed) {
    module->train();
    const float loss = (*module)({random_tensor({8, 4}, seed), class_labels(8, 3, seed + 100)})[0].data<float>()[0];
    optimizer->step();
    module->lazy_reset_grad();
    return loss;
  }
};

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

TEST(Module, NamesAndSizes) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("names", OptimType::AdamW));
  EXPECT_EQ(r.module->input_names(), (std::vector<std::string>{"x", "labels"}));
  EXPECT_EQ(r.module->output_names(), (std::vector<std::string>{"loss"}));
  EXPECT_EQ(r.module->input_names(false), (std::vector<std::string>{"x", "labels"}));
  // fc1 4x6+6, bn 6+6, fc2 6x3+3, half 1 = 64 trainable; + running statistics 12.
  EXPECT_EQ(r.module->get_parameters_size(), 64);
  EXPECT_EQ(r.module->get_parameters_size(false), 76);
}

TEST(Module, GradientsAccumulateUntilLazyReset) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("accumulate", OptimType::SGD));
  const std::vector<Tensor> a{random_tensor({8, 4}, 1), class_labels(8, 3, 2)};
  const std::vector<Tensor> b{random_tensor({8, 4}, 3), class_labels(8, 3, 4)};
  // Running statistics change with every training call, but gradients do not depend on them.
  (*r.module)(a);
  const auto ga = values(r.state.parameter("fc1.weight").grad());
  r.module->lazy_reset_grad();
  (*r.module)(b);
  const auto gb = values(r.state.parameter("fc1.weight").grad());
  (*r.module)(a);  // no reset: added to b's
  const auto gab = values(r.state.parameter("fc1.weight").grad());
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(gab[i], ga[i] + gb[i], 1e-6f) << i;
  r.module->lazy_reset_grad();
  (*r.module)(a);
  const auto again = values(r.state.parameter("fc1.weight").grad());
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_EQ(again[i], ga[i]) << i;
}

// The run writes gradients into the parameters' gradient tensors (after a reset) or adds them in
// (accumulating): after the first call no step replaces a gradient tensor, and the values are those
// of the accumulation test above.
TEST(Module, GradientsAreWrittenIntoTheSameTensorsEveryStep) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("in_place", OptimType::SGD));
  const std::vector<Tensor> a{random_tensor({8, 4}, 1), class_labels(8, 3, 2)};
  const std::vector<Tensor> b{random_tensor({8, 4}, 3), class_labels(8, 3, 4)};
  (*r.module)(a);
  const Tensor& grad = r.state.parameter("fc1.weight").grad();
  const void* storage = grad.raw_data();
  const auto ga = values(grad);
  r.module->lazy_reset_grad();
  (*r.module)(b);
  EXPECT_EQ(r.state.parameter("fc1.weight").grad().raw_data(), storage);
  const auto gb = values(r.state.parameter("fc1.weight").grad());
  (*r.module)(a);
  EXPECT_EQ(r.state.parameter("fc1.weight").grad().raw_data(), storage);
  const auto gab = values(r.state.parameter("fc1.weight").grad());
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(gab[i], ga[i] + gb[i], 1e-6f) << i;
  r.module->lazy_reset_grad();
  (*r.module)(a);
  EXPECT_EQ(r.state.parameter("fc1.weight").grad().raw_data(), storage);
  EXPECT_EQ(values(r.state.parameter("fc1.weight").grad()), ga);
}

TEST(Module, TrainingUpdatesRunningStatisticsAndEvalUsesThem) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("running", OptimType::SGD));
  const auto before = values(r.state.parameter("bn.running_mean").data());
  r.module->train();
  (*r.module)({random_tensor({8, 4}, 1), class_labels(8, 3, 2)});
  const auto after = values(r.state.parameter("bn.running_mean").data());
  EXPECT_NE(before, after);
  r.module->eval();
  const float e1 = (*r.module)({random_tensor({8, 4}, 1), class_labels(8, 3, 2)})[0].data<float>()[0];
  const float e2 = (*r.module)({random_tensor({8, 4}, 1), class_labels(8, 3, 2)})[0].data<float>()[0];
  EXPECT_EQ(e1, e2);  // eval changes nothing
  EXPECT_EQ(values(r.state.parameter("bn.running_mean").data()), after);
}

TEST(Optimizer, SgdWithoutMomentumIsPMinusLrTimesGrad) {
  ArtifactOptions o;
  o.learning_rate = 0.25f;
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("sgd", OptimType::SGD, o));
  EXPECT_FLOAT_EQ(r.optimizer->get_learning_rate(), 0.25f);
  const auto p0 = values(r.state.parameter("fc2.weight").data());
  (*r.module)({random_tensor({8, 4}, 1), class_labels(8, 3, 2)});
  const auto g = values(r.state.parameter("fc2.weight").grad());
  r.optimizer->step();
  const auto p1 = values(r.state.parameter("fc2.weight").data());
  for (size_t i = 0; i < p0.size(); ++i) EXPECT_FLOAT_EQ(p1[i], p0[i] - 0.25f * g[i]) << i;
  EXPECT_EQ(r.optimizer->step_count(), 1);
}

TEST(Optimizer, StepBeforeAnyGradientIsAnError) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("nograd", OptimType::AdamW));
  EXPECT_THROW(r.optimizer->step(), InvalidArgument);
}

TEST(Optimizer, TrainingLowersTheLoss) {
  ArtifactOptions o;
  o.learning_rate = 0.05f;
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("lowers", OptimType::AdamW, o));
  const float first = r.train_step(5);
  float last = first;
  for (int i = 0; i < 40; ++i) last = r.train_step(5);  // the same batch: it must be learnt
  EXPECT_LT(last, 0.5f * first);
}

// A run saved with its optimizer state and resumed continues exactly as an uninterrupted one.
TEST(Optimizer, ResumeFromCheckpointIsExact) {
  const auto dir = kiln::testing::write_bn_mlp_artifacts("resume", OptimType::AdamW);
  TrainingRun full(dir);
  for (int i = 0; i < 6; ++i) full.train_step(10 + i);

  {
    TrainingRun first(dir);
    for (int i = 0; i < 3; ++i) first.train_step(10 + i);
    first.optimizer->set_learning_rate(first.optimizer->get_learning_rate());  // unchanged, stored
    CheckpointState::save_checkpoint(first.state, (dir / "mid").string(), true);
  }
  TrainingRun second(dir, true, "mid");
  EXPECT_EQ(second.optimizer->step_count(), 3);
  for (int i = 3; i < 6; ++i) second.train_step(10 + i);
  for (const auto& name : full.state.parameter_names())
    EXPECT_EQ(values(full.state.parameter(name).data()), values(second.state.parameter(name).data())) << name;
}

TEST(Module, ContiguousParametersRoundTripAndNominalCheckpoint) {
  ArtifactOptions o;
  const auto dir = kiln::testing::write_bn_mlp_artifacts("contiguous", OptimType::AdamW, o);
  TrainingRun full(dir, false);
  const Tensor all = full.module->get_contiguous_parameters(false);
  const Tensor trainable = full.module->get_contiguous_parameters(true);
  EXPECT_EQ(all.numel(), 76);
  EXPECT_EQ(trainable.numel(), 64);

  o.nominal_checkpoint = true;
  const auto ndir = kiln::testing::write_bn_mlp_artifacts("nominal", OptimType::AdamW, o);
  TrainingRun nominal(ndir, false);
  EXPECT_TRUE(nominal.state.is_nominal());
  const std::vector<Tensor> batch{random_tensor({8, 4}, 1), class_labels(8, 3, 2)};
  expect_error<InvalidArgument>([&] { (*nominal.module)(batch); }, "nominal");
  nominal.module->copy_buffer_to_parameters(all, false);
  EXPECT_EQ(values(nominal.module->get_contiguous_parameters(false)), values(all));
  const float a = (*nominal.module)(batch)[0].data<float>()[0];
  const float b = (*full.module)(batch)[0].data<float>()[0];
  EXPECT_EQ(a, b);
  EXPECT_THROW(nominal.module->copy_buffer_to_parameters(trainable, false), ShapeError);
}

TEST(Module, CheckpointOfAnotherModelNamesTheParameterAndBothShapes) {
  const auto dir = kiln::testing::write_bn_mlp_artifacts("other", OptimType::AdamW);
  CheckpointState state = CheckpointState::load_checkpoint((dir / "checkpoint").string());
  Parameter& p = state.parameter("fc2.weight");
  CheckpointState other;
  for (const auto& name : state.parameter_names()) {
    const Parameter& q = state.parameter(name);
    if (name == "fc2.weight") other.add_parameter(Parameter(name, Tensor::zeros(DType::Float32, {5, 6}), true));
    else other.add_parameter(Parameter(name, q.data().clone(), q.requires_grad()));
  }
  (void)p;
  expect_error<ShapeError>([&] { Module m((dir / "training_model.onnx").string(), other); },
                           {"'fc2.weight'", "[5, 6]", "[3, 6]"});
  CheckpointState missing;
  missing.add_parameter(Parameter("fc1.weight", state.parameter("fc1.weight").data().clone(), true));
  EXPECT_THROW(Module((dir / "training_model.onnx").string(), missing), KeyError);
}

TEST(Module, AModelWithoutGradientOutputsIsNoTrainingModel) {
  const auto dir = kiln::testing::write_bn_mlp_artifacts("nogradients", OptimType::AdamW);
  CheckpointState state = CheckpointState::load_checkpoint((dir / "checkpoint").string());
  expect_error<InvalidModel>([&] { Module m((dir / "eval_model.onnx").string(), state); },
                             "no gradient output 'fc1.weight_grad'");
}

TEST(Module, WrongInputsAreClearErrors) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("inputs", OptimType::AdamW));
  EXPECT_THROW((*r.module)({random_tensor({8, 4}, 1)}), InvalidArgument);                    // count
  EXPECT_THROW((*r.module)({random_tensor({8, 5}, 1), class_labels(8, 3, 2)}), ShapeError);  // shape
  EXPECT_THROW((*r.module)({random_tensor({8, 4}, 1), random_tensor({8}, 2)}), TypeError);   // dtype
  // Nothing changed: a good call still works.
  EXPECT_NO_THROW((*r.module)({random_tensor({8, 4}, 1), class_labels(8, 3, 2)}));
  EXPECT_THROW(Module((r.dir / "training_model.onnx").string(), r.state, std::nullopt, "cuda"), Unsupported);
}

TEST(Module, ExportForInferencingGivesTheEvalOutputs) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("export", OptimType::AdamW));
  for (int i = 0; i < 3; ++i) r.train_step(i);
  const auto path = r.dir / "inference.onnx";
  r.module->export_model_for_inferencing(path.string(), {"logits"});
  Model m = load_model(path.string());  // runs onnx's checker
  EXPECT_EQ(m.graph.outputs.size(), 1u);
  EXPECT_EQ(m.graph.inputs.size(), 1u);  // labels is gone
  for (const Node& n : m.graph.nodes) {
    EXPECT_TRUE(n.domain.empty()) << n.label();
    if (n.op_type == "BatchNormalization") {
      EXPECT_EQ(n.attr_int("training_mode", 0), 0);
    }
  }
  const Tensor x = random_tensor({8, 4}, 42);
  Session s(m);
  const auto logits = values(s.run({{"x", x}}).at("logits"));
  // The eval model's loss on these logits equals the exported logits' cross-entropy.
  r.module->eval();
  const Tensor labels = class_labels(8, 3, 9);
  const float eval_loss = (*r.module)({x, labels})[0].data<float>()[0];
  double ce = 0;
  for (int row = 0; row < 8; ++row) {
    double m2 = -1e30, s2 = 0;
    for (int k = 0; k < 3; ++k) m2 = std::max<double>(m2, logits[row * 3 + k]);
    for (int k = 0; k < 3; ++k) s2 += std::exp(logits[row * 3 + k] - m2);
    ce += -(logits[row * 3 + labels.data<int64_t>()[row]] - m2 - std::log(s2)) / 8;
  }
  EXPECT_NEAR(eval_loss, ce, 1e-5);
  EXPECT_THROW(r.module->export_model_for_inferencing((r.dir / "bad.onnx").string(), {"nope"}), InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(r.dir / "bad.onnx"));
}

TEST(LinearLRScheduler, WarmsUpThenDecaysToZero) {
  TrainingRun r(kiln::testing::write_bn_mlp_artifacts("scheduler", OptimType::AdamW));
  LinearLRScheduler s(*r.optimizer, 2, 6, 1.0f);
  std::vector<float> lrs{r.optimizer->get_learning_rate()};
  for (int i = 0; i < 7; ++i) {
    s.step();
    lrs.push_back(r.optimizer->get_learning_rate());
  }
  const std::vector<float> expected{0.f, 0.5f, 1.f, 0.75f, 0.5f, 0.25f, 0.f, 0.f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(lrs[i], expected[i]) << i;
}

}  // namespace
}  // namespace kiln::training
