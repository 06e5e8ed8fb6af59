// SIGINT, SIGTERM and SIGHUP during `kiln train`. Clusters pre-empt jobs with SIGTERM: the first
// signal asks the Trainer to save a checkpoint at the end of the current optimizer step and stop;
// `kiln train` then says so and exits with 128 + the signal's number. A second signal ends the
// process at once (the default action).
#pragma once

#include <string>

#include "kiln/trainer_callback.h"

namespace kiln::cli {

class StopOnSignal : public trainer::TrainerCallback {
 public:
  StopOnSignal();   // installs the handlers
  ~StopOnSignal();  // restores the previous ones
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  std::string name() const override { return "StopOnSignal"; }
  void on_step_end(const trainer::TrainingArguments& args, const trainer::TrainerState& state,
                   trainer::TrainerControl& control, const trainer::CallbackContext& ctx) override;

  // The signal received (0: none).
  static int received();
};

}  // namespace kiln::cli
