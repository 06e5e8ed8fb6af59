// TrainingArguments::validate (HF's __post_init__ and _validate_args, in HF's order and with HF's
// messages, followed by Kiln's own checks) and the values the Trainer derives from the arguments.
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "kiln/error.h"
#include "kiln/training_args.h"

namespace kiln::trainer {
namespace {

// Python's logging levels for HF's trainer_log_levels; "passive" leaves the library's level,
// which is warning.
constexpr int kWarning = 30;
constexpr std::array<std::pair<std::string_view, int>, 7> kLogLevels{{
    {"detail", 10}, {"debug", 10}, {"info", 20}, {"warning", 30}, {"error", 40}, {"critical", 50}, {"passive", -1},
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

void TrainingArguments::validate() {
  // ---- 1. Defaults and normalisation (HF's __post_init__) ------------------------------------
  if (output_dir.empty()) output_dir = "trainer_output";  // HF's None; an empty path is no folder
  output_dir = expand_user(output_dir);
  if (!logging_dir) logging_dir = default_logging_dir(output_dir);  // HF v4's rule
  logging_dir = expand_user(*logging_dir);
  int level = log_level_number(log_level);
  if (!disable_tqdm) disable_tqdm = (level < 0 ? kWarning : level) > kWarning;
  if (include_num_input_tokens_seen != "all" && include_num_input_tokens_seen != "non_padding" &&
      include_num_input_tokens_seen != "no")
    fail(fmt::format("include_num_input_tokens_seen must be one of ['all', 'non_padding', 'no'] or a boolean, got "
                     "'{}'",
                     include_num_input_tokens_seen));

  // ---- 2. Derived values ---------------------------------------------------------------------
  if (!do_eval && eval_strategy != IntervalStrategy::no) do_eval = true;
  if (eval_strategy == IntervalStrategy::steps && (!eval_steps || *eval_steps == 0)) {
    if (logging_steps > 0)
      eval_steps = logging_steps;
    else
      fail(fmt::format("evaluation strategy {} requires either non-zero --eval_steps or --logging_steps",
                       to_string(eval_strategy)));
  }
  if ((load_best_model_at_end || lr_scheduler_type == SchedulerType::reduce_lr_on_plateau) && !metric_for_best_model)
    metric_for_best_model = "loss";
  if (!greater_is_better && metric_for_best_model)
    greater_is_better = !metric_for_best_model->ends_with("loss");
  if (report_to == std::vector<std::string>{"none"}) report_to.clear();

  // ---- 3. HF's _validate_args ----------------------------------------------------------------
  if (logging_strategy == IntervalStrategy::steps && logging_steps == 0)
    fail(fmt::format("logging strategy {} requires non-zero --logging_steps", to_string(logging_strategy)));
  // HF then converts these to int; Kiln keeps the double, which holds the same integer.
  if (logging_strategy == IntervalStrategy::steps && logging_steps > 1 && logging_steps != std::trunc(logging_steps))
    fail(fmt::format("--logging_steps must be an integer if bigger than 1: {}", logging_steps));
  if (eval_strategy == IntervalStrategy::steps && *eval_steps > 1 && *eval_steps != std::trunc(*eval_steps))
    fail(fmt::format("--eval_steps must be an integer if bigger than 1: {}", *eval_steps));
  if (save_strategy == SaveStrategy::steps && save_steps > 1 && save_steps != std::trunc(save_steps))
    fail(fmt::format("--save_steps must be an integer if bigger than 1: {}", save_steps));

  if (load_best_model_at_end && save_strategy != SaveStrategy::best) {
    if (to_string(eval_strategy) != to_string(save_strategy))
      fail(fmt::format(
          "--load_best_model_at_end requires the save and eval strategy to match (unless when "
          "`--save_strategy=\"best\"`), but found\n- Evaluation strategy: {}\n- Save strategy: {}",
          to_string(eval_strategy), to_string(save_strategy)));
    if (eval_strategy == IntervalStrategy::steps && !is_multiple(save_steps, *eval_steps)) {
      if (*eval_steps < 1 || save_steps < 1) {
        if (!(*eval_steps < 1 && save_steps < 1))
          fail(fmt::format(
              "--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, which "
              "cannot get guaranteed when mixing ratio and absolute steps for save_steps {} and eval_steps {}.",
              save_steps, *eval_steps));
        // HF multiplies both ratios by 1e6 to dodge binary fractions (0.3 % 0.1 != 0).
        constexpr double kLargeMultiplier = 1'000'000;
        if (!is_multiple(save_steps * kLargeMultiplier, *eval_steps * kLargeMultiplier))
          fail(fmt::format(
              "--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, but "
              "found {}, which is not a multiple of {}.",
              save_steps, *eval_steps));
      } else {
        fail(fmt::format(
            "--load_best_model_at_end requires the saving steps to be a round multiple of the evaluation steps, "
            "but found {}, which is not a round multiple of {}.",
            save_steps, *eval_steps));
      }
    }
  }
  if (lr_scheduler_type == SchedulerType::reduce_lr_on_plateau && eval_strategy == IntervalStrategy::no)
    fail("lr_scheduler_type reduce_lr_on_plateau requires an eval strategy");
  if (warmup_steps < 0) fail("warmup_steps must be an integer or a float");
  if (warmup_ratio && (*warmup_ratio < 0 || *warmup_ratio > 1))  // HF v4's check
    fail("warmup_ratio must lie in range [0,1]");

  // ---- 4. Kiln's own checks: values HF accepts here but that fail later, or make no sense ------
  if (logging_strategy == IntervalStrategy::steps)
    check_positive_steps("logging_steps", logging_steps, "logging_strategy");
  if (eval_strategy == IntervalStrategy::steps) check_positive_steps("eval_steps", *eval_steps, "eval_strategy");
  if (save_strategy == SaveStrategy::steps && save_steps == 0)
    fail("save strategy steps requires non-zero --save_steps");
  if (save_strategy == SaveStrategy::steps) check_positive_steps("save_steps", save_steps, "save_strategy");
  auto require = [](bool ok, std::string_view name, auto value, std::string_view what) {
    if (!ok) fail(fmt::format("--{} must be {}, got {}", name, what, value));
  };
  require(per_device_train_batch_size >= 1, "per_device_train_batch_size", per_device_train_batch_size,
          "a positive integer");
  require(per_device_eval_batch_size >= 1, "per_device_eval_batch_size", per_device_eval_batch_size,
          "a positive integer");
  require(gradient_accumulation_steps >= 1, "gradient_accumulation_steps", gradient_accumulation_steps,
          "a positive integer");
  if (eval_accumulation_steps)
    require(*eval_accumulation_steps >= 1, "eval_accumulation_steps", *eval_accumulation_steps, "a positive integer");
  require(dataloader_num_workers >= 0, "dataloader_num_workers", dataloader_num_workers, "0 or more");
  require(std::isfinite(num_train_epochs) && num_train_epochs >= 0, "num_train_epochs", num_train_epochs,
          "a finite number >= 0");
  require(std::isfinite(warmup_steps), "warmup_steps", warmup_steps, "finite");
  require(label_smoothing_factor >= 0 && label_smoothing_factor <= 1, "label_smoothing_factor", label_smoothing_factor,
          "in [0, 1]");
  require(nan_inf_patience >= 0, "nan_inf_patience", nan_inf_patience, "0 (never stop) or more");
  // torch.optim's constructor checks, with its messages, made here rather than at the first step.
  if (!(learning_rate >= 0)) fail(fmt::format("Invalid learning rate: {}", learning_rate));
  if (!(weight_decay >= 0)) fail(fmt::format("Invalid weight_decay value: {}", weight_decay));
  if (optim != OptimizerName::sgd) {
    if (!(adam_epsilon >= 0)) fail(fmt::format("Invalid epsilon value: {}", adam_epsilon));
    if (!(adam_beta1 >= 0 && adam_beta1 < 1)) fail(fmt::format("Invalid beta parameter at index 0: {}", adam_beta1));
    if (!(adam_beta2 >= 0 && adam_beta2 < 1)) fail(fmt::format("Invalid beta parameter at index 1: {}", adam_beta2));
  }
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
