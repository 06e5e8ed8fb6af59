// The report_to registry and the TensorBoard integration (HF's TensorBoardCallback over Kiln's
// own event-file writer).
#include "kiln/integrations.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "kiln/error.h"

namespace kiln::trainer {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, IntegrationFactory> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

struct TensorBoardRegistrar {
  TensorBoardRegistrar() {
    register_integration("tensorboard", [] { return std::make_shared<TensorBoardCallback>(); });
  }
} const tensorboard_registrar;

}  // namespace

void register_integration(const std::string& name, IntegrationFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> integration_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

std::vector<std::shared_ptr<TrainerCallback>> reporting_integration_callbacks(
    const std::vector<std::string>& report_to) {
  std::vector<std::string> names;
  for (const auto& n : report_to) {
    if (n == "none") continue;
    if (n == "all") {
      for (const auto& all : integration_names())
        if (std::find(names.begin(), names.end(), all) == names.end()) names.push_back(all);
    } else if (std::find(names.begin(), names.end(), n) == names.end()) {
      names.push_back(n);
    }
  }
  std::vector<std::shared_ptr<TrainerCallback>> out;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& n : names) {
    auto it = r.factories.find(n);
    if (it == r.factories.end()) {
      std::string known;
      for (const auto& [k, f] : r.factories) known += (known.empty() ? "" : ", ") + k;
      throw InvalidArgument(
          fmt::format("report_to: '{}' is not a supported integration; Kiln has: {} (or \"all\", "
                      "\"none\")",
                      n, known));
    }
    out.push_back(it->second());
  }
  return out;
}

std::string tensorboard_tag(const std::string& key) {
  if (key.rfind("eval_", 0) == 0) return "eval/" + key.substr(5);
  if (key.rfind("test_", 0) == 0) return "test/" + key.substr(5);
  return "train/" + key;
}

TensorBoardCallback::TensorBoardCallback(std::optional<std::string> log_dir) : log_dir_(std::move(log_dir)) {}

void TensorBoardCallback::on_train_begin(const Args& args, const TrainerState& state, TrainerControl&,
                                         const CallbackContext&) {
  if (!state.is_world_process_zero) return;
  if (!writer_) {
    const std::string dir = log_dir_ ? *log_dir_ : args.logging_dir.value_or(default_logging_dir(args.output_dir));
    writer_ = std::make_unique<TensorBoardWriter>(dir);
  }
  writer_->add_text("args", args.to_json_string(), 0);
  writer_->flush();
}

void TensorBoardCallback::on_log(const Args& args, const TrainerState& state, TrainerControl& control,
                                 const CallbackContext& ctx) {
  if (!state.is_world_process_zero || !ctx.logs) return;
  if (!writer_) on_train_begin(args, state, control, ctx);  // evaluate() without train(), as HF
  for (const auto& [k, v] : *ctx.logs) writer_->add_scalar(tensorboard_tag(k), v, state.global_step);
  writer_->flush();
}

void TensorBoardCallback::on_train_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) {
  if (!writer_) return;
  writer_->flush();
  writer_.reset();
}

}  // namespace kiln::trainer
