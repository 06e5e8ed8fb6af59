// The Hugging Face TrainingArguments fields Kiln has no member for (the current release's and the v4
// names scripts still pass): each is accepted in Python, on the command line and in JSON, kept in
// TrainingArguments::hf_compat, and either changes nothing on Kiln (the reason is in the table and in
// docs/trainer.md), or, when its value asks for what Kiln cannot do, is an Unsupported naming the
// field and why. A few are read by the Trainer (per_gpu_*, fp16_backend, eval_on_start,
// train_sampling_strategy, group_by_length, length_column_name, include_for_metrics,
// include_inputs_for_metrics).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/training_args.h"

namespace kiln::trainer::detail {

struct CompatField {
  enum class Kind { Bool, Int, OptInt, OptFloat, Str, OptStr, OptBool, Any };
  // NoEffect: any value is accepted and changes nothing; Refused: a value other than the default is
  // Unsupported; Read: the Trainer uses it (TrainingArguments::validate or the loop).
  enum class Rule { NoEffect, Refused, Read };
  const char* name;
  Kind kind;
  nlohmann::json default_value;
  Rule rule;
  const char* reason;
};

// In HF's declaration order (the current release's, then v4's).
const std::vector<CompatField>& compat_fields();

// validate()'s part: the v4 aliases copied onto their fields (per_gpu_*, fp16_backend), the values
// checked (choices), and a Refused field away from its default an Unsupported naming it.
void apply_compat(TrainingArguments& a);

// group_by_length=True or train_sampling_strategy="group_by_length".
bool groups_by_length(const TrainingArguments& a);
// optim="adagrad": torch.optim.Adagrad's options from weight_decay and optim_args (HF's
// "key=value,key=value": lr_decay, initial_accumulator_value, eps, maximize). InvalidArgument naming
// an unknown key or a bad value.
training::AdagradOptions adagrad_options(const TrainingArguments& a);
// Whether EvalPrediction gets `what` ("inputs" or "loss"): include_for_metrics names it (or, for
// "inputs", v4's include_inputs_for_metrics is set).
bool includes_for_metrics(const TrainingArguments& a, const std::string& what);

}  // namespace kiln::trainer::detail
