// TrainerCallback's defaults and the small built-in callbacks: DefaultFlowCallback,
// PrinterCallback and EarlyStoppingCallback, with Hugging Face's rules.
#include <cxxabi.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <typeinfo>

#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/trainer_callback.h"

namespace kiln::trainer {

TrainerCallback::~TrainerCallback() = default;

std::string TrainerCallback::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string full = status == 0 && demangled ? demangled.get() : mangled;
  // "kiln::trainer::EarlyStoppingCallback" -> "EarlyStoppingCallback" (HF's __name__).
  const auto template_open = full.find('<');
  const auto colon = full.rfind("::", template_open);
  return colon == std::string::npos ? full : full.substr(colon + 2);
}

std::optional<nlohmann::json> TrainerCallback::state() const { return std::nullopt; }

void TrainerCallback::load_state(const nlohmann::json&) {}

void DefaultFlowCallback::on_step_end(const Args& args, const TrainerState& state, TrainerControl& control,
                                      const CallbackContext&) {
  const int64_t g = state.global_step;
  if (g == 1 && args.logging_first_step) control.should_log = true;
  if (args.logging_strategy == IntervalStrategy::steps && state.logging_steps > 0 && g % state.logging_steps == 0)
    control.should_log = true;
  if (args.eval_strategy == IntervalStrategy::steps && state.eval_steps > 0 && g % state.eval_steps == 0 &&
      args.eval_delay <= static_cast<double>(g))
    control.should_evaluate = true;
  if (args.save_strategy == SaveStrategy::steps && state.save_steps > 0 && g % state.save_steps == 0)
    control.should_save = true;
  if (g >= state.max_steps) {
    control.should_training_stop = true;
    // HF saves the model at the end when the strategy is steps.
    if (args.save_strategy == SaveStrategy::steps) control.should_save = true;
  }
}

void DefaultFlowCallback::on_epoch_end(const Args& args, const TrainerState& state, TrainerControl& control,
                                       const CallbackContext&) {
  if (args.logging_strategy == IntervalStrategy::epoch) control.should_log = true;
  if (args.eval_strategy == IntervalStrategy::epoch && args.eval_delay <= state.epoch) control.should_evaluate = true;
  if (args.save_strategy == SaveStrategy::epoch) control.should_save = true;
}

std::string format_logs(const Logs& logs) {
  std::string out = "{";
  for (const auto& [k, v] : logs) {
    if (out.size() > 1) out += ", ";
    std::string num = fmt::format("{}", v);
    // Python writes a float with a fraction or an exponent: 1.0, not 1.
    if (std::isfinite(v) && num.find_first_of(".e") == std::string::npos) num += ".0";
    out += fmt::format("'{}': {}", k, num);
  }
  return out + "}";
}

void PrinterCallback::on_log(const Args&, const TrainerState& state, TrainerControl&, const CallbackContext& ctx) {
  if (!ctx.logs || !state.is_local_process_zero) return;
  Logs shown;
  for (const auto& kv : *ctx.logs)
    if (kv.first != "total_flos") shown.push_back(kv);
  std::fprintf(out_, "%s\n", format_logs(shown).c_str());
  std::fflush(out_);
}

EarlyStoppingCallback::EarlyStoppingCallback(int64_t patience, double threshold)
    : early_stopping_patience(patience), early_stopping_threshold(threshold) {
  if (patience < 1) throw InvalidArgument(fmt::format("early_stopping_patience must be at least 1, got {}", patience));
  if (!(threshold >= 0)) throw InvalidArgument(fmt::format("early_stopping_threshold must be >= 0, got {}", threshold));
}

void EarlyStoppingCallback::on_train_begin(const Args& args, const TrainerState&, TrainerControl&,
                                           const CallbackContext&) {
  if (!args.load_best_model_at_end)
    std::fprintf(stderr,
                 "Using EarlyStoppingCallback without load_best_model_at_end=True. Once training is finished, "
                 "the best model will not be loaded automatically.\n");
  if (!args.metric_for_best_model)
    throw InvalidArgument("EarlyStoppingCallback requires metric_for_best_model to be defined");
  if (args.eval_strategy == IntervalStrategy::no)
    throw InvalidArgument("EarlyStoppingCallback requires IntervalStrategy of steps or epoch (eval_strategy)");
}

void EarlyStoppingCallback::on_evaluate(const Args& args, const TrainerState& state, TrainerControl& control,
                                        const CallbackContext& ctx) {
  if (!ctx.metrics || !args.metric_for_best_model) return;
  std::string key = *args.metric_for_best_model;
  if (key.rfind("eval_", 0) != 0) key = "eval_" + key;
  auto it = ctx.metrics->find(key);
  if (it == ctx.metrics->end()) {
    std::fprintf(stderr,
                 "early stopping required metric_for_best_model, but did not find %s so early stopping is "
                 "disabled\n",
                 key.c_str());
    return;
  }
  const double value = it->second;
  // state.best_metric is the best before this evaluation: the Trainer updates it afterwards.
  const bool greater = args.greater_is_better.value_or(false);
  const bool better = state.best_metric && (greater ? value > *state.best_metric : value < *state.best_metric);
  if (!state.best_metric || (better && std::abs(value - *state.best_metric) > early_stopping_threshold))
    early_stopping_patience_counter = 0;
  else ++early_stopping_patience_counter;
  if (early_stopping_patience_counter >= early_stopping_patience) control.should_training_stop = true;
}

std::optional<nlohmann::json> EarlyStoppingCallback::state() const {
  return nlohmann::json{
      {"args",
       {{"early_stopping_patience", early_stopping_patience}, {"early_stopping_threshold", early_stopping_threshold}}},
      {"attributes", {{"early_stopping_patience_counter", early_stopping_patience_counter}}}};
}

void EarlyStoppingCallback::load_state(const nlohmann::json& s) {
  try {
    early_stopping_patience = json_int64(s.at("args").at("early_stopping_patience"), "early_stopping_patience");
    early_stopping_threshold = s.at("args").at("early_stopping_threshold").get<double>();
    early_stopping_patience_counter =
        json_int64(s.at("attributes").at("early_stopping_patience_counter"), "early_stopping_patience_counter");
  } catch (const std::exception& e) {  // nlohmann's errors and json_int64's CorruptFile
    throw CorruptFile(fmt::format("trainer state: EarlyStoppingCallback: {}", e.what()));
  }
}

}  // namespace kiln::trainer
