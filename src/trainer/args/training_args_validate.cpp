// TrainingArguments::validate (HF's __post_init__ and _validate_args, in HF's order and with HF's
// messages, followed by Kiln's own checks) and the values the Trainer derives from the arguments.
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <set>

#include "kiln/deepspeed_config.h"
#include "kiln/distributed.h"
#include "kiln/error.h"
#include "kiln/ipu_config.h"
#include "kiln/training_args.h"
#include "trainer/args/training_args_compat.h"

namespace kiln::trainer {
namespace {

// Python's logging levels for HF's trainer_log_levels; "passive" leaves the library's level,
// which is warning.
constexpr int kWarning = 30;
constexpr std::array<std::pair<std::string_view, int>, 7> kLogLevels{{
    {"detail", 10},
    {"debug", 10},
    {"info", 20},
    {"warning", 30},
    {"error", 40},
    {"critical", 50},
    {"passive", -1},
}};

int log_level_number(const std::string& name) {
  for (const auto& [level, number] : kLogLevels)
    if (level == name) return number;
  std::string choices;
  for (const auto& [level, number] : kLogLevels) choices += fmt::format("{}'{}'", choices.empty() ? "" : ", ", level);
  // argparse's message for a value outside `choices`.
  throw InvalidArgument(fmt::format("argument --log_level: invalid choice: '{}' (choose from {})", name, choices));
}

// os.path.expanduser for "~" and "~/...": HF expands output_dir and logging_dir (#10628).
std::string expand_user(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + path.substr(1) : path;
}

// Python's float % float for the non-negative operands HF's rule sees (fmod has the same sign).
bool is_multiple(double a, double b) { return std::fmod(a, b) == 0.0; }

[[noreturn]] void fail(const std::string& message) { throw InvalidArgument(message); }

void check_positive_steps(std::string_view name, double value, std::string_view strategy) {
  if (value < 0 || !std::isfinite(value))
    fail(fmt::format("--{} must be an integer or a ratio in (0, 1) when {} is \"steps\", got {}", name, strategy,
                     value));
}

}  // namespace

std::string default_logging_dir(const std::string& output_dir) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &local);
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return (std::filesystem::path(output_dir) / "runs" / (std::string(stamp) + "_" + host)).string();
}

namespace {

// ---- 1. Defaults and normalisation (HF's __post_init__) ----------------------------------------
void normalise(TrainingArguments& a) {
  if (a.output_dir.empty()) a.output_dir = "trainer_output";  // HF's None; an empty path is no folder
  a.output_dir = expand_user(a.output_dir);
  if (!a.logging_dir) a.logging_dir = default_logging_dir(a.output_dir);  // HF v4's rule
  a.logging_dir = expand_user(*a.logging_dir);
  int level = log_level_number(a.log_level);
  if (!a.disable_tqdm) a.disable_tqdm = (level < 0 ? kWarning : level) > kWarning;
  if (a.include_num_input_tokens_seen != "all" && a.include_num_input_tokens_seen != "non_padding" &&
      a.include_num_input_tokens_seen != "no")
    fail(
        fmt::format("include_num_input_tokens_seen must be one of ['all', 'non_padding', 'no'] or a boolean, got "
                    "'{}'",
                    a.include_num_input_tokens_seen));
  // IPUTrainingArguments trains in float16 unless fp32 (or bf16) says otherwise.
  if (a.fp32 && !*a.fp32 && !a.bf16) a.fp16 = true;
}

// ---- 2. Derived values -------------------------------------------------------------------------
void derive_values(TrainingArguments& a) {
  if (!a.do_eval && a.eval_strategy != IntervalStrategy::no) a.do_eval = true;
  if (a.eval_strategy == IntervalStrategy::steps && (!a.eval_steps || *a.eval_steps == 0)) {
    if (a.logging_steps > 0) a.eval_steps = a.logging_steps;
    else
      fail(fmt::format("evaluation strategy {} requires either non-zero --eval_steps or --logging_steps",
                       to_string(a.eval_strategy)));
  }
  if ((a.load_best_model_at_end || a.lr_scheduler_type == SchedulerType::reduce_lr_on_plateau) &&
      !a.metric_for_best_model)
    a.metric_for_best_model = "loss";
  if (!a.greater_is_better && a.metric_for_best_model)
    a.greater_is_better = !a.metric_for_best_model->ends_with("loss");
  if (a.report_to == std::vector<std::string>{"none"}) a.report_to.clear();
}

// ---- 3. HF's _validate_args --------------------------------------------------------------------
void check_interval_steps(const TrainingArguments& a) {
  if (a.logging_strategy == IntervalStrategy::steps && a.logging_steps == 0)
    fail(fmt::format("logging strategy {} requires non-zero --logging_steps", to_string(a.logging_strategy)));
  // HF then converts these to int; Kiln keeps the double, which holds the same integer.
  if (a.logging_strategy == IntervalStrategy::steps && a.logging_steps > 1 &&
      a.logging_steps != std::trunc(a.logging_steps))
    fail(fmt::format("--logging_steps must be an integer if bigger than 1: {}", a.logging_steps));
  if (a.eval_strategy == IntervalStrategy::steps && *a.eval_steps > 1 && *a.eval_steps != std::trunc(*a.eval_steps))
    fail(fmt::format("--eval_steps must be an integer if bigger than 1: {}", *a.eval_steps));
  if (a.save_strategy == SaveStrategy::steps && a.save_steps > 1 && a.save_steps != std::trunc(a.save_steps))
    fail(fmt::format("--save_steps must be an integer if bigger than 1: {}", a.save_steps));
}

// load_best_model_at_end needs a checkpoint at every evaluation: the same strategy, and save steps
// that are a multiple of the eval steps.
void check_load_best_model_at_end(const TrainingArguments& a) {
  if (!a.load_best_model_at_end || a.save_strategy == SaveStrategy::best) return;
  if (to_string(a.eval_strategy) != to_string(a.save_strategy))
    fail(
        fmt::format("--load_best_model_at_end requires the save and eval strategy to match (unless when "
                    "`--save_strategy=\"best\"`), but found\n- Evaluation strategy: {}\n- Save strategy: {}",
                    to_string(a.eval_strategy), to_string(a.save_strategy)));
  if (a.eval_strategy != IntervalStrategy::steps || is_multiple(a.save_steps, *a.eval_steps)) return;
  const double save_steps = a.save_steps, eval_steps = *a.eval_steps;
  if (!(eval_steps < 1 || save_steps < 1))
    fail(fmt::format(
        "--load_best_model_at_end requires the saving steps to be a round multiple of the evaluation steps, "
        "but found {}, which is not a round multiple of {}.",
        save_steps, eval_steps));
  if (!(eval_steps < 1 && save_steps < 1))
    fail(fmt::format(
        "--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, which "
        "cannot get guaranteed when mixing ratio and absolute steps for save_steps {} and eval_steps {}.",
        save_steps, eval_steps));
  // HF multiplies both ratios by 1e6 to dodge binary fractions (0.3 % 0.1 != 0).
  constexpr double kLargeMultiplier = 1'000'000;
  if (!is_multiple(save_steps * kLargeMultiplier, eval_steps * kLargeMultiplier))
    fail(
        fmt::format("--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, but "
                    "found {}, which is not a multiple of {}.",
                    save_steps, eval_steps));
}

void check_schedule(const TrainingArguments& a) {
  if (a.lr_scheduler_type == SchedulerType::reduce_lr_on_plateau && a.eval_strategy == IntervalStrategy::no)
    fail("lr_scheduler_type reduce_lr_on_plateau requires an eval strategy");
  // HF says "must be an integer or a float" of any negative value, which misleads (issue 16).
  if (a.warmup_steps < 0)
    fail(
        fmt::format("warmup_steps must be 0 or more (a whole number of steps, or a fraction below 1 of the "
                    "training steps), got {}",
                    a.warmup_steps));
  if (a.warmup_ratio && (*a.warmup_ratio < 0 || *a.warmup_ratio > 1))  // HF v4's check
    fail("warmup_ratio must lie in range [0,1]");
}

// ---- 4. Kiln's own checks: values HF accepts here but that fail later, or make no sense --------
void check_step_values(const TrainingArguments& a) {
  if (a.logging_strategy == IntervalStrategy::steps)
    check_positive_steps("logging_steps", a.logging_steps, "logging_strategy");
  if (a.eval_strategy == IntervalStrategy::steps) check_positive_steps("eval_steps", *a.eval_steps, "eval_strategy");
  if (a.save_strategy == SaveStrategy::steps && a.save_steps == 0)
    fail("save strategy steps requires non-zero --save_steps");
  if (a.save_strategy == SaveStrategy::steps) check_positive_steps("save_steps", a.save_steps, "save_strategy");
}

template <typename T>
void require(bool ok, std::string_view name, T value, std::string_view what) {
  if (!ok) fail(fmt::format("--{} must be {}, got {}", name, what, value));
}

void check_sizes(const TrainingArguments& a) {
  require(a.per_device_train_batch_size >= 1, "per_device_train_batch_size", a.per_device_train_batch_size,
          "a positive integer");
  require(a.per_device_eval_batch_size >= 1, "per_device_eval_batch_size", a.per_device_eval_batch_size,
          "a positive integer");
  require(a.gradient_accumulation_steps >= 1, "gradient_accumulation_steps", a.gradient_accumulation_steps,
          "a positive integer");
  if (a.eval_accumulation_steps)
    require(*a.eval_accumulation_steps >= 1, "eval_accumulation_steps", *a.eval_accumulation_steps,
            "a positive integer");
  require(a.dataloader_num_workers >= 0, "dataloader_num_workers", a.dataloader_num_workers, "0 or more");
  if (a.dataloader_prefetch_factor && a.dataloader_num_workers == 0)  // HF's check and message
    fail(
        "--dataloader_prefetch_factor can only be set when data is loaded in a different process, i.e. when "
        "--dataloader_num_workers > 1.");
  if (a.dataloader_prefetch_factor)
    require(*a.dataloader_prefetch_factor >= 1, "dataloader_prefetch_factor", *a.dataloader_prefetch_factor,
            "a positive integer");
  require(std::isfinite(a.num_train_epochs) && a.num_train_epochs >= 0, "num_train_epochs", a.num_train_epochs,
          "a finite number >= 0");
  require(std::isfinite(a.warmup_steps), "warmup_steps", a.warmup_steps, "finite");
  require(a.label_smoothing_factor >= 0 && a.label_smoothing_factor <= 1, "label_smoothing_factor",
          a.label_smoothing_factor, "in [0, 1]");
  require(a.nan_inf_patience >= 0, "nan_inf_patience", a.nan_inf_patience, "0 (never stop) or more");
  if (a.ddp_backend && *a.ddp_backend != "mpi")
    fail(fmt::format("ddp_backend '{}': Kiln's distributed backend is MPI ('mpi'): start the ranks with mpirun",
                     *a.ddp_backend));
  require(a.ddp_timeout > 0, "ddp_timeout", a.ddp_timeout, "> 0 seconds");
  if (a.ddp_bucket_cap_mb) require(*a.ddp_bucket_cap_mb > 0, "ddp_bucket_cap_mb", *a.ddp_bucket_cap_mb, "> 0");
  if (a.fp16 && a.bf16) fail("At most one of fp16 and bf16 can be True, but not both");
  if (a.fp16_full_eval && a.bf16_full_eval)
    fail("At most one of fp16 and bf16 can be True for full eval, but not both");
  if (a.half_precision_backend != "auto" && a.half_precision_backend != "cpu_amp")
    fail(fmt::format("half_precision_backend '{}': Kiln scales the loss itself; use 'auto' or 'cpu_amp'",
                     a.half_precision_backend));
  if (const auto it = a.gradient_checkpointing_kwargs.find("boundaries"); it != a.gradient_checkpointing_kwargs.end()) {
    bool names = it->is_array();
    if (names)
      for (const auto& v : *it) names = names && v.is_string();
    if (!names)
      fail(
          fmt::format("gradient_checkpointing_kwargs: 'boundaries' must be a list of value names, got {}", it->dump()));
  }
}

// torch.optim's constructor checks, with its messages, made here rather than at the first step.
void check_optimizer(const TrainingArguments& a) {
  if (!(a.learning_rate >= 0)) fail(fmt::format("Invalid learning rate: {}", a.learning_rate));
  if (!(a.weight_decay >= 0)) fail(fmt::format("Invalid weight_decay value: {}", a.weight_decay));
  if (a.optim == OptimizerName::sgd || a.optim == OptimizerName::adafactor) return;
  if (a.optim == OptimizerName::adagrad) {
    detail::adagrad_options(a);  // optim_args: the names and values torch.optim.Adagrad takes
    return;
  }
  if (!(a.adam_epsilon >= 0)) fail(fmt::format("Invalid epsilon value: {}", a.adam_epsilon));
  if (!(a.adam_beta1 >= 0 && a.adam_beta1 < 1))
    fail(fmt::format("Invalid beta parameter at index 0: {}", a.adam_beta1));
  if (!(a.adam_beta2 >= 0 && a.adam_beta2 < 1))
    fail(fmt::format("Invalid beta parameter at index 1: {}", a.adam_beta2));
}

// optimum-graphcore's IPUTrainingArguments fields, and the IPUConfig they name (read now, so that a
// bad one fails before any model is loaded; the Trainer reads it again for its run).
void check_ipu(const TrainingArguments& a) {
  if (a.fp32 && *a.fp32 && (a.fp16 || a.bf16))
    fail(fmt::format("fp32=True asks for float32 training, but {}=True", a.fp16 ? "fp16" : "bf16"));
  static const std::set<std::string> modes = {"sequential", "async", "async_rebatched"};
  if (!modes.count(a.dataloader_mode))
    fail(fmt::format("dataloader_mode '{}' is not one of 'sequential', 'async', 'async_rebatched'", a.dataloader_mode));
  if (a.n_ipu) require(*a.n_ipu >= 1, "n_ipu", *a.n_ipu, "a positive integer");
  if (a.lamb && a.lamb_no_bias_correction) fail("give one of lamb and lamb_no_bias_correction");
  if (a.compile_only && a.resume_from_checkpoint)
    fail("compile_only plans the run and stops before any step: resume_from_checkpoint has nothing to resume");
  ipu_config(a);
}

// The DeepSpeed config, read and checked against the arguments now (for the world size the launcher
// set), so that a bad one fails before any model is loaded; the Trainer reads it again for its run.
void check_deepspeed(const TrainingArguments& a) { deepspeed_config(a, dist::launched_world_size()); }

}  // namespace

// The steps run in this order, so that the first failing rule (HF's before Kiln's) is the one reported.
void TrainingArguments::validate() {
  normalise(*this);
  detail::apply_compat(*this);
  derive_values(*this);
  check_interval_steps(*this);
  check_load_best_model_at_end(*this);
  check_schedule(*this);
  check_step_values(*this);
  check_sizes(*this);
  check_optimizer(*this);
  check_ipu(*this);
  check_deepspeed(*this);
}

int64_t TrainingArguments::get_warmup_steps(int64_t num_training_steps) const {
  if (warmup_steps >= 1) return static_cast<int64_t>(warmup_steps);  // Python's int() truncates
  if (warmup_steps > 0) return static_cast<int64_t>(std::ceil(static_cast<double>(num_training_steps) * warmup_steps));
  if (warmup_ratio) return static_cast<int64_t>(std::ceil(static_cast<double>(num_training_steps) * *warmup_ratio));
  return 0;
}

int64_t TrainingArguments::resolved_steps(std::optional<double> value, int64_t max_steps) {
  if (!value) return 500;
  if (*value < 1) return static_cast<int64_t>(std::ceil(static_cast<double>(max_steps) * *value));
  return static_cast<int64_t>(*value);
}

}  // namespace kiln::trainer
