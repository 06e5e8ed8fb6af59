// `kiln train [--model M] [--loss L] [--train-data D] [--eval-data D] [TrainingArguments flags]`:
// the main job. With no arguments it trains the built-in LeNet on Fashion-MNIST for one epoch,
// evaluates it on the test set and prints the accuracy; checkpoints and logs go to ./kiln_output.
// `kiln evaluate` and `kiln predict` run a trained model (an output folder's checkpoint).
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "core/atomic_file.h"
#include "kiln/error.h"
#include "kiln/hp_search.h"
#include "kiln/metrics.h"
#include "kiln/npy.h"
#include "stop_on_signal.h"
#include "trainer_cli.h"

namespace kiln::cli {
namespace {

struct TrainOptions {
  std::string model = "lenet", loss = "CrossEntropyLoss", train_data = "fashion-mnist:train",
              eval_data = "fashion-mnist:test", label_column = "label", model_config, metrics = "accuracy";
  int64_t pad_token_id = 0;
};

// --metrics: classification metric names, comma-separated, or "none" (a language model's labels
// are not class ids per example).
trainer::ComputeMetrics metrics_of(const std::string& names) {
  if (names == "none" || names.empty()) return nullptr;
  std::vector<std::string> list;
  for (size_t at = 0; at <= names.size();) {
    const size_t comma = std::min(names.find(',', at), names.size());
    list.push_back(names.substr(at, comma - at));
    at = comma + 1;
  }
  return trainer::classification_metrics(list);
}

bool remove_unused_columns(const trainer::TrainingArguments& args) {
  return args.compat("remove_unused_columns").get<bool>();
}

void add_common(CLI::App& app, TrainOptions& o) {
  app.add_option(
         "--model", o.model,
         "A built-in model (the model zoo: mlp, lenet, resnet18, ...), a forward .onnx file or an artifacts folder")
      ->capture_default_str();
  app.add_option("--model-config", o.model_config,
                 "A built-in model's config overrides as JSON, e.g. '{\"num_channels\": 1, \"num_labels\": 10}'");
  app.add_option("--loss", o.loss, "With a .onnx model: CrossEntropyLoss, MSELoss, BCEWithLogitsLoss, L1Loss, none")
      ->capture_default_str();
  app.add_option("--eval-data", o.eval_data,
                 "fashion-mnist:test, IMAGES,LABELS (IDX), FILE.npz, FILE.csv or FILE.jsonl")
      ->capture_default_str();
  app.add_option("--label-column", o.label_column, "The label column of CSV data")->capture_default_str();
  app.add_option("--metrics", o.metrics,
                 "The evaluation's metrics (kiln/metrics.h), comma-separated: accuracy, f1_macro, precision_micro, "
                 "mse, r2, top5_accuracy, ...; or none")
      ->capture_default_str();
  app.add_option("--pad-token-id", o.pad_token_id, "The pad token of JSON Lines data (labels are padded with -100)")
      ->capture_default_str();
  app.allow_extras();  // TrainingArguments flags (--learning_rate 3e-4 ...)
}

void run_train(CLI::App& app, const TrainOptions& o) {
  trainer::TrainingArguments args = cli_training_arguments(app.remaining());
  auto train = load_dataset(o.train_data, o.label_column, o.pad_token_id, remove_unused_columns(args));
  auto eval = load_dataset(o.eval_data, o.label_column, o.pad_token_id, remove_unused_columns(args));
  trainer::Trainer t(model_source(o.model, o.loss, o.model_config), args, train, eval, metrics_of(o.metrics));
  const auto stop = std::make_shared<StopOnSignal>();
  t.add_callback(stop);
  const trainer::TrainOutput out = t.train(args.resume_from_checkpoint.value_or(""));
  if (const int signo = StopOnSignal::received()) {
    fmt::print(stderr,
               "kiln: stopped by {} at step {}: checkpoint saved in {}; resume with "
               "--resume_from_checkpoint true\n",
               strsignal(signo), t.state().global_step, args.output_dir);
    throw ExitStatus{128 + signo};
  }
  t.log_metrics("train", out.metrics);
  if (args.compile_only) return;  // planned, not trained: nothing to evaluate or save
  // Saved before the final evaluation, as Hugging Face's example scripts do: an evaluation that
  // fails (eval data that does not fit the model) loses none of the training. The state is saved
  // again after it, with the evaluation in its log history.
  t.save_model();
  t.save_metrics("train", out.metrics);
  t.save_state();
  const trainer::Metrics metrics = t.evaluate();
  t.log_metrics("eval", metrics);
  t.save_metrics("eval", metrics);
  t.save_state();
  if (auto it = metrics.find("eval_accuracy"); it != metrics.end() && t.state().is_world_process_zero)
    fmt::print("accuracy {:.4f} on {} examples; model and checkpoints in {}\n", it->second, eval->size(),
               args.output_dir);
}

Action setup_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  add_common(app, *o);
  app.add_option("--train-data", o->train_data,
                 "fashion-mnist:train, IMAGES,LABELS (IDX), FILE.npz, FILE.csv or FILE.jsonl")
      ->capture_default_str();
  return [o, &app] { run_train(app, *o); };
}

void run_evaluate(CLI::App& app, const TrainOptions& o, bool predict, const std::string& out_dir) {
  trainer::TrainingArguments args = cli_training_arguments(app.remaining());
  auto data = load_dataset(o.eval_data, o.label_column, o.pad_token_id, remove_unused_columns(args));
  trainer::Trainer t(model_source(o.model, o.loss, o.model_config), args, nullptr, data, metrics_of(o.metrics));
  if (args.resume_from_checkpoint) t.load_model_weights(*args.resume_from_checkpoint);
  if (!predict) {
    t.log_metrics("eval", t.evaluate());
    return;
  }
  const trainer::PredictionOutput p = t.predict(data);
  t.log_metrics("test", p.metrics);
  if (!out_dir.empty() && p.predictions.defined() && t.state().is_world_process_zero) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) throw IOError(fmt::format("cannot create the predictions folder '{}': {}", out_dir, ec.message()));
    save_npy(p.predictions, out_dir + "/predictions.npy");
    fmt::print("wrote {}/predictions.npy\n", out_dir);
  }
}

Action setup_evaluate(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  add_common(app, *o);
  return [o, &app] { run_evaluate(app, *o, false, ""); };
}

Action setup_predict(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto out = std::make_shared<std::string>(".");
  add_common(app, *o);
  app.add_option("--predictions-dir", *out, "Where to write predictions.npy")->capture_default_str();
  return [o, out, &app] { run_evaluate(app, *o, true, *out); };
}

// `kiln hpsearch --hp-space space.json [--n-trials N --direction D --backend random|grid
// --search-seed S] [train's options and TrainingArguments flags]`: Kiln's search (kiln/hp_search.h),
// each trial a `kiln train` run in <output_dir>/run-<n>; the trials and the best run are printed
// and written to <output_dir>/hp_search.json.
struct SearchOptions {
  std::string space;
  trainer::HpSearchOptions search;
};

void run_hpsearch(CLI::App& app, const TrainOptions& o, const SearchOptions& s) {
  const trainer::TrainingArguments args = cli_training_arguments(app.remaining());
  const trainer::HpSpace space = trainer::HpSpace::from_json_file(s.space);
  auto train = load_dataset(o.train_data, o.label_column, o.pad_token_id, remove_unused_columns(args));
  auto eval = load_dataset(o.eval_data, o.label_column, o.pad_token_id, remove_unused_columns(args));
  const auto make = [&](const trainer::TrainingArguments& a) {
    return std::make_unique<trainer::Trainer>(model_source(o.model, o.loss, o.model_config), a, train, eval,
                                              metrics_of(o.metrics));
  };
  const auto report = [](const trainer::HpTrial& t) {
    fmt::print("trial {}: {} objective {:.6g}\n", t.number, t.params.dump(), t.objective);
  };
  const trainer::BestRun best = trainer::hyperparameter_search(make, args, space, s.search, nullptr, report);
  nlohmann::json out = {
      {"best_run", {{"run_id", best.run_id}, {"objective", best.objective}, {"hyperparameters", best.hyperparameters}}},
      {"direction", s.search.direction},
      {"backend", s.search.backend}};
  for (const auto& t : best.trials)
    out["trials"].push_back(
        {{"number", t.number}, {"params", t.params}, {"objective", t.objective}, {"metrics", t.metrics}});
  write_file_atomically((std::filesystem::path(args.output_dir) / "hp_search.json").string(), out.dump(2) + "\n");
  fmt::print("best run {}: {} objective {:.6g}; every trial in {}/hp_search.json\n", best.run_id,
             best.hyperparameters.dump(), best.objective, args.output_dir);
}

Action setup_hpsearch(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto s = std::make_shared<SearchOptions>();
  add_common(app, *o);
  app.add_option("--train-data", o->train_data, "As for kiln train")->capture_default_str();
  app.add_option("--hp-space", s->space,
                 "A JSON file: {\"learning_rate\": {\"type\": \"float\", \"low\": 1e-4, \"high\": 1e-2, \"log\": "
                 "true}, \"per_device_train_batch_size\": [16, 32]}")
      ->required();
  app.add_option("--n-trials", s->search.n_trials, "Trials to run (grid: at most the grid's size)")
      ->capture_default_str();
  app.add_option("--direction", s->search.direction, "minimize or maximize the objective")->capture_default_str();
  app.add_option("--backend", s->search.backend, "random or grid")->capture_default_str();
  app.add_option("--search-seed", s->search.seed, "The random backend's seed")->capture_default_str();
  return [o, s, &app] { run_hpsearch(app, *o, *s); };
}

const CommandRegistrar reg_train(
    {"train",
     "Train a model with the Trainer (default: LeNet on Fashion-MNIST); every "
     "TrainingArguments field is a flag too (--learning_rate 3e-4, --report_to tensorboard ...)",
     setup_train});
const CommandRegistrar reg_evaluate({"evaluate", "Evaluate a model (with --resume_from_checkpoint DIR: a checkpoint)",
                                     setup_evaluate});
const CommandRegistrar reg_hpsearch(
    {"hpsearch",
     "Search hyperparameters (random or grid) over kiln train runs in <output_dir>/run-<n>; the objective is HF's "
     "default (eval_loss alone, else the sum of the other eval metrics)",
     setup_hpsearch});
const CommandRegistrar reg_predict({"predict", "Predict with a model and write predictions.npy", setup_predict});

}  // namespace
}  // namespace kiln::cli
