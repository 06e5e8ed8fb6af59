// The callback system against Hugging Face's documented loop: the order of events for a run with
// accumulation, evaluation and checkpoints; control flags; early stopping with HF's rules and its
// state across a resume; add / pop / remove_callback.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kiln/error.h"
#include "kiln/trainer.h"
#include "test_util.h"
#include "trainer/trainer_fixtures.h"

namespace kiln::trainer {
namespace {
using namespace kiln::trainer::testing;
using kiln::test::expect_error;
namespace fs = std::filesystem;

// Records "event@global_step" for every event, plus what the event carried.
struct Recorder : TrainerCallback {
  std::vector<std::string> events;
  std::vector<Metrics> evaluations;
  std::vector<Logs> logs;
  bool saw_model = false, saw_scheduler = false;
  int stop_at = -1;  // asks to stop training at this step's on_step_end

  void add(const char* event, const TrainerState& s, const CallbackContext& ctx) {
    events.push_back(std::string(event) + "@" + std::to_string(s.global_step));
    saw_model = saw_model || ctx.model != nullptr;
  }
  void on_init_end(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("init_end", s, c);
  }
  void on_train_begin(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("train_begin", s, c);
    saw_scheduler = c.lr_scheduler != nullptr && c.train_dataloader != nullptr && c.optimizer != nullptr;
  }
  void on_train_end(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("train_end", s, c);
  }
  void on_epoch_begin(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("epoch_begin", s, c);
  }
  void on_epoch_end(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("epoch_end", s, c);
  }
  void on_step_begin(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("step_begin", s, c);
  }
  void on_pre_optimizer_step(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("pre_optimizer_step", s, c);
  }
  void on_optimizer_step(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("optimizer_step", s, c);
  }
  void on_substep_end(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("substep_end", s, c);
    EXPECT_TRUE(c.loss.has_value());
  }
  void on_step_end(const Args&, const TrainerState& s, TrainerControl& control, const CallbackContext& c) override {
    add("step_end", s, c);
    EXPECT_TRUE(c.loss.has_value());
    if (s.global_step == stop_at) control.should_training_stop = true;
  }
  void on_evaluate(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("evaluate", s, c);
    evaluations.push_back(*c.metrics);
  }
  void on_predict(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("predict", s, c);
  }
  void on_prediction_step(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("prediction_step", s, c);
    EXPECT_NE(c.eval_dataloader, nullptr);
  }
  void on_save(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("save", s, c);
  }
  void on_log(const Args&, const TrainerState& s, TrainerControl&, const CallbackContext& c) override {
    add("log", s, c);
    logs.push_back(*c.logs);
  }
};

TrainingArguments args_for(const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> argv = {"--output_dir",
                                   out.string(),
                                   "--learning_rate",
                                   "0.01",
                                   "--report_to",
                                   "none",
                                   "--disable_tqdm",
                                   "true",
                                   "--per_device_train_batch_size",
                                   "2",
                                   "--per_device_eval_batch_size",
                                   "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return TrainingArguments::parse_args(argv);
}

// 8 examples in batches of 2 with 2 accumulation steps: 2 optimizer steps per epoch, 2 epochs, a
// log, an evaluation (2 eval batches) and a checkpoint every 2 steps. The expected sequence is HF's
// _inner_training_loop: on_step_begin at the first batch of each accumulation group,
// on_substep_end for the others, clipping then on_pre_optimizer_step / on_optimizer_step, the step
// counted, on_step_end, then log -> evaluate (on_prediction_step per batch, on_log, on_evaluate) ->
// save; on_epoch_end; the summary log; on_train_end.
TEST(Callbacks, EventOrderMatchesHuggingFacesLoop) {
  const fs::path dir = fresh("cb_order");
  auto rec = std::make_shared<Recorder>();
  Trainer t(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss),
            args_for(dir / "out", {"--gradient_accumulation_steps", "2", "--num_train_epochs", "2", "--logging_steps",
                                   "2", "--eval_strategy", "steps", "--eval_steps", "2", "--save_steps", "2"}),
            dataset(8, 1), dataset(4, 2), nullptr, nullptr, {rec});
  t.train();
  const std::vector<std::string> update_1 = {"step_begin@0", "substep_end@0", "pre_optimizer_step@0",
                                             "optimizer_step@0", "step_end@1"};
  auto update_with_log_eval_save = [](int before, int after) {
    const std::string b = std::to_string(before), a = std::to_string(after);
    return std::vector<std::string>{"step_begin@" + b,
                                    "substep_end@" + b,
                                    "pre_optimizer_step@" + b,
                                    "optimizer_step@" + b,
                                    "step_end@" + a,
                                    "log@" + a,
                                    "prediction_step@" + a,
                                    "prediction_step@" + a,
                                    "log@" + a,
                                    "evaluate@" + a,
                                    "save@" + a};
  };
  std::vector<std::string> expected = {"init_end@0", "train_begin@0", "epoch_begin@0"};
  expected.insert(expected.end(), update_1.begin(), update_1.end());
  for (const auto& e : update_with_log_eval_save(1, 2)) expected.push_back(e);
  expected.insert(expected.end(), {"epoch_end@2", "epoch_begin@2", "step_begin@2", "substep_end@2",
                                   "pre_optimizer_step@2", "optimizer_step@2", "step_end@3"});
  for (const auto& e : update_with_log_eval_save(3, 4)) expected.push_back(e);
  expected.insert(expected.end(), {"epoch_end@4", "log@4", "train_end@4"});
  EXPECT_EQ(rec->events, expected);
  EXPECT_TRUE(rec->saw_model);
  EXPECT_TRUE(rec->saw_scheduler);

  // on_log carries HF's keys in HF's order; on_evaluate the metrics (with "epoch", as HF's log adds it).
  ASSERT_EQ(rec->logs.size(), 5u);
  std::vector<std::string> keys;
  for (const auto& [k, v] : rec->logs[0]) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"loss", "grad_norm", "learning_rate", "epoch"}));
  keys.clear();
  for (const auto& [k, v] : rec->logs.back()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"train_runtime", "train_samples_per_second", "train_steps_per_second",
                                            "total_flos", "train_loss", "epoch"}));
  ASSERT_EQ(rec->evaluations.size(), 2u);
  EXPECT_TRUE(rec->evaluations[0].count("eval_loss"));
  EXPECT_DOUBLE_EQ(rec->evaluations[1].at("epoch"), 2.0);
  // The log history holds what on_log saw, plus the step.
  EXPECT_EQ(t.state().log_history.size(), 5u);
  EXPECT_EQ(t.state().log_history[1]["step"], 2);
  EXPECT_TRUE(t.state().log_history[1].contains("eval_loss"));

  // evaluate() and predict() outside train(): prediction steps, then on_log + on_evaluate / on_predict.
  rec->events.clear();
  t.evaluate();
  EXPECT_EQ(rec->events, (std::vector<std::string>{"prediction_step@4", "prediction_step@4", "log@4", "evaluate@4"}));
  rec->events.clear();
  t.predict(dataset(4, 3));
  EXPECT_EQ(rec->events, (std::vector<std::string>{"prediction_step@4", "prediction_step@4", "predict@4"}));
}

TEST(Callbacks, ControlStopsTrainingAndEpochs) {
  const fs::path dir = fresh("cb_stop");
  auto rec = std::make_shared<Recorder>();
  rec->stop_at = 3;
  Trainer t(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss),
            args_for(dir / "out", {"--max_steps", "10", "--save_strategy", "no"}), dataset(8, 1), nullptr, nullptr,
            nullptr, {rec});
  const TrainOutput out = t.train();
  EXPECT_EQ(out.global_step, 3);
  EXPECT_EQ(rec->events.back(), "train_end@3");
  EXPECT_TRUE(t.control().should_training_stop);
  // should_training_stop is reset by the next train(): a second run starts again.
  rec->stop_at = 2;
  EXPECT_EQ(t.train().global_step, 2);
}

// lr 0 makes every evaluation the same: the first sets best_metric, then each one without an
// improvement counts, and training stops when the count reaches the patience.
TEST(Callbacks, EarlyStoppingStopsAPlateau) {
  const fs::path dir = fresh("cb_early");
  auto early = std::make_shared<EarlyStoppingCallback>(2);
  Trainer t(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss),
            args_for(dir / "out", {"--learning_rate", "0", "--max_steps", "20", "--eval_strategy", "steps",
                                   "--eval_steps", "1", "--save_steps", "1", "--load_best_model_at_end", "true"}),
            dataset(8, 1), dataset(4, 2), nullptr, nullptr, {early});
  EXPECT_EQ(t.train().global_step, 3);  // evaluations at 1 (best), 2 (1 without), 3 (2: stop)
  EXPECT_EQ(early->early_stopping_patience_counter, 2);

  // A falling loss never stops (lr 0.05 on a separable set), HF's default patience 1.
  const fs::path dir2 = fresh("cb_early_falls");
  auto early2 = std::make_shared<EarlyStoppingCallback>();
  Trainer t2(ModelSource::onnx(write_model(dir2, false).string(), training::LossType::CrossEntropyLoss),
             args_for(dir2 / "out",
                      {"--learning_rate", "0.05", "--max_steps", "6", "--eval_strategy", "steps", "--eval_steps", "1",
                       "--save_steps", "1", "--load_best_model_at_end", "true", "--per_device_train_batch_size", "8"}),
             dataset(8, 1), dataset(8, 1), nullptr, nullptr, {early2});
  EXPECT_EQ(t2.train().global_step, 6);
}

// HF's check_metric_value, driven directly: an improvement must beat best_metric by more than the
// threshold, in the direction greater_is_better gives.
TEST(Callbacks, EarlyStoppingThresholdAndDirection) {
  TrainingArguments args = TrainingArguments::parse_args(
      {"--output_dir", "x", "--eval_strategy", "steps", "--metric_for_best_model", "accuracy"});
  ASSERT_TRUE(args.greater_is_better.value());
  EarlyStoppingCallback cb(2, 0.01);
  TrainerState state;
  TrainerControl control;
  auto eval = [&](double accuracy) {
    Metrics m{{"eval_accuracy", accuracy}};
    CallbackContext ctx;
    ctx.metrics = &m;
    cb.on_evaluate(args, state, control, ctx);
    if (!state.best_metric || accuracy > *state.best_metric) state.best_metric = accuracy;  // as the Trainer does
  };
  eval(0.50);
  EXPECT_EQ(cb.early_stopping_patience_counter, 0);
  eval(0.505);  // better, but by less than the threshold
  EXPECT_EQ(cb.early_stopping_patience_counter, 1);
  eval(0.60);  // better by 0.095
  EXPECT_EQ(cb.early_stopping_patience_counter, 0);
  EXPECT_FALSE(control.should_training_stop);
  eval(0.40);
  eval(0.59);
  EXPECT_TRUE(control.should_training_stop);

  // Missing metric: a warning, no change. Missing setup: HF's errors at on_train_begin.
  EarlyStoppingCallback quiet;
  Metrics none{{"eval_loss", 1.0}};
  CallbackContext ctx;
  ctx.metrics = &none;
  TrainerControl c2;
  quiet.on_evaluate(args, state, c2, ctx);
  EXPECT_EQ(quiet.early_stopping_patience_counter, 0);
  TrainingArguments no_eval = TrainingArguments::parse_args({"--output_dir", "x", "--metric_for_best_model", "loss"});
  EXPECT_THROW(quiet.on_train_begin(no_eval, state, c2, {}), InvalidArgument);
  TrainingArguments no_metric = TrainingArguments::parse_args({"--output_dir", "x", "--eval_strategy", "steps"});
  EXPECT_THROW(quiet.on_train_begin(no_metric, state, c2, {}), InvalidArgument);
  EXPECT_THROW(EarlyStoppingCallback(0), InvalidArgument);
}

// The counter is saved in every checkpoint's trainer_state.json (HF's stateful_callbacks) and, with
// restore_callback_states_from_checkpoint, a resumed run stops where the uninterrupted one did.
TEST(Callbacks, EarlyStoppingStateSurvivesResume) {
  const fs::path dir = fresh("cb_early_resume");
  const fs::path model = write_model(dir, false);
  const std::vector<std::string> flags = {
      "--learning_rate", "0", "--max_steps",  "20", "--eval_strategy",          "steps",
      "--eval_steps",    "1", "--save_steps", "1",  "--load_best_model_at_end", "true"};
  auto run = [&](const std::string& resume, bool restore) {
    std::vector<std::string> f = flags;
    f.insert(f.end(), {"--restore_callback_states_from_checkpoint", restore ? "true" : "false"});
    Trainer t(ModelSource::onnx(model.string(), training::LossType::CrossEntropyLoss), args_for(dir / "out", f),
              dataset(8, 1), dataset(4, 2), nullptr, nullptr, {std::make_shared<EarlyStoppingCallback>(3)});
    return t.train(resume).global_step;
  };
  EXPECT_EQ(run("", false), 4);
  std::ifstream in(dir / "out" / "checkpoint-2" / "trainer_state.json");
  const nlohmann::json saved = nlohmann::json::parse(in);
  EXPECT_EQ(saved["stateful_callbacks"]["EarlyStoppingCallback"]["attributes"]["early_stopping_patience_counter"], 1);
  EXPECT_EQ(saved["stateful_callbacks"]["EarlyStoppingCallback"]["args"]["early_stopping_patience"], 3);
  EXPECT_EQ(saved["stateful_callbacks"]["TrainerControl"]["args"]["should_save"], true);
  EXPECT_EQ(saved["best_global_step"], 1);
  const std::string ckpt = (dir / "out" / "checkpoint-2").string();
  EXPECT_EQ(run(ckpt, true), 4);   // counter 1 restored: evaluations 3, 4 reach 3
  EXPECT_EQ(run(ckpt, false), 5);  // HF's default: the callback starts at 0
}

TEST(Callbacks, AddPopRemove) {
  const fs::path dir = fresh("cb_list");
  TrainingArguments a = args_for(dir / "out", {"--report_to", "tensorboard", "--disable_tqdm", "false"});
  Trainer t(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss), a,
            dataset(8, 1));
  auto names = [&] {
    std::vector<std::string> n;
    for (const auto& c : t.callbacks()) n.push_back(c->name());
    return n;
  };
  EXPECT_EQ(names(), (std::vector<std::string>{"DefaultFlowCallback", "TensorBoardCallback", "ProgressCallback"}));
  auto rec = std::make_shared<Recorder>();
  t.add_callback(rec);
  EXPECT_EQ(names().back(), "Recorder");
  EXPECT_EQ(t.pop_callback("ProgressCallback")->name(), "ProgressCallback");
  EXPECT_EQ(t.pop_callback("ProgressCallback"), nullptr);
  EXPECT_EQ(t.pop_callback(rec), rec);
  t.remove_callback("TensorBoardCallback");
  EXPECT_EQ(names(), (std::vector<std::string>{"DefaultFlowCallback"}));
  t.add_callback(std::make_shared<PrinterCallback>());
  t.remove_callback(t.callbacks().back());
  EXPECT_EQ(names().size(), 1u);
  EXPECT_THROW(t.add_callback(nullptr), InvalidArgument);

  TrainingArguments bad = a;
  bad.report_to = {"wandb"};
  expect_error<InvalidArgument>(
      [&] {
        Trainer tb(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss), bad);
      },
      {"'wandb'", "tensorboard"});
}

TEST(Callbacks, PrinterAndLogFormat) {
  EXPECT_EQ(format_logs({{"loss", 0.25}, {"learning_rate", 5e-05}, {"epoch", 1.0}, {"step", 3}}),
            "{'loss': 0.25, 'learning_rate': 5e-05, 'epoch': 1.0, 'step': 3.0}");
  std::FILE* f = std::tmpfile();
  PrinterCallback p(f);
  Logs logs{{"loss", 0.5}, {"total_flos", 1e9}};
  CallbackContext ctx;
  ctx.logs = &logs;
  TrainerControl c;
  p.on_log(TrainingArguments::parse_args({"--output_dir", "x"}), TrainerState{}, c, ctx);
  std::rewind(f);
  char buf[128] = {};
  ASSERT_NE(std::fgets(buf, sizeof buf, f), nullptr);
  EXPECT_STREQ(buf, "{'loss': 0.5}\n");  // total_flos is left out, as HF's printer does
  std::fclose(f);
}

}  // namespace
}  // namespace kiln::trainer
