// TrainerState <-> trainer_state.json, with Hugging Face's field names.
#include <fmt/format.h>

#include "kiln/error.h"
#include "kiln/trainer.h"

namespace kiln::trainer {

nlohmann::json TrainerState::to_json() const {
  nlohmann::json j;
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
  j["stateful_callbacks"] = nlohmann::json::object();
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
    if (!j.at("best_model_checkpoint").is_null()) s.best_model_checkpoint = j.at("best_model_checkpoint").get<std::string>();
    s.epoch = j.at("epoch").get<double>();
    s.eval_steps = j.at("eval_steps").get<int64_t>();
    s.global_step = j.at("global_step").get<int64_t>();
    s.log_history = j.at("log_history").get<std::vector<nlohmann::json>>();
    s.logging_steps = j.at("logging_steps").get<int64_t>();
    s.max_steps = j.at("max_steps").get<int64_t>();
    s.num_input_tokens_seen = j.value("num_input_tokens_seen", int64_t{0});
    s.num_train_epochs = j.at("num_train_epochs").get<int64_t>();
    s.save_steps = j.at("save_steps").get<int64_t>();
    s.total_flos = j.at("total_flos").get<double>();
    s.train_batch_size = j.at("train_batch_size").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw CorruptFile(fmt::format("trainer state: {}", e.what()));
  }
  return s;
}

}  // namespace kiln::trainer
