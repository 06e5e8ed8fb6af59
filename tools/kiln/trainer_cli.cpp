#include "trainer_cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/json_text.h"
#include "kiln/error.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<const data::Dataset> load_dataset(const std::string& spec, const std::string& label_column,
                                                  int64_t pad_token_id, bool skip_text) {
  data::IdxOptions idx;
  if (spec.rfind("fashion-mnist:", 0) == 0) idx.normalize = data::kFashionMnistNormalization;
  if (spec == "fashion-mnist:train" || spec == "fashion-mnist:test") {
    const std::string split = spec == "fashion-mnist:train" ? "train" : "t10k";
    const fs::path dir(kFashionDir);
    if (!fs::exists(dir / (split + "-images-idx3-ubyte.gz")))
      throw IOError(
          fmt::format("Fashion-MNIST is not installed in {}: install Debian's dataset-fashion-mnist "
                      "(scripts/setup.sh does)",
                      kFashionDir));
    return data::load_idx((dir / (split + "-images-idx3-ubyte.gz")).string(),
                          (dir / (split + "-labels-idx1-ubyte.gz")).string(), idx);
  }
  if (const auto comma = spec.find(','); comma != std::string::npos)
    return data::load_idx(spec.substr(0, comma), spec.substr(comma + 1), idx);
  if (ends_with(spec, ".npz")) return data::load_npz(spec);
  if (ends_with(spec, ".csv")) {
    data::CsvOptions o;
    o.label_column = label_column;
    return data::load_csv(spec, o);
  }
  if (ends_with(spec, ".jsonl")) {  // token sequences of any length: batches padded to their longest
    data::PaddingOptions o;
    o.pad_token_id = pad_token_id;
    data::JsonlOptions jsonl;
    jsonl.skip_text = skip_text;
    return std::make_shared<data::CollatedDataset>(data::load_jsonl(spec, jsonl), data::padding_collator(o));
  }
  throw InvalidArgument(
      fmt::format("data '{}': expected fashion-mnist:train|test, IMAGES,LABELS (IDX), a .npz, a .csv or a "
                  ".jsonl file",
                  spec));
}

trainer::TrainingArguments cli_training_arguments(const std::vector<std::string>& flags) {
  std::vector<std::string> all = {"--output_dir", "kiln_output", "--learning_rate", "1e-3", "--num_train_epochs", "1"};
  all.insert(all.end(), flags.begin(), flags.end());  // later flags win
  return trainer::TrainingArguments::parse_args(all);
}

trainer::ModelSource model_source(const std::string& model, const std::string& loss, const std::string& model_config) {
  const bool builtin = !ends_with(model, ".onnx") && !fs::is_directory(model);
  if (!model_config.empty() && !builtin)
    throw InvalidArgument(fmt::format("--model-config applies to built-in models; '{}' is a file or folder", model));
  if (ends_with(model, ".onnx")) return trainer::ModelSource::onnx(model, training::loss_type_from_string(loss));
  if (fs::is_directory(model)) return trainer::ModelSource::artifacts(model);
  nlohmann::json config = nlohmann::json::object();
  if (!model_config.empty()) {
    try {
      check_json_limits(model_config, "--model-config");
      config = nlohmann::json::parse(model_config);
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument(fmt::format("--model-config '{}' is not valid JSON: {}", model_config, e.what()));
    }
    if (!config.is_object())
      throw InvalidArgument(
          fmt::format("--model-config must be a JSON object such as '{{\"num_labels\": 10}}', got {}", model_config));
  }
  return trainer::ModelSource::builtin(model, std::move(config));
}

}  // namespace kiln::cli
