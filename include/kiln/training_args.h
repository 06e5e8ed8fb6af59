// TrainingArguments: the Hugging Face Trainer's configuration, with its names, types, defaults and
// validation rules (transformers/training_args.py), so that a config written for HF carries over.
//
//   using namespace kiln::trainer;
//   auto args = TrainingArguments::parse_args({"--output_dir", "run", "--learning_rate", "3e-4",
//                                              "--eval_strategy", "steps", "--eval_steps", "0.1"});
//   args.per_device_train_batch_size = 32;       // fields are plain data; after editing them,
//   args.validate();                             // validate() applies HF's rules again
//   int64_t warmup = args.get_warmup_steps(total_steps);
//   int64_t eval_every = args.eval_steps_for(total_steps);   // ratios (< 1) resolved: ceil(total * r)
//   args.save(args.output_dir + "/training_args.json");      // HF's training_args.json (JSON, not pickle)
//   auto again = TrainingArguments::from_json_file(args.output_dir + "/training_args.json");
//
// Versions. Defaults are transformers' current ones (v5 development line); where they changed, the
// field's comment says from what. Fields HF has since removed or deprecated (overwrite_output_dir,
// include_tokens_per_second, evaluation_strategy, warmup_ratio, logging_dir, adamw_hf) keep their
// last HF meaning, so v4 configs load. Fields HF has that Kiln does not (push_to_hub, tf32,
// ...) are not here: a JSON file naming them is rejected unless allow_extra_keys is set.
//
// Every error is an InvalidArgument (a file that cannot be read: IOError) whose message is HF's text
// where HF has a rule, naming the option and the offending value.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::trainer {

// HF's trainer_utils enums; the enumerator names are HF's string values.
enum class IntervalStrategy { no, steps, epoch };
enum class SaveStrategy { no, steps, epoch, best };
enum class SchedulerType {
  linear,
  cosine,
  cosine_with_restarts,
  polynomial,
  constant,
  constant_with_warmup,
  inverse_sqrt,
  reduce_lr_on_plateau
};
// The optimizers Kiln implements, by HF's OptimizerNames values. adamw_torch_fused (HF's default
// from torch 2.8) is accepted so that recent HF configs load; Kiln runs it as adamw_torch (its AdamW
// is one fused kernel anyway). adamw_hf is HF's own AdamW (removed in v5): AdamW with bias correction.
enum class OptimizerName { adamw_torch, adamw_torch_fused, adamw_hf, sgd, adagrad, adafactor };

// HF's string value of an enumerator ("steps", "cosine_with_restarts", "adamw_torch", ...).
std::string_view to_string(IntervalStrategy value);
std::string_view to_string(SaveStrategy value);
std::string_view to_string(SchedulerType value);
std::string_view to_string(OptimizerName value);
// The enumerator named `text`, else InvalidArgument with HF's ExplicitEnum message
// ("foo is not a valid IntervalStrategy, please select one of ['no', 'steps', 'epoch']") prefixed by
// `option`. Defined for the four enums above.
template <class Enum>
Enum enum_from_string(std::string_view text, std::string_view option);

struct TrainingArguments {
  // ---- Output --------------------------------------------------------------------------------
  std::string output_dir = "trainer_output";  // HF: None, meaning "trainer_output" (older: required)
  bool overwrite_output_dir = false;          // removed in HF v5

  // ---- What to run (for scripts; the Trainer does not read them) ---------------------------
  bool do_train = false;
  bool do_eval = false;  // validate() sets it when eval_strategy is not "no"
  bool do_predict = false;
  std::optional<std::string> resume_from_checkpoint;

  // ---- Evaluation ----------------------------------------------------------------------------
  // Also accepted as evaluation_strategy (HF's name before v4.46) on input; written as eval_strategy.
  IntervalStrategy eval_strategy = IntervalStrategy::no;
  // Steps between evaluations: an integer, or a ratio of the total steps when < 1. validate() sets
  // it to logging_steps when eval_strategy is "steps" and it is unset or 0.
  std::optional<double> eval_steps;
  double eval_delay = 0;  // epochs or steps (as eval_strategy says) before the first evaluation
  bool prediction_loss_only = false;
  int64_t per_device_eval_batch_size = 8;
  std::optional<int64_t> eval_accumulation_steps;

  // ---- Training length and batches -----------------------------------------------------------
  int64_t per_device_train_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double num_train_epochs = 3.0;  // fractional: the last epoch runs that fraction of its steps
  int64_t max_steps = -1;         // > 0 overrides num_train_epochs

  // ---- Optimizer -----------------------------------------------------------------------------
  // HF v5: "adamw_torch", or "adamw_torch_fused" when torch >= 2.8 is installed; Kiln has no
  // torch, so the rule gives "adamw_torch" (also v4's default).
  OptimizerName optim = OptimizerName::adamw_torch;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0 disables clipping
  double label_smoothing_factor = 0.0;

  // ---- Learning-rate schedule ----------------------------------------------------------------
  SchedulerType lr_scheduler_type = SchedulerType::linear;
  // Extra arguments of the scheduler (see kiln/lr_schedulers.h). HF: None (v4: {}); Kiln keeps an
  // empty object for "none", so lookups need no null check. On the command line: a JSON string.
  nlohmann::json lr_scheduler_kwargs = nlohmann::json::object();
  // An integer number of warmup steps, or a ratio of the total steps when in (0, 1) (HF v5; in v4
  // an int). See get_warmup_steps.
  double warmup_steps = 0;
  // Ratio of the total steps used for warmup when warmup_steps is 0. HF v5: None, deprecated in
  // favour of a fractional warmup_steps; v4: 0.0, with warmup_steps > 0 overriding it (Kiln's rule).
  std::optional<double> warmup_ratio;

  // ---- Logging -------------------------------------------------------------------------------
  // debug, info, warning, error, critical or passive (keep the library's level: warning).
  std::string log_level = "passive";
  // TensorBoard folder. HF v5: None (deprecated; TENSORBOARD_LOGGING_DIR instead). Kiln keeps v4's
  // rule: validate() sets it to <output_dir>/runs/<Mon DD_HH-MM-SS>_<hostname> when unset, as
  // PyTorch's SummaryWriter does (default_logging_dir()).
  std::optional<std::string> logging_dir;
  IntervalStrategy logging_strategy = IntervalStrategy::steps;
  bool logging_first_step = false;
  double logging_steps = 500;  // an integer, or a ratio of the total steps when < 1
  bool logging_nan_inf_filter = true;
  // Where to report: integration names, "all" (every one Kiln has; the Trainer expands it) or
  // "none". HF v5 default "none" (v4: "all"); validate() turns ["none"] into [].
  std::vector<std::string> report_to;
  std::optional<std::string> run_name;  // HF v5: None (v4 set it to output_dir)
  // HF's rule: true when the effective log level is above warning (log_level error or critical;
  // "passive" counts as warning). validate() fills it when unset.
  std::optional<bool> disable_tqdm;
  bool include_tokens_per_second = false;  // removed in HF v5
  // "all", "non_padding" or "no"; true/false are accepted as "all"/"no" (HF v5; v4: a bool).
  std::string include_num_input_tokens_seen = "no";
  bool skip_memory_metrics = true;

  // ---- Checkpoints ---------------------------------------------------------------------------
  SaveStrategy save_strategy = SaveStrategy::steps;
  double save_steps = 500;  // an integer, or a ratio of the total steps when < 1
  std::optional<int64_t> save_total_limit;
  bool save_only_model = false;
  bool load_best_model_at_end = false;
  // validate(): "loss" when unset and load_best_model_at_end or reduce_lr_on_plateau is on.
  std::optional<std::string> metric_for_best_model;
  // validate(): when unset and a metric is named, true unless the metric's name ends with "loss".
  std::optional<bool> greater_is_better;
  bool ignore_data_skip = false;
  // On resume, give stateful callbacks (EarlyStoppingCallback...) and TrainerControl the states
  // saved in the checkpoint's trainer_state.json (HF's default: false, the callbacks start fresh).
  bool restore_callback_states_from_checkpoint = false;

  // ---- Data and reproducibility --------------------------------------------------------------
  int64_t seed = 42;
  std::optional<int64_t> data_seed;  // the samplers' seed; unset: seed
  bool full_determinism = false;
  bool dataloader_drop_last = false;
  // Batches loaded and collated on this many threads ahead of the training step (data::Prefetcher),
  // at most dataloader_prefetch_factor (unset: HF's 2) each; the order and the results are those of
  // 0 workers. Persistent workers keep their threads from epoch to epoch.
  int64_t dataloader_num_workers = 0;
  std::optional<int64_t> dataloader_prefetch_factor;
  bool dataloader_persistent_workers = false;
  std::optional<std::vector<std::string>> label_names;
  bool use_cpu = false;  // Kiln always runs on the CPU; accepted for compatibility

  // ---- Memory --------------------------------------------------------------------------------
  // HF's gradient checkpointing: the training model keeps only the activations between segments
  // (per transformer sublayer / residual block, found from the graph) and recomputes each segment's
  // forward in the backward pass (kiln/autodiff.h: RecomputeOptions). In the kwargs, HF's keys
  // (use_reentrant, ...) are accepted and have no effect; Kiln's "boundaries" (a list of forward
  // value names) names the kept values instead. On the command line: a JSON string.
  bool gradient_checkpointing = false;
  nlohmann::json gradient_checkpointing_kwargs = nlohmann::json::object();

  // ---- Mixed precision -----------------------------------------------------------------------
  // HF's bf16 (torch.autocast in bfloat16): the artifacts the Trainer generates run their matrix
  // products and gradients in bfloat16 with float32 accumulation, the rest, the parameters and the
  // optimizer in float32 (kiln/artifacts.h: ArtifactOptions::mixed_precision). Evaluation runs the
  // same way, as HF's does under autocast. Given artifacts must have been generated with it.
  bool bf16 = false;
  // HF's fp16: the same split in float16, with dynamic loss scaling (kiln/grad_scaler.h: torch's
  // GradScaler semantics, 2^16 to start, x2 after 2000 finite steps, x0.5 and the update skipped
  // on non-finite gradients; its state in each checkpoint's scaler.json).
  bool fp16 = false;
  // HF's choices: "auto" and "cpu_amp" are Kiln's own scaler; "apex" is refused.
  std::string half_precision_backend = "auto";
  // HF's full 16-bit evaluation (the model cast to bfloat16 / float16 for evaluate and predict):
  // the eval model runs whole in 16 bits (training::Module::set_eval_precision), faster where the
  // CPU computes bfloat16 natively, with half the activation memory, and metrics that may move.
  bool bf16_full_eval = false;
  bool fp16_full_eval = false;

  // ---- Distributed training (`mpirun -np N kiln train ...`; kiln/distributed.h) --------------
  // HF's local_rank, which launchers set: accepted; Kiln reads its ranks from the MPI environment.
  int64_t local_rank = -1;
  // HF's ddp_backend: "mpi" (Kiln's backend), or unset: MPI when an MPI launcher started the run.
  // torch's other backends (nccl, gloo, ccl, hccl) are refused.
  std::optional<std::string> ddp_backend;
  // torch DDP's bucket size for the gradient allreduce (unset: 25 MB), and whether rank 0's
  // buffers (BatchNorm's running statistics) are broadcast before each forward (unset: true).
  std::optional<int64_t> ddp_bucket_cap_mb;
  std::optional<bool> ddp_broadcast_buffers;
  // Accepted, no effect: a parameter without a gradient on a step contributes zeros.
  std::optional<bool> ddp_find_unused_parameters;
  // Seconds a rank waits for the others in a collective before ending the run with an error.
  int64_t ddp_timeout = 1800;
  // HF's deepspeed: a DeepSpeed config file's path, or its JSON text (a dict in Python). Its ZeRO
  // stage (0-2), buckets, gradient clipping, batch sizes and bf16 / fp16 sections configure the
  // run, "auto" values filled from these arguments (kiln/deepspeed_config.h).
  std::optional<std::string> deepspeed;
  // Which ranks log (each host's first rank, else only rank 0) and write checkpoints and the model
  // (only rank 0, else each host's first rank: for hosts that share no file system).
  bool log_on_each_node = true;
  bool save_on_each_node = false;

  // ---- optimum-graphcore's IPUTrainingArguments (kiln/ipu_config.h; docs/ipu.md) ------------
  // The run's IPUConfig: a folder holding ipu_config.json, a JSON file, or the JSON text; and
  // optimum's overrides of it ("device_iterations=4,seed=7").
  std::optional<std::string> ipu_config_name;
  std::optional<std::string> ipu_config_overrides;
  // The ranks the run must have (optimum: IPUs); checked against the MPI world.
  std::optional<int64_t> n_ipu;
  // IPUTrainingArguments trains in 16 bits unless fp32: false here means fp16 mixed precision (with
  // the IPUConfig's loss scaling), true float32; unset (TrainingArguments): as bf16 / fp16 say.
  std::optional<bool> fp32;
  // Plan every graph of the run (training, evaluation, the optimizer) for its batch shapes, report
  // each plan's size, and stop before the first step.
  bool compile_only = false;
  // The last, short batch of an epoch (and of evaluation) padded to the full batch size with rows
  // that count for nothing: the loss, the gradients and the metrics equal an unpadded run's, and
  // every step has one shape (one plan).
  bool pad_on_batch_axis = false;
  // optimum's "sequential", "async", "async_rebatched": accepted; Kiln collates each batch in the
  // training thread in every mode.
  std::string dataloader_mode = "sequential";
  // The LAMB optimizer (kiln/artifacts.h: LambOptions) with adam_beta1, adam_beta2, adam_epsilon and
  // weight_decay; lamb_no_bias_correction without its bias correction. Either replaces optim.
  bool lamb = false;
  bool lamb_no_bias_correction = false;

  // ==== Kiln's own (not in Hugging Face) =====================================================
  // Training stops after this many consecutive optimizer steps with a non-finite loss, naming the
  // step; the last checkpoint written stays the last good one. An update whose loss is not finite
  // is always skipped (HF would apply it and spread NaN into the weights). 5 tolerates a rare
  // overflow and stops a diverged run quickly; 0 never stops.
  int64_t nan_inf_patience = 5;
  // A distributed run's BatchNormalization layers normalize with the statistics of the global batch
  // (every rank's), as torch's SyncBatchNorm.convert_sync_batchnorm makes them: a run of N ranks
  // then computes what one process does with N times the batch. False (torch DDP's default): each
  // rank's own batch statistics.
  bool ddp_sync_batchnorm = false;

  // ---- Hugging Face's other fields -------------------------------------------------------------
  // The current release's fields Kiln has no member for, and the v4 names scripts still pass
  // (push_to_hub, remove_unused_columns, per_gpu_train_batch_size, ...), by name; those left at
  // their defaults are absent. Each is accepted, and either changes nothing on Kiln or, away from
  // its default, is an Unsupported naming it (docs/trainer.md has the table;
  // src/trainer/args/training_args_compat.cpp the reasons).
  nlohmann::json hf_compat = nlohmann::json::object();
  // Such a field's value (its default when not given); KeyError for a name not among them.
  const nlohmann::json& compat(const std::string& name) const;

  // ---- Rules and derived values --------------------------------------------------------------
  // HF's __post_init__: fills the derived defaults (do_eval, eval_steps, metric_for_best_model,
  // greater_is_better, disable_tqdm, logging_dir, report_to) and checks the combinations, raising
  // InvalidArgument with HF's message. Idempotent. The parsers call it.
  void validate();

  // Warmup steps for a run of num_training_steps: warmup_steps when >= 1, ceil(total * warmup_steps)
  // when it is a ratio in (0, 1), else ceil(total * warmup_ratio) (0 when unset).
  int64_t get_warmup_steps(int64_t num_training_steps) const;
  // Batch sizes (one device: HF's per_device_* * max(1, n_gpu) with n_gpu 0).
  int64_t train_batch_size() const { return per_device_train_batch_size; }
  int64_t eval_batch_size() const { return per_device_eval_batch_size; }
  // HF Trainer's rule for logging/eval/save steps: a value < 1 is a ratio, ceil(max_steps * value);
  // else the value itself. Unset (nullopt): 500, TrainerState's default that HF then keeps.
  static int64_t resolved_steps(std::optional<double> value, int64_t max_steps);
  int64_t logging_steps_for(int64_t max_steps) const { return resolved_steps(logging_steps, max_steps); }
  int64_t eval_steps_for(int64_t max_steps) const { return resolved_steps(eval_steps, max_steps); }
  int64_t save_steps_for(int64_t max_steps) const { return resolved_steps(save_steps, max_steps); }
  // The sampler seed: data_seed, else seed.
  int64_t sampler_seed() const { return data_seed.value_or(seed); }
  // HF's properties of the distributed run (from kiln::dist::world(), which they initialize): the
  // ranks, this process's rank in all and on its host, and whether it logs and saves.
  int world_size() const;
  int process_index() const;
  int local_process_index() const;
  bool should_log() const;
  bool should_save() const;

  // ---- Parsing and serialisation -------------------------------------------------------------
  // HfArgumentParser over argv (without the program name): `--name value`, `--name=value`, dashes
  // for underscores (`--learning-rate`); booleans as `--flag` (true) or `--flag VALUE` with VALUE in
  // yes/no, true/false, t/f, y/n, 1/0 (any case); `--no_flag` for booleans whose default is true;
  // lists as several values (`--report_to tensorboard mlflow`); lr_scheduler_kwargs as a JSON
  // object. Repeated options: the last wins. Unknown options (with the values that follow them) and
  // stray values go to `remaining` when given, else InvalidArgument naming them and suggesting the
  // closest known option. Bad values: InvalidArgument naming option and value. Ends with validate().
  static TrainingArguments parse_args(const std::vector<std::string>& argv,
                                      std::vector<std::string>* remaining = nullptr);
  // From a JSON object with HF's keys (HfArgumentParser.parse_dict): missing keys keep their
  // defaults, null means unset for optional fields (and the default elsewhere). Unknown keys are an
  // InvalidArgument ("Some keys are not used by the HfArgumentParser: [...]") unless
  // allow_extra_keys. Ends with validate().
  static TrainingArguments from_json(const nlohmann::json& json, bool allow_extra_keys = false);
  // Reads and parses a JSON file (HfArgumentParser.parse_json_file); errors name the file.
  static TrainingArguments from_json_file(const std::string& path, bool allow_extra_keys = false);
  // Every field under HF's name; unset optionals as null, enums as their strings. Integral
  // step counts (logging/eval/save/warmup steps, eval_delay) are written as integers, as HF does.
  // from_json(to_json()) gives back an equal TrainingArguments.
  nlohmann::json to_json() const;
  // to_json() indented by 2, as HF's to_json_string.
  std::string to_json_string() const;
  // Writes to_json_string() to `path` atomically (the file is old or complete, never torn).
  void save(const std::string& path) const;

  // Every option name parse_args knows (HF's field names plus evaluation_strategy), sorted.
  static std::vector<std::string> option_names();

  bool operator==(const TrainingArguments&) const = default;
};

// <output_dir>/runs/<%b%d_%H-%M-%S>_<hostname>: HF v4's (and PyTorch's SummaryWriter's) default
// logging_dir, from the local time now.
std::string default_logging_dir(const std::string& output_dir);

}  // namespace kiln::trainer
