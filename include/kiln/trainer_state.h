// TrainerState and TrainerControl: what the Trainer's loop knows and what callbacks may change,
// with Hugging Face's names (transformers.trainer_callback). TrainerState is saved as
// trainer_state.json in every checkpoint; TrainerControl is the set of switches a callback flips to
// make the loop log, evaluate, save or stop.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::trainer {

using Metrics = std::map<std::string, double>;
// What one log holds (HF's `logs` dict), in the order it was made: "loss", "grad_norm",
// "learning_rate", "epoch" for a training log; the metrics for an evaluation.
using Logs = std::vector<std::pair<std::string, double>>;

// HF's TrainerState. One step is one optimizer update (gradient_accumulation_steps batches).
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
  std::optional<int64_t> best_global_step;
  std::optional<std::string> best_model_checkpoint;
  bool is_local_process_zero = true;
  bool is_world_process_zero = true;
  bool is_hyper_param_search = false;
  // Saved states of stateful callbacks (and of TrainerControl) by class name, as HF stores them:
  // {"EarlyStoppingCallback": {"args": {...}, "attributes": {...}}, "TrainerControl": {...}}. A name
  // used by several callbacks maps to a list of states, in callback order.
  nlohmann::json stateful_callbacks = nlohmann::json::object();

  // trainer_state.json's content: HF's keys (sorted, as HF's save_to_json writes them).
  nlohmann::json to_json() const;
  // CorruptFile naming the missing or mistyped field.
  static TrainerState from_json(const nlohmann::json& j);
};

// HF's TrainerControl. The loop resets should_log / should_evaluate / should_save at the beginning
// of every step, should_epoch_stop at the beginning of every epoch and should_training_stop at the
// beginning of training; it never resets a flag in between, so a callback's decision stands until
// the loop has acted on it.
struct TrainerControl {
  bool should_training_stop = false;
  bool should_epoch_stop = false;
  bool should_save = false;
  bool should_evaluate = false;
  bool should_log = false;

  // HF's ExportableState form: {"args": {the five flags}, "attributes": {}}.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);  // CorruptFile when malformed
  bool operator==(const TrainerControl&) const = default;
};

}  // namespace kiln::trainer
