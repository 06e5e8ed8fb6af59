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
#include "kiln/trainer_callback.h"
#include "kiln/trainer_state.h"
#include "kiln/training.h"
#include "kiln/training_args.h"

namespace kiln::trainer {

// What to train: an ONNX forward model plus a loss (Kiln generates the artifacts), an artifacts
// folder, or a built-in model by name: a model zoo entry ("mlp", "lenet", "resnet18", ...; see
// kiln/nn/zoo.h) with its config overrides ({"num_channels": 1, "num_labels": 10}).
struct ModelSource {
  enum class Kind { Onnx, Artifacts, Builtin };
  Kind kind = Kind::Builtin;
  std::string path_or_name;
  training::LossType loss = training::LossType::CrossEntropyLoss;  // for Onnx
  std::vector<std::string> frozen_params;                          // for Onnx / Builtin
  std::string logits_output;  // the output that predictions come from (default: the model's first)
  nlohmann::json model_config = nlohmann::json::object();  // for Builtin: overrides of the zoo config
  // HF's `optimizers` argument, the optimizer half: an optimizer (type and hyperparameters) used
  // instead of the one TrainingArguments.optim describes. The schedule half is
  // Trainer::set_scheduler_factory.
  std::optional<training::OptimType> optimizer;
  training::AdamWOptions adamw;
  training::SGDOptions sgd;
  training::LambOptions lamb;
  training::AdagradOptions adagrad;
  training::AdafactorOptions adafactor;
  // With `optimizer`: the parameters updated without weight decay (a torch optimizer's groups whose
  // weight_decay is 0); none: HF's rule (biases and LayerNorm weights).
  std::optional<std::vector<std::string>> no_weight_decay;
  // With `optimizer`: its learning rate (a torch optimizer's), the schedule's base instead of
  // TrainingArguments.learning_rate.
  std::optional<double> learning_rate;
  double base_learning_rate(const TrainingArguments& args) const { return learning_rate.value_or(args.learning_rate); }

  static ModelSource onnx(std::string path, training::LossType loss);
  static ModelSource artifacts(std::string dir);
  static ModelSource builtin(std::string name);
  static ModelSource builtin(std::string name, nlohmann::json model_config);
  static std::vector<std::string> builtin_names();
};

struct EvalPrediction {
  Tensor predictions;  // the logits (or what preprocess_logits_for_metrics made of them), stacked
  Tensor label_ids;
  // include_for_metrics "inputs": the model's main input (input_ids when it takes them, else its
  // first input that is not a label), stacked and padded with -100 as predictions are.
  Tensor inputs;
  // include_for_metrics "loss": each example's batch loss (HF repeats a batch's loss per example).
  Tensor losses;
};
using ComputeMetrics = std::function<Metrics(const EvalPrediction&)>;
using PreprocessLogits = std::function<Tensor(const Tensor& logits, const Tensor& labels)>;

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

// One batch through the eval model (Trainer::prediction_step).
struct PredictionStep {
  double loss = 0;
  Tensor logits;  // undefined under prediction_loss_only, or when the model has no output besides its loss
  Tensor labels;  // undefined when the batch has no label column
};

class Trainer {
 public:
  // The callbacks are HF's: DefaultFlowCallback, then the report_to integrations, then
  // `callbacks`, then ProgressCallback (PrinterCallback when disable_tqdm). on_init_end is called
  // before the constructor returns.
  Trainer(ModelSource model, TrainingArguments args, std::shared_ptr<const data::Dataset> train_dataset = nullptr,
          std::shared_ptr<const data::Dataset> eval_dataset = nullptr, ComputeMetrics compute_metrics = nullptr,
          PreprocessLogits preprocess_logits_for_metrics = nullptr,
          std::vector<std::shared_ptr<TrainerCallback>> callbacks = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // resume_from_checkpoint: empty (none), "true" in any case (the last complete checkpoint in
  // output_dir), or a checkpoint folder.
  TrainOutput train(const std::string& resume_from_checkpoint = "");
  Metrics evaluate(const std::shared_ptr<const data::Dataset>& eval_dataset = nullptr,
                   const std::string& metric_key_prefix = "eval");
  // One evaluation per named dataset: metrics prefixed "eval_<name>_".
  Metrics evaluate(const std::map<std::string, std::shared_ptr<const data::Dataset>>& eval_datasets);
  PredictionOutput predict(const std::shared_ptr<const data::Dataset>& test_dataset,
                           const std::string& metric_key_prefix = "test");

  // Writes an ONNX inference model (model.onnx) and the weights (model.safetensors) to `dir`
  // (default output_dir).
  void save_model(const std::string& dir = "") const;
  void save_state() const;  // trainer_state.json in output_dir
  // Loads the weights of a checkpoint folder (its model.safetensors) into the model; "true": the
  // last complete checkpoint in output_dir.
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
  // The batch columns the model reads (its inputs): in a pipelined run, this rank's stage's.
  std::vector<std::string> input_columns(bool training);
  training::CheckpointState& checkpoint_state();

  // Overrides of the optimizer's learning-rate schedule (HF's `optimizers` argument): a scheduler
  // built from the optimizer's base learning rate, the warm-up steps and the total steps.
  using SchedulerFactory = std::function<std::unique_ptr<LRScheduler>(double base_lr, int64_t warmup, int64_t total)>;
  void set_scheduler_factory(SchedulerFactory factory);

  // HF's callback list operations. add_callback appends (warning on stderr when a callback of the
  // same name is already there, as HF does); pop_callback removes and returns the first callback
  // with that name, or that exact callback (nullptr when absent); remove_callback is pop_callback
  // without the result.
  void add_callback(std::shared_ptr<TrainerCallback> callback);
  std::shared_ptr<TrainerCallback> pop_callback(const std::string& name);
  std::shared_ptr<TrainerCallback> pop_callback(const std::shared_ptr<TrainerCallback>& callback);
  void remove_callback(const std::string& name);
  void remove_callback(const std::shared_ptr<TrainerCallback>& callback);
  const std::vector<std::shared_ptr<TrainerCallback>>& callbacks() const;
  const TrainerControl& control() const;

  // HF's Trainer.log: adds "epoch" (and num_input_tokens_seen when counted), appends the log with
  // its "step" to state.log_history and calls on_log.
  void log(Logs logs);
  // A replacement for log() in the loop's own calls (the training logs and evaluate()'s metrics): a
  // Python subclass that overrides HF's Trainer.log gets them, and calls log() itself to record them.
  using LogHook = std::function<void(Logs)>;
  void set_log_hook(LogHook hook);

  // HF's prediction_step on Kiln's eval model: one batch (every eval-model input among its columns)
  // in eval mode. What a Python subclass's evaluation_loop calls.
  PredictionStep prediction_step(const data::Example& batch, bool prediction_loss_only);
  // A replacement for the evaluation loop (a Python subclass's evaluation_loop or prediction_step):
  // evaluate() and predict(), and the evaluations train() runs, take the predictions, labels and
  // prefixed metrics (runtime included) from hook(metric_key_prefix, description), description
  // being HF's "Evaluation" or "Prediction"; they add the memory metrics, log and call the callbacks
  // as for the native loop. One process only: Unsupported in a distributed or pipelined run.
  using EvaluationHook =
      std::function<PredictionOutput(const std::string& metric_key_prefix, const std::string& description)>;
  void set_evaluation_hook(EvaluationHook hook);
  // HF's callback_handler.on_prediction_step, for a loop run outside (the evaluation hook's).
  void on_prediction_step();

  struct Impl;  // the Trainer's internals (src/trainer/loop/trainer_impl.h)

 private:
  std::unique_ptr<Impl> impl_;
  TrainingArguments args_;
  TrainerState state_;
};

}  // namespace kiln::trainer
