// Shared by `kiln train`, `kiln evaluate` and `kiln predict`: datasets named on the command line,
// TrainingArguments from the remaining flags, the accuracy metric and a progress bar.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/trainer.h"

namespace kiln::cli {

// "fashion-mnist:train" / "fashion-mnist:test" (Debian's dataset-fashion-mnist), "IMAGES,LABELS"
// (IDX files, gzipped or not), "FILE.npz" (arrays named after the model's inputs and "labels"),
// "FILE.csv" (numeric features, the label in column `label_column`), or "FILE.jsonl" (JSON Lines:
// one item per line, token sequences of any length, batches padded to their longest with
// `pad_token_id`, labels with -100, and an attention_mask added for input_ids; columns of text are
// left out when `skip_text`, TrainingArguments.remove_unused_columns).
std::shared_ptr<const data::Dataset> load_dataset(const std::string& spec, const std::string& label_column,
                                                  int64_t pad_token_id = 0, bool skip_text = true);

// TrainingArguments from HF-style flags, with Kiln's defaults for the command line where they
// differ from HF's (output_dir ./kiln_output, learning_rate 1e-3, num_train_epochs 1).
trainer::TrainingArguments cli_training_arguments(const std::vector<std::string>& flags);

// The model: a built-in name (a model zoo entry; `model_config`, a JSON object, overrides its
// config), a .onnx file (with `loss`), or an artifacts folder. InvalidArgument for a config that
// is not a JSON object, or one given for a model that is not built in.
trainer::ModelSource model_source(const std::string& model, const std::string& loss,
                                  const std::string& model_config = "");

}  // namespace kiln::cli
