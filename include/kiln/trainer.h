// Trainer: the Hugging Face Trainer's loop in C++ over Kiln's training API, with HF's names.
//
//   kiln::trainer::TrainingArguments args = kiln::trainer::TrainingArguments::parse_args(argv);
//   kiln::trainer::Trainer trainer(kiln::trainer::ModelSource::builtin("lenet"), args, train, eval);
//   trainer.train();                       // or train("true") to resume from the last checkpoint
//   auto metrics = trainer.evaluate();     // {"eval_loss": ..., "eval_accuracy": ...}
//
// Checkpoints follow HF's layout: output_dir/checkpoint-<global_step>/ holding model.safetensors,
// optimizer.safetensors, scheduler.json, rng_state.json, trainer_state.json and
// training_args.json. A folder is written under a temporary name and renamed when complete, so it
// is complete or absent; resuming restores weights, optimizer, scheduler, data order and Dropout
// masks, and continues bit for bit as if the run had not stopped.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/data.h"
#include "kiln/lr_schedulers.h"
#include "kiln/training.h"
#include "kiln/training_args.h"

namespace kiln::trainer {

using Metrics = std::map<std::string, double>;

// What to train: an ONNX forward model plus a loss (Kiln generates the artifacts), an artifacts
// folder, or a built-in model by name ("mlp", "lenet").
struct ModelSource {
  enum class Kind { Onnx, Artifacts, Builtin };
  Kind kind = Kind::Builtin;
  std::string path_or_name;
  training::LossType loss = training::LossType::CrossEntropyLoss;  // for Onnx
  std::vector<std::string> frozen_params;                         // for Onnx / Builtin
  std::string logits_output;  // the output that predictions come from (default: the model's first)
  // HF's `optimizers` argument, the optimizer half: an optimizer (type and hyperparameters) used
  // instead of the one TrainingArguments.optim describes. The schedule half is
  // Trainer::set_scheduler_factory.
  std::optional<training::OptimType> optimizer;
  training::AdamWOptions adamw;
  training::SGDOptions sgd;

  static ModelSource onnx(std::string path, training::LossType loss);
  static ModelSource artifacts(std::string dir);
  static ModelSource builtin(std::string name);
  static std::vector<std::string> builtin_names();
};

struct EvalPrediction {
  Tensor predictions;  // the logits (or what preprocess_logits_for_metrics made of them), stacked
  Tensor label_ids;
};
using ComputeMetrics = std::function<Metrics(const EvalPrediction&)>;
using PreprocessLogits = std::function<Tensor(const Tensor& logits, const Tensor& labels)>;

// HF's TrainerState: saved as trainer_state.json in every checkpoint.
struct TrainerState {
  double epoch = 0;
  int64_t global_step = 0;
  int64_t max_steps = 0;
  int64_t logging_steps = 500;
  int64_t eval_steps = 500;
  int64_t save_steps = 500;
  int64_t train_batch_size = 0;
  int64_t num_train_epochs = 0;
  int64_t num_input_tokens_seen = 0;
  double total_flos = 0;
  std::vector<nlohmann::json> log_history;
  std::optional<double> best_metric;
  std::optional<std::string> best_model_checkpoint;
  bool is_local_process_zero = true;
  bool is_world_process_zero = true;
  bool is_hyper_param_search = false;

  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& j);
};

struct TrainOutput {
  int64_t global_step = 0;
  double training_loss = 0;
  Metrics metrics;
};

struct PredictionOutput {
  Tensor predictions;
  Tensor label_ids;
  Metrics metrics;
};

class Trainer {
 public:
  Trainer(ModelSource model, TrainingArguments args, std::shared_ptr<const data::Dataset> train_dataset = nullptr,
          std::shared_ptr<const data::Dataset> eval_dataset = nullptr, ComputeMetrics compute_metrics = nullptr,
          PreprocessLogits preprocess_logits_for_metrics = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // resume_from_checkpoint: empty (none), "true" (the last complete checkpoint in output_dir), or a
  // checkpoint folder.
  TrainOutput train(const std::string& resume_from_checkpoint = "");
  Metrics evaluate(std::shared_ptr<const data::Dataset> eval_dataset = nullptr,
                   const std::string& metric_key_prefix = "eval");
  // One evaluation per named dataset: metrics prefixed "eval_<name>_".
  Metrics evaluate(const std::map<std::string, std::shared_ptr<const data::Dataset>>& eval_datasets);
  PredictionOutput predict(std::shared_ptr<const data::Dataset> test_dataset,
                           const std::string& metric_key_prefix = "test");

  // Writes an ONNX inference model (model.onnx) and the weights (model.safetensors) to `dir`
  // (default output_dir).
  void save_model(const std::string& dir = "") const;
  void save_state() const;  // trainer_state.json in output_dir
  // Loads the weights of a checkpoint folder (its model.safetensors) into the model.
  void load_model_weights(const std::string& checkpoint_folder);
  void log_metrics(const std::string& split, const Metrics& metrics) const;  // a table on stdout
  void save_metrics(const std::string& split, const Metrics& metrics, bool combined = true) const;

  int64_t num_examples(const data::DataLoader& loader) const;
  // HF's estimate: 6 * parameters * tokens (tokens: elements of "input_ids" when the batch has
  // them, else the number of examples).
  double floating_point_ops(const data::Example& batch) const;

  const TrainerState& state() const { return state_; }
  const TrainingArguments& args() const { return args_; }
  training::Module& module();
  training::CheckpointState& checkpoint_state();

  // Overrides of the optimizer's learning-rate schedule (HF's `optimizers` argument): a scheduler
  // built from the optimizer's base learning rate, the warm-up steps and the total steps.
  using SchedulerFactory =
      std::function<std::unique_ptr<LRScheduler>(double base_lr, int64_t warmup, int64_t total)>;
  void set_scheduler_factory(SchedulerFactory factory);

  // Called after every optimizer update with the state and the step's loss (progress display;
  // the full callback system of the Hugging Face Trainer is not there yet).
  using StepListener = std::function<void(const TrainerState&, double loss)>;
  void set_step_listener(StepListener listener);

  struct Impl;  // the Trainer's internals (src/trainer/trainer_impl.h)

 private:
  std::unique_ptr<Impl> impl_;
  TrainingArguments args_;
  TrainerState state_;
};

}  // namespace kiln::trainer
