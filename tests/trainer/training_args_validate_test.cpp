// TrainingArguments.validate() against Hugging Face's __post_init__: each rule with HF's message,
// and Kiln's own checks.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "kiln/training_args.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

using Argv = std::vector<std::string>;
using kiln::test::error_message;

TrainingArguments validated(TrainingArguments a) {
  a.validate();
  return a;
}

void expect_invalid(const Argv& argv, const std::string& message) {
  EXPECT_EQ(error_message<InvalidArgument>([&] { TrainingArguments::parse_args(argv); }), message);
}

TEST(TrainingArgumentsValidate, StepsRules) {
  auto a = TrainingArguments::parse_args({"--eval_strategy", "steps", "--logging_steps", "50"});
  EXPECT_EQ(a.eval_steps, 50);  // falls back to logging_steps
  EXPECT_TRUE(a.do_eval);
  EXPECT_EQ(TrainingArguments::parse_args({"--eval_strategy", "steps", "--eval_steps", "0"}).eval_steps, 500);
  expect_invalid({"--eval_strategy", "steps", "--logging_steps", "0"},
                 "evaluation strategy steps requires either non-zero --eval_steps or --logging_steps");
  expect_invalid({"--logging_steps", "0"}, "logging strategy steps requires non-zero --logging_steps");
  EXPECT_EQ(TrainingArguments::parse_args({"--logging_steps", "0", "--logging_strategy", "no"}).logging_steps, 0);
  expect_invalid({"--logging_steps", "2.5"}, "--logging_steps must be an integer if bigger than 1: 2.5");
  expect_invalid({"--eval_strategy", "steps", "--eval_steps", "10.5"},
                 "--eval_steps must be an integer if bigger than 1: 10.5");
  expect_invalid({"--save_steps", "7.5"}, "--save_steps must be an integer if bigger than 1: 7.5");
  // Ratios below 1 are fine, and so are non-integers for strategies that do not use them.
  EXPECT_EQ(TrainingArguments::parse_args({"--save_steps", "0.3"}).save_steps, 0.3);
  EXPECT_EQ(TrainingArguments::parse_args({"--save_steps", "7.5", "--save_strategy", "epoch"}).save_steps, 7.5);
  // Kiln's own: positive when used.
  expect_invalid({"--logging_steps", "-5"},
                 "--logging_steps must be an integer or a ratio in (0, 1) when logging_strategy is \"steps\", got -5");
  expect_invalid({"--save_steps", "0"}, "save strategy steps requires non-zero --save_steps");
  expect_invalid({"--eval_strategy", "steps", "--eval_steps", "-0.5"},
                 "--eval_steps must be an integer or a ratio in (0, 1) when eval_strategy is \"steps\", got -0.5");
}

TEST(TrainingArgumentsValidate, LoadBestModelAtEnd) {
  expect_invalid({"--load_best_model_at_end"},
                 "--load_best_model_at_end requires the save and eval strategy to match (unless when "
                 "`--save_strategy=\"best\"`), but found\n- Evaluation strategy: no\n- Save strategy: steps");
  expect_invalid({"--load_best_model_at_end", "--eval_strategy", "steps", "--eval_steps", "30", "--save_steps", "50"},
                 "--load_best_model_at_end requires the saving steps to be a round multiple of the evaluation steps, "
                 "but found 50, which is not a round multiple of 30.");
  expect_invalid({"--load_best_model_at_end", "--eval_strategy", "steps", "--eval_steps", "100", "--save_steps", "0.5"},
                 "--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, which "
                 "cannot get guaranteed when mixing ratio and absolute steps for save_steps 0.5 and eval_steps 100.");
  expect_invalid(
      {"--load_best_model_at_end", "--eval_strategy", "steps", "--eval_steps", "0.1", "--save_steps", "0.25"},
      "--load_best_model_at_end requires the saving steps to be a multiple of the evaluation steps, but "
      "found 0.25, which is not a multiple of 0.1.");
  // 0.3 % 0.1 != 0 in binary floating point, but HF's x1e6 rule accepts it (Python: 300000.0 % 100000.0 == 0).
  auto ratio = TrainingArguments::parse_args(
      {"--load_best_model_at_end", "--eval_strategy", "steps", "--eval_steps", "0.1", "--save_steps", "0.3"});
  EXPECT_EQ(ratio.metric_for_best_model, "loss");
  EXPECT_EQ(ratio.greater_is_better, false);
  auto ok = TrainingArguments::parse_args(
      {"--load_best_model_at_end", "--eval_strategy", "steps", "--eval_steps", "30", "--save_steps", "90"});
  EXPECT_EQ(ok.save_steps, 90);
  // save_strategy "best" needs no match.
  auto best = TrainingArguments::parse_args({"--load_best_model_at_end", "--save_strategy", "best", "--eval_strategy",
                                             "epoch", "--metric_for_best_model", "eval_accuracy"});
  EXPECT_EQ(best.greater_is_better, true);
}

TEST(TrainingArgumentsValidate, MetricDefaults) {
  EXPECT_EQ(TrainingArguments::parse_args({"--metric_for_best_model", "accuracy"}).greater_is_better, true);
  EXPECT_EQ(TrainingArguments::parse_args({"--metric_for_best_model", "eval_loss"}).greater_is_better, false);
  EXPECT_EQ(TrainingArguments::parse_args({"--metric_for_best_model", "loss", "--greater_is_better", "true"})
                .greater_is_better,
            true);  // an explicit value is kept
  EXPECT_FALSE(TrainingArguments::parse_args({}).metric_for_best_model);
}

TEST(TrainingArgumentsValidate, ReduceLrOnPlateau) {
  expect_invalid({"--lr_scheduler_type", "reduce_lr_on_plateau"},
                 "lr_scheduler_type reduce_lr_on_plateau requires an eval strategy");
  auto a = TrainingArguments::parse_args({"--lr_scheduler_type", "reduce_lr_on_plateau", "--eval_strategy", "epoch"});
  EXPECT_EQ(a.metric_for_best_model, "loss");
  EXPECT_EQ(a.greater_is_better, false);
}

TEST(TrainingArgumentsValidate, WarmupRules) {
  // Issue 16: a negative value is named as such, not as a wrong type.
  expect_invalid({"--warmup_steps", "-1"},
                 "warmup_steps must be 0 or more (a whole number of steps, or a fraction below 1 of the training "
                 "steps), got -1");
  expect_invalid({"--warmup_ratio", "1.5"}, "warmup_ratio must lie in range [0,1]");
  expect_invalid({"--warmup_ratio", "-0.1"}, "warmup_ratio must lie in range [0,1]");
}

TEST(TrainingArgumentsValidate, DisableTqdmFollowsLogLevel) {
  EXPECT_EQ(TrainingArguments::parse_args({"--log_level", "error"}).disable_tqdm, true);
  EXPECT_EQ(TrainingArguments::parse_args({"--log_level", "critical"}).disable_tqdm, true);
  EXPECT_EQ(TrainingArguments::parse_args({"--log_level", "warning"}).disable_tqdm, false);
  EXPECT_EQ(TrainingArguments::parse_args({"--log_level", "debug"}).disable_tqdm, false);
  EXPECT_EQ(TrainingArguments::parse_args({"--log_level", "error", "--disable_tqdm", "false"}).disable_tqdm, false);
  expect_invalid({"--log_level", "loud"},
                 "argument --log_level: invalid choice: 'loud' (choose from 'detail', 'debug', 'info', 'warning', "
                 "'error', 'critical', 'passive')");
}

TEST(TrainingArgumentsValidate, PathsAndReportTo) {
  const char* home = std::getenv("HOME");
  if (home) {
    auto a = TrainingArguments::parse_args({"--output_dir", "~/kiln-out"});
    EXPECT_EQ(a.output_dir, std::string(home) + "/kiln-out");
    EXPECT_EQ(a.logging_dir->rfind(std::string(home) + "/kiln-out/runs/", 0), 0u) << *a.logging_dir;
  }
  EXPECT_EQ(TrainingArguments::parse_args({"--logging_dir", "tb"}).logging_dir, "tb");
  TrainingArguments none;
  none.report_to = {"none"};
  EXPECT_TRUE(validated(none).report_to.empty());
}

TEST(TrainingArgumentsValidate, KilnChecks) {
  expect_invalid({"--per_device_train_batch_size", "0"},
                 "--per_device_train_batch_size must be a positive integer, got 0");
  expect_invalid({"--per_device_eval_batch_size", "-2"},
                 "--per_device_eval_batch_size must be a positive integer, got -2");
  expect_invalid({"--gradient_accumulation_steps", "0"},
                 "--gradient_accumulation_steps must be a positive integer, got 0");
  expect_invalid({"--eval_accumulation_steps", "0"}, "--eval_accumulation_steps must be a positive integer, got 0");
  expect_invalid({"--dataloader_num_workers", "-1"}, "--dataloader_num_workers must be 0 or more, got -1");
  expect_invalid({"--label_smoothing_factor", "1.5"}, "--label_smoothing_factor must be in [0, 1], got 1.5");
  expect_invalid({"--nan_inf_patience", "-1"}, "--nan_inf_patience must be 0 (never stop) or more, got -1");
  expect_invalid({"--num_train_epochs", "-1"}, "--num_train_epochs must be a finite number >= 0, got -1");
  expect_invalid({"--learning_rate", "-0.1"}, "Invalid learning rate: -0.1");
  expect_invalid({"--adam_beta1", "1"}, "Invalid beta parameter at index 0: 1");
  expect_invalid({"--adam_beta2", "-0.5"}, "Invalid beta parameter at index 1: -0.5");
  expect_invalid({"--adam_epsilon", "-1e-8"}, "Invalid epsilon value: -1e-08");
  expect_invalid({"--weight_decay", "-0.01"}, "Invalid weight_decay value: -0.01");
  EXPECT_EQ(TrainingArguments::parse_args({"--optim", "sgd", "--adam_beta1", "1"}).adam_beta1, 1);  // unused by SGD
  TrainingArguments tokens;
  tokens.include_num_input_tokens_seen = "some";
  EXPECT_EQ(error_message<InvalidArgument>([&] { tokens.validate(); }),
            "include_num_input_tokens_seen must be one of ['all', 'non_padding', 'no'] or a boolean, got 'some'");
}

// ---- Derived values -------------------------------------------------------------------------------

}  // namespace
}  // namespace kiln::trainer
