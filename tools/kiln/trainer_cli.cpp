#include "trainer_cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<const data::Dataset> load_dataset(const std::string& spec, const std::string& label_column) {
  data::IdxOptions idx;
  if (spec.rfind("fashion-mnist:", 0) == 0) idx.normalize = data::kFashionMnistNormalization;
  if (spec == "fashion-mnist:train" || spec == "fashion-mnist:test") {
    const std::string split = spec == "fashion-mnist:train" ? "train" : "t10k";
    const fs::path dir(kFashionDir);
    if (!fs::exists(dir / (split + "-images-idx3-ubyte.gz")))
      throw IOError(fmt::format("Fashion-MNIST is not installed in {}: install Debian's dataset-fashion-mnist "
                                "(scripts/setup.sh does)", kFashionDir));
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
  throw InvalidArgument(fmt::format("data '{}': expected fashion-mnist:train|test, IMAGES,LABELS (IDX), a .npz or a "
                                    ".csv file", spec));
}

trainer::TrainingArguments cli_training_arguments(const std::vector<std::string>& flags) {
  std::vector<std::string> all = {"--output_dir", "kiln_output", "--learning_rate", "1e-3", "--num_train_epochs", "1"};
  all.insert(all.end(), flags.begin(), flags.end());  // later flags win
  return trainer::TrainingArguments::parse_args(all);
}

trainer::ModelSource model_source(const std::string& model, const std::string& loss) {
  if (ends_with(model, ".onnx")) return trainer::ModelSource::onnx(model, training::loss_type_from_string(loss));
  if (fs::is_directory(model)) return trainer::ModelSource::artifacts(model);
  return trainer::ModelSource::builtin(model);
}

trainer::Trainer::StepListener progress_bar(bool disabled) {
  if (disabled) return nullptr;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto start = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  return [tty, start](const trainer::TrainerState& s, double loss) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
    const double rate = elapsed > 0 ? static_cast<double>(s.global_step) / elapsed : 0.0;
    const double remaining = rate > 0 ? static_cast<double>(s.max_steps - s.global_step) / rate : 0.0;
    const int pct = s.max_steps > 0 ? static_cast<int>(100 * s.global_step / s.max_steps) : 0;
    auto clock = [](double sec) { return fmt::format("{:02d}:{:02d}", static_cast<int>(sec) / 60, static_cast<int>(sec) % 60); };
    if (tty) {
      const int width = 30, filled = width * pct / 100;
      std::fprintf(stderr, "\r%3d%%|%s%s| %lld/%lld [%s<%s, %.2fit/s, loss=%.4f]", pct,
                   std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), ' ').c_str(),
                   static_cast<long long>(s.global_step), static_cast<long long>(s.max_steps), clock(elapsed).c_str(),
                   clock(remaining).c_str(), rate, loss);
      if (s.global_step >= s.max_steps) std::fprintf(stderr, "\n");
    } else if (s.global_step % std::max<int64_t>(1, s.max_steps / 20) == 0 || s.global_step == s.max_steps) {
      std::fprintf(stderr, "step %lld/%lld (%d%%) loss %.4f, %.2f it/s\n", static_cast<long long>(s.global_step),
                   static_cast<long long>(s.max_steps), pct, loss, rate);
    }
  };
}

}  // namespace kiln::cli
