// The training loop's state and steps (Trainer::train): shared by train_run.cpp (the run, its
// updates, logs and checkpoints) and train_call.cpp (calls of device_iterations updates, and the
// pipelined accumulation group).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kiln/data.h"
#include "trainer/loop/memory_usage.h"
#include "trainer/loop/trainer_impl.h"

namespace kiln::trainer {

// HF's schedule: batches per epoch, optimizer updates per epoch, and the run's length in updates
// (max_steps) and in epochs.
struct Schedule {
  int64_t len_dataloader = 0;
  int64_t accum = 1;  // gradient_accumulation_steps
  int64_t updates_per_epoch = 1;
  int64_t max_steps = 0;
  int64_t num_epochs = 0;
};

Schedule make_schedule(const TrainingArguments& args, const data::DataLoader& loader);

// One call of Trainer::train (HF's _inner_training_loop), cut into its steps: start (the schedule,
// the scheduler, resuming), epochs of micro-batches, one optimizer update per accumulation group,
// log / evaluate / save as control asks, and the closing summary.
class TrainRun {
 public:
  TrainRun(Trainer& trainer, Trainer::Impl& m, const TrainingArguments& args, TrainerState& state,
           const data::DataLoader& loader)
      : trainer_(trainer),
        m_(m),
        args_(args),
        state_(state),
        loader_(loader),
        cb_(m.callbacks),
        schedule_(make_schedule(args, loader)) {}

  void start(const std::string& resume_from_checkpoint);
  void run_epochs();
  TrainOutput finish(std::chrono::steady_clock::time_point start_time, const MemoryUsage& memory_at_start);

 private:
  void run_epoch(int64_t epoch);
  double train_batch(const data::Example& batch, bool ends_group, int64_t rows);
  double account(const data::Example& batch, double loss, int64_t rows);
  int64_t input_tokens(const data::Example& batch, int64_t rows) const;
  double clip_pipelined(double max_norm);
  void train_pipelined_group(const std::vector<data::Example>& batches, const std::vector<int64_t>& rows);
  void optimizer_update(int64_t epoch, int64_t step);
  void run_call(int64_t epoch, int64_t first, int64_t end);
  void note_due_events();
  void maybe_log_save_evaluate();
  void log_loss();
  void evaluate_and_track_best();
  void save_checkpoint();
  void save_sharded_checkpoint();
  Logs summary(double runtime, double training_loss, const MemoryUsage& memory_at_start) const;

  // The micro-batches since the last optimizer update.
  struct Group {
    bool finite = true;
    double loss = 0;
    int64_t batches = 0;
  };

  Trainer& trainer_;
  Trainer::Impl& m_;
  const TrainingArguments& args_;
  TrainerState& state_;
  const data::DataLoader& loader_;
  CallbackHandler& cb_;
  const Schedule schedule_;
  int64_t epochs_trained_ = 0;  // where a resumed run starts: the epoch, and the batches it skips in it
  int64_t skip_ = 0;
  bool plateau_ = false;  // the scheduler steps on the eval metric, not on every update
  double flops_per_token_ = 0;
  double last_grad_norm_ = std::nan("");
  Group group_;
  // IPUConfig's device_iterations: optimizer updates per call, their batches staged up front; with
  // output_mode "final" / "sum" the callbacks hear of the call's last update only (quiet_ inside a
  // call), and the logs, evaluations and saves due inside it happen at its end (due_).
  int64_t device_iterations_ = 1;
  bool last_only_ = false, sum_losses_ = false, quiet_ = false;
  TrainerControl due_;
  double call_loss_ = 0;
  // dataloader_num_workers > 0: the epoch's batches loaded ahead on worker threads.
  std::unique_ptr<data::Prefetcher> prefetch_;
};

}  // namespace kiln::trainer
