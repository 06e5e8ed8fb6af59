// The Trainer: accumulation equivalence, exact resume after SIGKILL at random moments, checkpoint
// folders (complete or absent, rotation keeping the best), and the non-finite-loss stop.
#include "kiln/trainer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "graph_builder.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/safetensors.h"
#include "test_util.h"
#include "trainer/loop/checkpoint_folder.h"
#include "trainer/trainer_fixtures.h"

namespace kiln::trainer {
namespace {
using namespace kiln::trainer::testing;

namespace fs = std::filesystem;
using kiln::test::expect_error;

std::vector<float> weights(Trainer& t) {
  std::vector<float> all;
  for (const auto& name : t.module().parameter_names()) {
    const Tensor& d = t.checkpoint_state().parameter(name).data();
    all.insert(all.end(), d.data<float>(), d.data<float>() + d.numel());
  }
  return all;
}

std::vector<double> logged_losses(const TrainerState& s) {
  std::vector<double> l;
  for (const auto& e : s.log_history)
    if (e.contains("loss")) l.push_back(e["loss"].get<double>());
  return l;
}

TEST(Trainer, AccumulationOf4x8EqualsOneBatchOf32) {
  const fs::path dir = fresh("accum");
  const fs::path model = write_model(dir, false);
  auto data = dataset(64, 1);
  std::vector<std::vector<float>> results;
  for (auto [batch, accum] : {std::pair{32, 1}, std::pair{8, 4}}) {
    TrainingArguments a = base_args(dir / fmt::format("out{}", batch));
    a.per_device_train_batch_size = batch;
    a.gradient_accumulation_steps = accum;
    a.num_train_epochs = 3;
    a.max_grad_norm = 0;
    Trainer t(ModelSource::onnx(model.string(), training::LossType::CrossEntropyLoss), a, data);
    t.train();
    EXPECT_EQ(t.state().global_step, 6);
    results.push_back(weights(t));
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_NEAR(results[0][i], results[1][i], 1e-5) << i;
}

// `kiln train` runs with a checkpoint after every update; the test kills it at random moments
// and starts it again with --resume_from_checkpoint true until the run completes. The logged
// losses and the final weights must equal an uninterrupted run's bit for bit. (Separate processes:
// a forked child of this multi-threaded test could not use OpenMP.)
void write_csv(const fs::path& path, const data::TensorDataset& d) {
  std::ofstream f(path);
  f << "f0,f1,f2,f3,f4,f5,label\n";
  const Tensor& x = d.column("input");
  const Tensor& y = d.column("labels");
  f.precision(9);
  for (int64_t i = 0; i < y.numel(); ++i) {
    for (int k = 0; k < 6; ++k) f << x.data<float>()[i * 6 + k] << ",";
    f << y.data<int64_t>()[i] << "\n";
  }
}

constexpr const char* kKilnBinary = KILN_BINARY_DIR "/bin/kiln";

pid_t start_kiln_train(const fs::path& model, const fs::path& csv, const fs::path& out, bool resume,
                       const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {kKilnBinary,
                                   "train",
                                   "--model",
                                   model.string(),
                                   "--train-data",
                                   csv.string(),
                                   "--eval-data",
                                   csv.string(),
                                   "--output_dir",
                                   out.string(),
                                   "--learning_rate",
                                   "0.01",
                                   "--logging_steps",
                                   "1",
                                   "--per_device_train_batch_size",
                                   "4",
                                   "--gradient_accumulation_steps",
                                   "2",
                                   "--num_train_epochs",
                                   "3",
                                   "--save_steps",
                                   "1",
                                   "--lr_scheduler_type",
                                   "cosine",
                                   "--warmup_steps",
                                   "2",
                                   "--report_to",
                                   "none",
                                   "--disable_tqdm",
                                   "true",
                                   "--dataloader_drop_last",
                                   "false"};
  if (resume) argv.insert(argv.end(), {"--resume_from_checkpoint", "true"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

std::pair<std::vector<double>, std::vector<float>> finished_run(const fs::path& out) {
  std::ifstream f(out / kTrainerStateFile);
  const TrainerState s = TrainerState::from_json(nlohmann::json::parse(f));
  const SafetensorsFile w = read_safetensors((out / "model.safetensors").string());
  std::vector<float> all;
  for (const auto& [name, t] : w.tensors) all.insert(all.end(), t.data<float>(), t.data<float>() + t.numel());
  return {logged_losses(s), all};
}

// `extra` arguments: fp16 (whose data has one overflowing update), or none.
void expect_exact_resume_after_sigkills(const std::string& name, const data::TensorDataset& data,
                                        const std::vector<std::string>& extra, size_t updates) {
  ASSERT_TRUE(fs::exists(kKilnBinary)) << kKilnBinary << " is missing: build the kiln_cli target";
  const fs::path dir = fresh(name);
  const fs::path model = write_model(dir, true);
  write_csv(dir / "data.csv", data);  // batch 4, accumulation 2: 5 updates per epoch
  auto wait = [](pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const int straight = wait(start_kiln_train(model, dir / "data.csv", dir / "straight", false, extra));
  ASSERT_TRUE(WIFEXITED(straight) && WEXITSTATUS(straight) == 0);
  double run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto [want_losses, want_weights] = finished_run(dir / "straight");
  ASSERT_EQ(want_losses.size(), updates);

  // Kills land anywhere in a run's time: while it sets up, mid-accumulation, mid-epoch, at epoch
  // boundaries and while it saves.
  const fs::path out = dir / "killed";
  std::mt19937_64 rng(1234);
  int kills = 0, progressed = 0;
  bool done = false;
  // Until 20 kills and 5 of them after the run moved on: under a sanitizer, start-up takes most of
  // a run's time, and more of the kills land before its first checkpoint.
  for (int round = 0; round < 300 && !(done && kills >= 20 && progressed >= 5); ++round) {
    if (done) {  // finished early: start over, so that every round kills a live run
      fs::remove_all(out);
      done = false;
    }
    const auto before = last_checkpoint(out.string());
    const auto started = std::chrono::steady_clock::now();
    const pid_t pid = start_kiln_train(model, dir / "data.csv", out, before.has_value(), extra);
    ::usleep(static_cast<useconds_t>(1000.0 * run_ms * static_cast<double>(rng() % 1000) / 1000.0));
    ::kill(pid, SIGKILL);
    const int status = wait(pid);
    if (WIFEXITED(status))  // it outran the kill: aim within its own (shorter) run time from now on
      run_ms = std::min(run_ms,
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    const auto after = last_checkpoint(out.string());
    if (after && after != before) ++progressed;
    if (WIFSIGNALED(status)) ++kills;
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) done = true;
    else FAIL() << "kiln train failed with status " << status;
  }
  EXPECT_GE(kills, 20);
  EXPECT_GE(progressed, 5) << "the kills came too early for the run to move between them";
  if (!done) {
    const auto before = last_checkpoint(out.string());
    const int status = wait(start_kiln_train(model, dir / "data.csv", out, before.has_value(), extra));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto [losses, weights_after] = finished_run(out);
  EXPECT_EQ(losses, want_losses);
  EXPECT_EQ(weights_after, want_weights);
}

TEST(Trainer, ResumeAfterSigkillIsExact) {
  expect_exact_resume_after_sigkills("resume", *dataset(40, 2), {}, 15);  // 3 epochs
}

// Resuming from each checkpoint of a run — mid-epoch, at the epoch boundaries (steps 5 and 10),
// at the last step — gives the uninterrupted run's losses and weights bit for bit.
TEST(Trainer, ResumeFromEveryCheckpointIsExact) {
  ASSERT_TRUE(fs::exists(kKilnBinary)) << kKilnBinary << " is missing: build the kiln_cli target";
  const fs::path dir = fresh("resume_each");
  const fs::path model = write_model(dir, true);
  write_csv(dir / "data.csv", *dataset(40, 2));
  auto wait = [](pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  ASSERT_TRUE(wait(start_kiln_train(model, dir / "data.csv", dir / "straight", false)));
  const auto want = finished_run(dir / "straight");
  const auto checkpoints = sorted_checkpoints((dir / "straight").string());
  ASSERT_EQ(checkpoints.size(), 15u);
  for (const auto& ckpt : checkpoints) {
    const fs::path out = dir / ("from_" + fs::path(ckpt).filename().string());
    fs::create_directories(out);
    fs::copy(ckpt, out / fs::path(ckpt).filename(), fs::copy_options::recursive);
    ASSERT_TRUE(wait(start_kiln_train(model, dir / "data.csv", out, true))) << ckpt;
    const auto got = finished_run(out);
    EXPECT_EQ(got.first, want.first) << "losses after resuming from " << ckpt;
    EXPECT_EQ(got.second, want.second) << "weights after resuming from " << ckpt;
  }
}

// HF's `optimizers` override: the source's optimizer replaces TrainingArguments.optim, and a
// scheduler factory replaces lr_scheduler_type.
TEST(Trainer, OptimizerAndSchedulerOverrides) {
  const fs::path dir = fresh("override");
  ModelSource source = ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss);
  source.optimizer = training::OptimType::SGD;
  source.sgd.momentum = 0.9f;
  TrainingArguments a = base_args(dir / "out");
  a.per_device_train_batch_size = 8;
  a.max_steps = 4;
  Trainer t(source, a, dataset(32, 4));
  int made = 0;
  t.set_scheduler_factory([&](double base_lr, int64_t warmup, int64_t total) {
    ++made;
    EXPECT_EQ(total, 4);
    (void)warmup;
    return make_lr_scheduler("constant", base_lr / 2, 0, total);
  });
  t.train();
  EXPECT_EQ(made, 1);
  const training::OptimizerState& o = t.checkpoint_state().optimizer_state();
  EXPECT_EQ(o.type, "SGD");
  EXPECT_EQ(o.step, 4);
  EXPECT_TRUE(o.slots.count("momentum_buffer"));
  for (const auto& e : t.state().log_history) {
    if (e.contains("learning_rate")) {
      EXPECT_DOUBLE_EQ(e["learning_rate"].get<double>(), 0.005);
    }
  }
}

// Evaluation during training, the best checkpoint kept through rotation and loaded at the end,
// named eval sets, predict, and the metric hooks.
TEST(Trainer, EvaluationBestModelAndMetricHooks) {
  const fs::path dir = fresh("eval");
  const ModelSource source = ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss);
  TrainingArguments a = TrainingArguments::parse_args({"--output_dir",
                                                       (dir / "out").string(),
                                                       "--learning_rate",
                                                       "0.05",
                                                       "--per_device_train_batch_size",
                                                       "8",
                                                       "--num_train_epochs",
                                                       "4",
                                                       "--eval_strategy",
                                                       "steps",
                                                       "--eval_steps",
                                                       "2",
                                                       "--save_steps",
                                                       "2",
                                                       "--save_total_limit",
                                                       "1",
                                                       "--load_best_model_at_end",
                                                       "true",
                                                       "--metric_for_best_model",
                                                       "accuracy",
                                                       "--logging_steps",
                                                       "2",
                                                       "--report_to",
                                                       "none"});
  auto train = dataset(32, 5), eval = dataset(24, 6);
  int preprocessed = 0;
  auto accuracy = [](const EvalPrediction& p) {
    const Tensor& y = p.label_ids;
    int64_t right = 0;
    for (int64_t i = 0; i < y.numel(); ++i) right += p.predictions.data<int64_t>()[i] == y.data<int64_t>()[i] ? 1 : 0;
    return Metrics{{"accuracy", static_cast<double>(right) / static_cast<double>(y.numel())}};
  };
  auto argmax = [&](const Tensor& logits, const Tensor& labels) {
    ++preprocessed;
    EXPECT_EQ(labels.dim(0), logits.dim(0));
    Tensor out = Tensor::empty(DType::Int64, {logits.dim(0)});
    for (int64_t i = 0; i < logits.dim(0); ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < logits.dim(1); ++k)
        if (logits.data<float>()[i * 3 + k] > logits.data<float>()[i * 3 + best]) best = k;
      out.data<int64_t>()[i] = best;
    }
    return out;
  };
  Trainer t(source, a, train, eval, accuracy, argmax);
  t.train();
  EXPECT_GT(preprocessed, 0);
  ASSERT_TRUE(t.state().best_metric.has_value());
  ASSERT_TRUE(t.state().best_model_checkpoint.has_value());
  // save_total_limit 1 keeps the best checkpoint (and the last one, as HF does).
  const auto left = sorted_checkpoints((dir / "out").string());
  EXPECT_LE(left.size(), 2u);
  bool best_kept = false;
  for (const auto& c : left)
    best_kept = best_kept || fs::path(c).filename() == fs::path(*t.state().best_model_checkpoint).filename();
  EXPECT_TRUE(best_kept);
  // The best weights are loaded at the end: evaluating gives the best accuracy.
  const Metrics now = t.evaluate();
  EXPECT_DOUBLE_EQ(now.at("eval_accuracy"), *t.state().best_metric);
  const Metrics named =
      t.evaluate(std::map<std::string, std::shared_ptr<const data::Dataset>>{{"a", eval}, {"b", train}});
  EXPECT_TRUE(named.count("eval_a_accuracy") && named.count("eval_b_accuracy") && named.count("eval_a_loss"));
  EXPECT_DOUBLE_EQ(named.at("eval_a_accuracy"), now.at("eval_accuracy"));
  const PredictionOutput p = t.predict(eval);
  EXPECT_EQ(p.predictions.dim(0), 24);
  EXPECT_EQ(p.label_ids.dim(0), 24);
  EXPECT_DOUBLE_EQ(p.metrics.at("test_accuracy"), now.at("eval_accuracy"));
}

TEST(Trainer, MetricsOfATrainingRun) {
  const fs::path dir = fresh("metrics");
  TrainingArguments a = base_args(dir / "out");
  a.per_device_train_batch_size = 8;
  a.max_steps = 3;
  a.skip_memory_metrics = false;
  Trainer t(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss), a,
            dataset(32, 7));
  const TrainOutput out = t.train();
  for (const char* key : {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
                          "train_loss", "epoch", "train_mem_cpu_alloc_delta", "train_mem_cpu_peaked_delta"})
    EXPECT_TRUE(out.metrics.count(key)) << key;
  // HF's estimate: 6 * parameters * examples (no input_ids), summed over the 3 batches of 8.
  const double params = static_cast<double>(t.module().get_parameters_size(false));
  EXPECT_DOUBLE_EQ(out.metrics.at("total_flos"), 6 * params * 24);
  EXPECT_EQ(out.global_step, 3);
  data::DataLoader loader(dataset(32, 7), 8);
  EXPECT_EQ(t.num_examples(loader), 32);
}

// HF's predict on unlabelled data: the same predictions as with labels, no loss, no label_ids.
TEST(Trainer, PredictWithoutLabels) {
  const fs::path dir = fresh("predict_unlabelled");
  TrainingArguments a = base_args(dir / "out");
  a.max_steps = 3;
  Trainer t(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss), a,
            dataset(32, 7));
  t.train();
  const auto labelled = dataset(10, 9);
  auto unlabelled =
      std::make_shared<data::TensorDataset>(std::map<std::string, Tensor>{{"input", labelled->column("input")}});
  const PredictionOutput with = t.predict(labelled);
  const PredictionOutput without = t.predict(unlabelled);
  ASSERT_TRUE(without.predictions.defined());
  EXPECT_FALSE(without.label_ids.defined());
  EXPECT_TRUE(with.metrics.count("test_loss"));
  EXPECT_FALSE(without.metrics.count("test_loss"));
  ASSERT_EQ(without.predictions.shape(), with.predictions.shape());
  for (int64_t i = 0; i < with.predictions.numel(); ++i)
    EXPECT_NEAR(without.predictions.data<float>()[i], with.predictions.data<float>()[i], 1e-6);
}

// save_only_model: checkpoints hold the model (and the state files), not the optimizer; training
// cannot resume from them (a clear error), their weights load; "true" names the last checkpoint.
TEST(Trainer, SaveOnlyModelCheckpoints) {
  const fs::path dir = fresh("save_only_model");
  TrainingArguments a = base_args(dir / "out");
  a.max_steps = 4;
  a.save_strategy = SaveStrategy::steps;
  a.save_steps = 2;
  a.save_only_model = true;
  Trainer t(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss), a,
            dataset(32, 7));
  t.train();
  const fs::path ckpt = dir / "out" / "checkpoint-4";
  EXPECT_TRUE(fs::exists(ckpt / "model.safetensors"));
  EXPECT_TRUE(fs::exists(ckpt / "trainer_state.json"));
  EXPECT_FALSE(fs::exists(ckpt / "optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt / "scheduler.json"));
  expect_error<InvalidArgument>([&] { t.train(ckpt.string()); }, "save_only_model");
  // The weights of the last checkpoint ("TRUE": any case) load into a fresh Trainer.
  Trainer u(ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss), a,
            dataset(32, 7));
  u.load_model_weights("TRUE");
  EXPECT_EQ(weights(u), weights(t));
}

TEST(Trainer, BadSetupsAreClearErrors) {
  const fs::path dir = fresh("errors");
  const ModelSource source = ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss);
  TrainingArguments a = base_args(dir / "out");
  a.max_steps = 1;
  expect_error<InvalidArgument>([&] { Trainer(source, a).train(); }, "needs a train_dataset");
  auto renamed = std::make_shared<data::TensorDataset>(std::map<std::string, Tensor>{
      {"features", dataset(8, 1)->column("input")}, {"labels", dataset(8, 1)->column("labels")}});
  expect_error<InvalidArgument>([&] { Trainer(source, a, renamed).train(); }, {"input 'input'", "features"});
  TrainingArguments b = base_args(dir / "out2");
  b.max_steps = 2;
  b.eval_strategy = IntervalStrategy::steps;
  b.eval_steps = 1;
  b.metric_for_best_model = "f1";
  expect_error<InvalidArgument>([&] { Trainer(source, b, dataset(8, 1), dataset(8, 2)).train(); },
                                "'eval_f1' is not among the eval metrics");
  TrainingArguments c = base_args(dir / "out3");
  c.label_smoothing_factor = 0.1;
  expect_error<InvalidArgument>(
      [&] { Trainer(ModelSource::onnx(write_model(dir, false).string(), training::LossType::MSELoss), c); },
      "label_smoothing_factor");
}

TEST(Trainer, AutoResumeIgnoresIncompleteAndTemporaryFolders) {
  const fs::path dir = fresh("incomplete");
  fs::create_directories(dir / "checkpoint-3");
  std::ofstream(dir / "checkpoint-3" / kTrainerStateFile) << "{}";
  fs::create_directories(dir / "checkpoint-9");  // no trainer_state.json: incomplete
  fs::create_directories(dir / ".checkpoint-12.tmp-abc123");
  ASSERT_TRUE(last_checkpoint(dir.string()).has_value());
  EXPECT_EQ(fs::path(*last_checkpoint(dir.string())).filename(), "checkpoint-3");
}

TEST(Trainer, RotationKeepsTheBestCheckpoint) {
  const fs::path dir = fresh("rotate");
  for (int s : {1, 2, 3, 4, 5}) {
    fs::create_directories(dir / fmt::format("checkpoint-{}", s));
    std::ofstream(dir / fmt::format("checkpoint-{}", s) / kTrainerStateFile) << "{}";
  }
  rotate_checkpoints(dir.string(), 2, (dir / "checkpoint-2").string());
  std::vector<std::string> left;
  for (const auto& p : sorted_checkpoints(dir.string())) left.push_back(fs::path(p).filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"checkpoint-2", "checkpoint-5"}));
}

TEST(Trainer, NonFiniteLossStopsAfterPatienceAndKeepsTheLastGoodCheckpoint) {
  const fs::path dir = fresh("nan");
  const fs::path model = write_model(dir, false);
  auto make_args = [&](double epochs) {
    TrainingArguments a = base_args(dir / "out");
    a.per_device_train_batch_size = 8;
    a.save_strategy = SaveStrategy::steps;
    a.save_steps = 1;
    a.nan_inf_patience = 2;
    a.num_train_epochs = epochs;
    return a;
  };
  {  // one good epoch: 4 updates, a checkpoint after each
    Trainer t(ModelSource::onnx(model.string(), training::LossType::CrossEntropyLoss), make_args(1), dataset(32, 3));
    t.train();
  }
  // The same run continued on data whose inputs are all NaN: the loss is not finite from step 5.
  auto bad = dataset(32, 3);
  Tensor xs = bad->column("input");
  for (int64_t i = 0; i < xs.numel(); ++i) xs.data<float>()[i] = std::nanf("");
  Trainer t(ModelSource::onnx(model.string(), training::LossType::CrossEntropyLoss), make_args(2), bad);
  expect_error<InvalidArgument>([&] { t.train("true"); }, "training stopped at step 6");  // NaN data stops training
  for (const auto& e : t.state().log_history) {  // logging_nan_inf_filter: no non-finite loss logged
    if (e.contains("loss")) {
      EXPECT_TRUE(std::isfinite(e["loss"].get<double>())) << e.dump();
    }
  }
  const auto last = last_checkpoint((dir / "out").string());
  ASSERT_TRUE(last.has_value());
  const SafetensorsFile w = read_safetensors((fs::path(*last) / "model.safetensors").string());
  for (const auto& [name, tensor] : w.tensors)
    for (int64_t i = 0; i < tensor.numel(); ++i) ASSERT_TRUE(std::isfinite(tensor.data<float>()[i])) << name;
}

// fp16's loss scaling: the inputs scaled to 1/100 keep every scaled gradient (x 65536) inside
// float16's range, except those of the batch holding example `big`, multiplied by 1e5 (its first
// layer's weight gradient passes 65504).
std::shared_ptr<data::TensorDataset> fp16_dataset(int64_t n, int64_t big) {
  const auto base = dataset(n, 2);
  Tensor x = base->column("input").clone();
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= (i / 6 == big) ? 1000.f : 0.01f;
  return std::make_shared<data::TensorDataset>(
      std::map<std::string, Tensor>{{"input", x}, {"labels", base->column("labels")}});
}

struct OptimizerSteps : TrainerCallback {
  std::vector<int64_t> steps;  // the global step each optimizer update made
  void on_optimizer_step(const TrainingArguments&, const TrainerState& s, TrainerControl&,
                         const CallbackContext&) override {
    steps.push_back(s.global_step + 1);
  }
};

// The one update whose scaled gradients overflow float16 is skipped (no optimizer step, the
// weights unchanged), the scale halves once, every other update runs, and scaler.json records it.
TEST(TrainerFp16, AnOverflowingStepIsSkippedAndHalvesTheScale) {
  const fs::path dir = fresh("fp16_overflow");
  const ModelSource source = ModelSource::onnx(write_model(dir, false).string(), training::LossType::CrossEntropyLoss);
  TrainingArguments a = base_args(dir / "out");
  a.fp16 = true;
  a.per_device_train_batch_size = 4;
  a.num_train_epochs = 1;
  a.save_strategy = SaveStrategy::epoch;
  auto steps = std::make_shared<OptimizerSteps>();
  Trainer t(source, a, fp16_dataset(32, 13), nullptr, nullptr, nullptr, {steps});
  EXPECT_EQ(t.module().mixed_precision(), "fp16");
  EXPECT_FLOAT_EQ(t.module().loss_scale(), 65536.f);
  t.train();
  ASSERT_EQ(steps->steps.size(), 7u) << "8 updates, one skipped";
  int64_t skipped = 0;
  for (int64_t s = 1; s <= 8; ++s)
    if (std::find(steps->steps.begin(), steps->steps.end(), s) == steps->steps.end()) skipped = s;
  EXPECT_EQ(t.checkpoint_state().optimizer_state().step, 7);
  EXPECT_FLOAT_EQ(t.module().loss_scale(), 32768.f);
  std::ifstream f(dir / "out" / "checkpoint-8" / "scaler.json");
  const nlohmann::json scaler = nlohmann::json::parse(f);
  EXPECT_EQ(scaler["scale"], 32768.0);
  EXPECT_EQ(scaler["_growth_tracker"], 8 - skipped);  // the finite updates since the skip
  for (const auto& e : t.state().log_history)
    if (e.contains("loss")) {
      EXPECT_TRUE(std::isfinite(e["loss"].get<double>()));
    }
  // A checkpoint without the scaler's state cannot resume an fp16 run.
  fs::remove(dir / "out" / "checkpoint-8" / "scaler.json");
  Trainer again(source, a, fp16_dataset(32, 13));
  expect_error<CorruptFile>([&] { again.train((dir / "out" / "checkpoint-8").string()); }, "has no scaler.json");
}

// SIGKILLs at random moments of an fp16 run with a skipped update: the scaler's state is in every
// checkpoint, and the resumed run ends with the uninterrupted run's losses and weights.
TEST(TrainerFp16, ResumeAfterSigkillIsExactWithTheScalerState) {
  expect_exact_resume_after_sigkills("fp16_kills", *fp16_dataset(40, 13), {"--fp16", "true", "--num_train_epochs", "2"},
                                     10);
}

// Resuming an fp16 run (with its skipped update) from each checkpoint gives the uninterrupted run's
// losses and weights bit for bit: the scaler's scale and growth tracker come back from scaler.json.
TEST(TrainerFp16, ResumeFromEveryCheckpointIsExactWithTheScalerState) {
  ASSERT_TRUE(fs::exists(kKilnBinary)) << kKilnBinary << " is missing: build the kiln_cli target";
  const fs::path dir = fresh("fp16_resume");
  const fs::path model = write_model(dir, true);
  write_csv(dir / "data.csv", *fp16_dataset(40, 13));
  const std::vector<std::string> fp16 = {"--fp16", "true", "--num_train_epochs", "1"};
  auto wait = [](pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  ASSERT_TRUE(wait(start_kiln_train(model, dir / "data.csv", dir / "straight", false, fp16)));
  const auto want = finished_run(dir / "straight");
  const auto checkpoints = sorted_checkpoints((dir / "straight").string());
  ASSERT_EQ(checkpoints.size(), 5u);
  std::ifstream f(fs::path(checkpoints.back()) / "scaler.json");
  EXPECT_EQ(nlohmann::json::parse(f)["scale"], 32768.0) << "the run has one overflowing update";
  for (const auto& ckpt : checkpoints) {
    const fs::path out = dir / ("from_" + fs::path(ckpt).filename().string());
    fs::create_directories(out);
    fs::copy(ckpt, out / fs::path(ckpt).filename(), fs::copy_options::recursive);
    ASSERT_TRUE(wait(start_kiln_train(model, dir / "data.csv", out, true, fp16))) << ckpt;
    const auto got = finished_run(out);
    EXPECT_EQ(got.first, want.first) << "losses after resuming from " << ckpt;
    EXPECT_EQ(got.second, want.second) << "weights after resuming from " << ckpt;
  }
}

}  // namespace
}  // namespace kiln::trainer
