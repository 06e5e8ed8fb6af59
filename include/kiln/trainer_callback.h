// Callbacks: how the Trainer's loop is watched and steered, with Hugging Face's names, events and
// order (transformers.TrainerCallback). A callback overrides the events it cares about; each event
// receives the TrainingArguments, the TrainerState, the TrainerControl (the only thing it may
// change) and a CallbackContext with the model, optimizer, scheduler, data loaders and the event's
// own extras (metrics for on_evaluate / on_predict, logs for on_log).
//
//   struct StopAtLoss : kiln::trainer::TrainerCallback {
//     void on_log(const TrainingArguments&, const TrainerState&, TrainerControl& control,
//                 const CallbackContext& ctx) override {
//       for (const auto& [k, v] : *ctx.logs) if (k == "loss" && v < 0.1) control.should_training_stop = true;
//     }
//   };
//   trainer.add_callback(std::make_shared<StopAtLoss>());
//
// The order of events in train(), as HF's loop calls them:
//   on_init_end (end of the Trainer's constructor)
//   on_train_begin
//   per epoch: on_epoch_begin
//     per batch: on_step_begin (first batch of an accumulation group)
//                on_substep_end (a batch that is not the group's last), or for the last:
//                on_pre_optimizer_step (after clipping) · on_optimizer_step · on_step_end
//                then, as control says: on_log · [on_prediction_step... on_log · on_evaluate] · on_save
//     on_epoch_end, then log / evaluate / save as control says
//   on_log (the run's summary) · on_train_end
// evaluate(): on_prediction_step per batch, on_log, on_evaluate. predict(): on_prediction_step per
// batch, on_predict.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "kiln/trainer_state.h"
#include "kiln/training_args.h"

namespace kiln::training {
class Module;
class Optimizer;
}  // namespace kiln::training
namespace kiln::data {
class DataLoader;
}

namespace kiln::trainer {

class LRScheduler;

// HF's keyword arguments of an event. Pointers are null where the event has no such thing (no
// scheduler before train(), no metrics outside on_evaluate / on_predict, no logs outside on_log).
struct CallbackContext {
  training::Module* model = nullptr;
  training::Optimizer* optimizer = nullptr;
  LRScheduler* lr_scheduler = nullptr;
  const data::DataLoader* train_dataloader = nullptr;
  const data::DataLoader* eval_dataloader = nullptr;
  const Metrics* metrics = nullptr;  // on_evaluate, on_predict
  const Logs* logs = nullptr;        // on_log
  // Kiln's: the loss of the update just made (the mean over its accumulated batches), in
  // on_step_end; of the batch just run, in on_substep_end. HF gives callbacks no per-step loss.
  std::optional<double> loss;
};

class TrainerCallback {
 public:
  virtual ~TrainerCallback();

  // The class name (HF uses type(callback).__name__): the key of the callback's saved state in
  // trainer_state.json and the name pop_callback / remove_callback take. The default is the
  // dynamic type's name without namespaces.
  virtual std::string name() const;

  // Stateful callbacks (HF's ExportableState) return {"args": {...}, "attributes": {...}}; the
  // Trainer saves it in every checkpoint and, with restore_callback_states_from_checkpoint,
  // restores it through load_state on resume. The default (nullopt) is stateless.
  virtual std::optional<nlohmann::json> state() const;
  virtual void load_state(const nlohmann::json& state);

  using Args = TrainingArguments;
  virtual void on_init_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_train_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_train_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_epoch_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_epoch_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_step_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_pre_optimizer_step(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_optimizer_step(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_substep_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_step_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_evaluate(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_predict(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_prediction_step(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_save(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
  virtual void on_log(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {}
};

// Drives logging, evaluation and checkpoints from the strategies (logging_strategy / logging_steps /
// logging_first_step, eval_strategy / eval_steps / eval_delay, save_strategy / save_steps) and
// stops training at max_steps, saving then when save_strategy is "steps". Every Trainer has one.
class DefaultFlowCallback : public TrainerCallback {
 public:
  void on_step_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_epoch_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
};

// A tqdm-style bar while training (and one per evaluation) when `bar` is a terminal:
//    42%|████████▍           | 420/1000 [00:03<00:04, 131.20it/s, loss=0.4132]
// and, when it is not, a plain line every 5% of the run ("step 420/1000 (42%) ..."). Logs are
// printed to `logs` as HF's ProgressCallback prints them ({'loss': 0.4132, ...}, total_flos left
// out). Trainers use it unless disable_tqdm.
class ProgressCallback : public TrainerCallback {
 public:
  explicit ProgressCallback(std::FILE* bar = stderr, std::FILE* logs = stdout);
  // A terminal: a bar redrawn in place. Not: plain lines. The default asks isatty(bar).
  void set_terminal(bool terminal) { terminal_ = terminal; }

  void on_train_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_step_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_prediction_step(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_evaluate(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_predict(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_log(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_train_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;

 private:
  struct Bar;
  void draw(Bar& bar, bool final_draw);
  std::FILE* bar_file_;
  std::FILE* log_file_;
  bool terminal_;
  std::shared_ptr<Bar> training_bar_, prediction_bar_;
  int64_t last_line_step_ = -1;
};

// Prints every log ({'loss': ..., ...}, total_flos left out) to `out`: the Trainer's choice when
// disable_tqdm is set.
class PrinterCallback : public TrainerCallback {
 public:
  explicit PrinterCallback(std::FILE* out = stdout) : out_(out) {}
  void on_log(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;

 private:
  std::FILE* out_;
};

// HF's early stopping: after each evaluation, the metric_for_best_model ("eval_"-prefixed) is an
// improvement when there is no best_metric yet, or it beats best_metric (greater_is_better decides
// the direction) by more than early_stopping_threshold; otherwise the patience counter grows, and
// training stops when it reaches early_stopping_patience. Needs metric_for_best_model and an
// eval_strategy (InvalidArgument at on_train_begin); without load_best_model_at_end it warns, as
// current HF does.
// Stateful: the counter is saved in checkpoints.
class EarlyStoppingCallback : public TrainerCallback {
 public:
  explicit EarlyStoppingCallback(int64_t early_stopping_patience = 1, double early_stopping_threshold = 0.0);
  void on_train_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_evaluate(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  std::optional<nlohmann::json> state() const override;
  void load_state(const nlohmann::json& state) override;

  int64_t early_stopping_patience;
  double early_stopping_threshold;
  int64_t early_stopping_patience_counter = 0;  // evaluations in a row without improvement
};

// Formats a log as Python prints a dict of floats: {'loss': 0.4132, 'epoch': 1.0}.
std::string format_logs(const Logs& logs);

}  // namespace kiln::trainer
