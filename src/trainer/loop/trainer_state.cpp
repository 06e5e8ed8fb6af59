// TrainerState <-> trainer_state.json, with Hugging Face's field names.
#include "kiln/trainer_state.h"

#include <fmt/format.h>

#include "core/json_text.h"
#include "kiln/error.h"

namespace kiln::trainer {

nlohmann::json TrainerState::to_json() const {
  nlohmann::json j;
  j["best_global_step"] = best_global_step ? nlohmann::json(*best_global_step) : nlohmann::json(nullptr);
  j["best_metric"] = best_metric ? nlohmann::json(*best_metric) : nlohmann::json(nullptr);
  j["best_model_checkpoint"] = best_model_checkpoint ? nlohmann::json(*best_model_checkpoint) : nlohmann::json(nullptr);
  j["epoch"] = epoch;
  j["eval_steps"] = eval_steps;
  j["global_step"] = global_step;
  j["is_hyper_param_search"] = is_hyper_param_search;
  j["is_local_process_zero"] = is_local_process_zero;
  j["is_world_process_zero"] = is_world_process_zero;
  j["log_history"] = log_history;
  j["logging_steps"] = logging_steps;
  j["max_steps"] = max_steps;
  j["num_input_tokens_seen"] = num_input_tokens_seen;
  j["num_train_epochs"] = num_train_epochs;
  j["save_steps"] = save_steps;
  j["stateful_callbacks"] = stateful_callbacks;
  j["total_flos"] = total_flos;
  j["train_batch_size"] = train_batch_size;
  j["trial_name"] = nullptr;
  j["trial_params"] = nullptr;
  return j;
}

TrainerState TrainerState::from_json(const nlohmann::json& j) {
  TrainerState s;
  try {
    if (!j.at("best_metric").is_null()) s.best_metric = j.at("best_metric").get<double>();
    if (j.contains("best_global_step") && !j.at("best_global_step").is_null())
      s.best_global_step = json_int64(j.at("best_global_step"), "trainer state: best_global_step");
    if (!j.at("best_model_checkpoint").is_null())
      s.best_model_checkpoint = j.at("best_model_checkpoint").get<std::string>();
    s.epoch = j.at("epoch").get<double>();
    s.eval_steps = json_int64(j.at("eval_steps"), "trainer state: eval_steps");
    s.global_step = json_int64(j.at("global_step"), "trainer state: global_step");
    s.log_history = j.at("log_history").get<std::vector<nlohmann::json>>();
    s.logging_steps = json_int64(j.at("logging_steps"), "trainer state: logging_steps");
    s.max_steps = json_int64(j.at("max_steps"), "trainer state: max_steps");
    if (j.contains("num_input_tokens_seen"))
      s.num_input_tokens_seen = json_int64(j.at("num_input_tokens_seen"), "trainer state: num_input_tokens_seen");
    s.num_train_epochs = json_int64(j.at("num_train_epochs"), "trainer state: num_train_epochs");
    s.save_steps = json_int64(j.at("save_steps"), "trainer state: save_steps");
    s.total_flos = j.at("total_flos").get<double>();
    s.train_batch_size = json_int64(j.at("train_batch_size"), "trainer state: train_batch_size");
    s.stateful_callbacks = j.value("stateful_callbacks", nlohmann::json::object());
    if (!s.stateful_callbacks.is_object()) throw CorruptFile("trainer state: stateful_callbacks is not an object");
  } catch (const nlohmann::json::exception& e) {
    throw CorruptFile(fmt::format("trainer state: {}", e.what()));
  }
  return s;
}

nlohmann::json TrainerControl::state() const {
  return {{"args",
           {{"should_training_stop", should_training_stop},
            {"should_epoch_stop", should_epoch_stop},
            {"should_save", should_save},
            {"should_evaluate", should_evaluate},
            {"should_log", should_log}}},
          {"attributes", nlohmann::json::object()}};
}

void TrainerControl::load_state(const nlohmann::json& state) {
  try {
    const auto& a = state.at("args");
    should_training_stop = a.at("should_training_stop").get<bool>();
    should_epoch_stop = a.at("should_epoch_stop").get<bool>();
    should_save = a.at("should_save").get<bool>();
    should_evaluate = a.at("should_evaluate").get<bool>();
    should_log = a.at("should_log").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw CorruptFile(fmt::format("trainer state: TrainerControl: {}", e.what()));
  }
}

}  // namespace kiln::trainer
