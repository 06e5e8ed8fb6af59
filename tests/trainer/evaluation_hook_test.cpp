// Trainer::prediction_step (one batch through the eval model) against evaluate()'s native loop, and
// set_evaluation_hook: evaluate(), predict() and train()'s evaluations take the hook's metrics and
// report them as their own (logged, on_evaluate / on_predict, memory metrics).
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "kiln/trainer.h"
#include "trainer/trainer_fixtures.h"

namespace kiln::trainer {
namespace {

using testing::base_args;
using testing::dataset;
using testing::fresh;
using testing::write_model;

Trainer make_trainer(const std::filesystem::path& dir, TrainingArguments a) {
  return Trainer(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss),
                 std::move(a), dataset(32, 7), dataset(16, 9));
}

TEST(EvaluationHook, PredictionStepGivesTheNativeLoopsLossAndPredictions) {
  const auto dir = fresh("prediction_step");
  TrainingArguments a = base_args(dir / "out");
  a.max_steps = 2;
  a.per_device_eval_batch_size = 16;  // one batch: the loop's loss is that batch's
  Trainer t = make_trainer(dir, a);
  t.train();
  const Metrics native = t.evaluate();
  const PredictionOutput predicted = t.predict(dataset(16, 9));
  const auto eval = dataset(16, 9);
  const data::Example batch{{"input", eval->column("input")}, {"labels", eval->column("labels")}};
  const PredictionStep step = t.prediction_step(batch, false);
  EXPECT_NEAR(step.loss, native.at("eval_loss"), 1e-6 * native.at("eval_loss"));
  ASSERT_TRUE(step.logits.defined());
  ASSERT_EQ(step.logits.shape(), predicted.predictions.shape());
  for (int64_t i = 0; i < step.logits.numel(); ++i)
    EXPECT_NEAR(step.logits.data<float>()[i], predicted.predictions.data<float>()[i], 1e-6);
  ASSERT_TRUE(step.labels.defined());
  EXPECT_EQ(step.labels.data<int64_t>()[3], eval->column("labels").data<int64_t>()[3]);
  EXPECT_FALSE(t.prediction_step(batch, true).logits.defined());
  try {
    t.prediction_step({{"labels", eval->column("labels")}}, false);
    FAIL() << "a batch without the model's input";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("takes input 'input'"), std::string::npos) << e.what();
  }
}

TEST(EvaluationHook, EvaluationsOfTrainEvaluateAndPredictRunTheHook) {
  const auto dir = fresh("evaluation_hook");
  TrainingArguments a = base_args(dir / "out");
  a.max_steps = 4;
  a.eval_strategy = IntervalStrategy::steps;
  a.do_eval = true;
  a.eval_steps = 2;
  a.skip_memory_metrics = false;
  Trainer t = make_trainer(dir, a);
  std::vector<std::pair<std::string, std::string>> calls;
  t.set_evaluation_hook([&](const std::string& prefix, const std::string& description) {
    calls.emplace_back(prefix, description);
    PredictionOutput out;
    out.metrics[prefix + "_loss"] = 0.5 * static_cast<double>(calls.size());
    return out;
  });
  t.train();
  ASSERT_EQ(calls.size(), 2u);  // steps 2 and 4
  int logged = 0;
  for (const auto& entry : t.state().log_history) {
    if (!entry.contains("eval_loss")) continue;
    EXPECT_DOUBLE_EQ(entry.at("eval_loss").get<double>(), 0.5 * ++logged);
  }
  EXPECT_EQ(logged, 2);
  const Metrics m = t.evaluate(nullptr, "dev");
  EXPECT_EQ(calls.back(), std::make_pair(std::string("dev"), std::string("Evaluation")));
  EXPECT_DOUBLE_EQ(m.at("dev_loss"), 1.5);
  EXPECT_TRUE(m.count("eval_mem_cpu_alloc_delta"));
  EXPECT_TRUE(m.count("epoch"));
  const PredictionOutput p = t.predict(dataset(8, 3));
  EXPECT_EQ(calls.back(), std::make_pair(std::string("test"), std::string("Prediction")));
  EXPECT_DOUBLE_EQ(p.metrics.at("test_loss"), 2.0);
  EXPECT_FALSE(p.predictions.defined());
  t.set_evaluation_hook(nullptr);  // the native loop again
  EXPECT_LT(t.evaluate().at("eval_loss"), 5.0);
  EXPECT_EQ(calls.size(), 4u);
}

}  // namespace
}  // namespace kiln::trainer
