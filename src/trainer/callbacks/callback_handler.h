// HF's CallbackHandler: the Trainer's list of callbacks and the event dispatch, with the flag
// resets HF's handler makes before an event (on_train_begin: should_training_stop; on_epoch_begin:
// should_epoch_stop; on_step_begin: should_log/evaluate/save; on_log / on_evaluate / on_save: the
// flag the event acts on).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/trainer_callback.h"

namespace kiln::trainer {

class CallbackHandler {
 public:
  using Event = void (TrainerCallback::*)(const TrainingArguments&, const TrainerState&, TrainerControl&,
                                          const CallbackContext&);

  // The extras every event carries (model, optimizer, scheduler, loaders); events add theirs.
  CallbackContext context;
  TrainerControl control;

  void add(std::shared_ptr<TrainerCallback> callback);
  std::shared_ptr<TrainerCallback> pop(const std::string& name);
  std::shared_ptr<TrainerCallback> pop(const std::shared_ptr<TrainerCallback>& callback);
  const std::vector<std::shared_ptr<TrainerCallback>>& callbacks() const { return callbacks_; }

  // Calls `event` on every callback in order with `extra` layered over the common context.
  void call(Event event, const TrainingArguments& args, const TrainerState& state, const CallbackContext& extra);
  void call(Event event, const TrainingArguments& args, const TrainerState& state) { call(event, args, state, {}); }

  // The stateful callbacks' states (and TrainerControl's) for trainer_state.json, and back.
  nlohmann::json export_states() const;
  void restore_states(const nlohmann::json& stateful_callbacks);

 private:
  std::vector<std::shared_ptr<TrainerCallback>> callbacks_;
};

}  // namespace kiln::trainer
