// The Trainer's internals, shared by its source files (loop, evaluation, checkpoints).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/grad_scaler.h"
#include "kiln/ipu_config.h"
#include "kiln/lr_schedulers.h"
#include "kiln/pipeline.h"
#include "kiln/trainer.h"
#include "trainer/callbacks/callback_handler.h"
#include "trainer/loop/distributed_run.h"
#include "trainer/loop/memory_usage.h"

namespace kiln::trainer {

struct Trainer::Impl {
  ModelSource source;
  std::string artifacts_dir;
  std::string logits_output;  // the eval model output predictions come from ("" when none)
  std::unique_ptr<training::CheckpointState> state;
  std::unique_ptr<training::Module> module;
  std::unique_ptr<training::Optimizer> optimizer;
  // fp16 artifacts (their training model takes a loss scale): dynamic loss scaling.
  std::unique_ptr<training::GradScaler> scaler;
  std::unique_ptr<LRScheduler> scheduler;
  SchedulerFactory scheduler_factory;
  LogHook log_hook;                // set_log_hook's: the loop's logs go there instead of log()
  EvaluationHook evaluation_hook;  // set_evaluation_hook's: evaluations run there
  CallbackHandler callbacks;
  std::shared_ptr<const data::Dataset> train_dataset, eval_dataset;
  ComputeMetrics compute_metrics;
  PreprocessLogits preprocess_logits;
  // The ranks of a distributed run (`mpirun -np N ...`): a world of one otherwise.
  DistributedRun dist;
  // TrainingArguments::deepspeed, read (its "auto" values filled).
  std::optional<DeepSpeedConfig> deepspeed;
  // The IPUConfig the arguments name (ipu_config_name / ipu_config_overrides), applied to them.
  std::optional<IPUConfig> ipu;
  // This rank's pipeline stage, when the IPUConfig has several.
  std::unique_ptr<training::PipelineStage> pipeline;
  double pipeline_compute = 0, pipeline_wait = 0;
  // HF's memory metrics: the constructor's (reported with the first train()), and whether a
  // train() is measuring (an evaluation inside it is not measured on its own, as HF's tracker).
  std::optional<MemoryDelta> init_memory;
  bool measuring_train = false;  // seconds this stage computed and waited, this run

  // Running sums the logs are made of; saved in checkpoints so that a resumed run logs exactly
  // what an uninterrupted one does.
  double tr_loss = 0;     // loss since the last log, as HF accumulates it
  double total_loss = 0;  // over the whole run, for train_loss
  int64_t globalstep_last_logged = 0;
  int64_t nan_inf_run = 0;  // consecutive non-finite losses
  // Updates skipped so far (a non-finite loss, or fp16 gradients the scaler found not finite): the
  // optimizer's step count is global_step less these; the scheduler skips only the scaler's.
  int64_t skipped_updates = 0, scaler_skips = 0;
};

// "true" (any case) means the last checkpoint in output_dir (InvalidArgument when there is none);
// anything else is a folder.
std::string resolve_checkpoint(const std::string& spec, const std::string& output_dir);
// HF's token estimate: the elements of "input_ids", else the number of examples.
double estimated_tokens(const data::Example& batch);
// Whether include_num_input_tokens_seen asks for the count.
bool counts_input_tokens(const TrainingArguments& args);

// A pipelined run: every stage's parameters (and, unless weights_only, optimizer slots) gathered
// on every rank of its pipeline (collective there), so that its checkpoints and saved models are
// those of one process.
struct PipelineState {
  std::map<std::string, Tensor> weights;
  training::OptimizerState optimizer;
};
PipelineState gather_pipeline_state(const Trainer::Impl& impl, bool weights_only);

// Writes / reads everything a checkpoint folder holds except trainer_state.json (a pipelined run:
// `pipeline`, its stages' state gathered).
void save_checkpoint_files(const Trainer::Impl& impl, const TrainingArguments& args, const TrainerState& state,
                           const std::string& folder, const PipelineState* pipeline = nullptr);
void load_checkpoint_files(Trainer::Impl& impl, TrainerState& state, const std::string& folder);
void load_weights(Trainer::Impl& impl, const std::string& folder);
// ZeRO: this rank's optimizer shard (its parameters' slots), written by every rank into the
// checkpoint folder rank 0 is writing, before rank 0 writes the rest and the manifest.
void save_optimizer_shard(const Trainer::Impl& impl, const std::string& folder);

// Builds (or finds) the artifacts for a model source; returns the artifact folder. `write` false:
// only where they are and the logits output (another rank of a distributed run writes them).
// `fingerprint`, when given, gets each initializer of the forward model with a checksum of its
// bytes (the ranks of a distributed run compare them).
// With `ipu` of several stages: the artifacts of stage `stage` (training/pipeline.h), written when
// `write`, and their folder.
std::string prepare_artifacts(const ModelSource& source, const TrainingArguments& args, std::string* logits_output,
                              bool write = true, nlohmann::json* fingerprint = nullptr, const IPUConfig* ipu = nullptr,
                              int stage = 0);

}  // namespace kiln::trainer
