// What a checkpoint folder holds besides trainer_state.json: model.safetensors (every parameter),
// optimizer.safetensors (the optimizer's slots; type, step and learning rate in the metadata),
// scheduler.json, scaler.json (fp16 runs: the loss scaler), rng_state.json (the Dropout run count and the loss sums the
// logs are made of) and training_args.json. Everything the next step depends on is there, so a resumed run is
// bit-identical to an uninterrupted one.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/safetensors.h"
#include "trainer/loop/checkpoint_folder.h"
#include "trainer/loop/trainer_impl.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IOError(fmt::format("checkpoint file '{}' is missing", path.string()));
  return parse_json(read_file_bytes(path.string(), "checkpoint file", kMaxJsonBytes), "'" + path.string() + "'");
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  write_file_atomically(path.string(), j.dump(2) + "\n");
}

}  // namespace

void save_checkpoint_files(const Trainer::Impl& m, const TrainingArguments& args, const TrainerState& state,
                           const std::string& folder) {
  const fs::path dir(folder);
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const auto& name : m.module->parameter_names()) weights.emplace_back(name, m.state->parameter(name).data());
  write_safetensors((dir / "model.safetensors").string(), weights, {{"format", "pt"}});
  if (args.save_only_model) {  // HF's save_only_model: no optimizer, scheduler or RNG state
    args.save((dir / "training_args.json").string());
    write_json(dir / kTrainerStateFile, state.to_json());
    return;
  }

  const training::OptimizerState& o = m.state->optimizer_state();
  std::vector<std::pair<std::string, Tensor>> slots;
  nlohmann::json slot_names = nlohmann::json::array();
  for (const auto& [slot, tensors] : o.slots) {
    slot_names.push_back(slot);
    for (const auto& [param, t] : tensors)
      if (t.defined()) slots.emplace_back(slot + "." + param, t);
  }
  nlohmann::json info{{"type", o.type}, {"step", o.step}, {"learning_rate", o.learning_rate}, {"slots", slot_names}};
  write_safetensors((dir / "optimizer.safetensors").string(), slots, {{"kiln.optimizer", info.dump()}});

  write_json(dir / "scheduler.json", m.scheduler->state());
  if (m.scaler) write_json(dir / "scaler.json", m.scaler->state_dict());
  write_json(dir / "rng_state.json", {{"seed", args.seed},
                                      {"training_runs", m.module->training_run_count()},
                                      {"tr_loss", m.tr_loss},
                                      {"total_loss", m.total_loss},
                                      {"globalstep_last_logged", m.globalstep_last_logged},
                                      {"nan_inf_run", m.nan_inf_run},
                                      {"skipped_updates", m.skipped_updates},
                                      {"scaler_skips", m.scaler_skips}});
  args.save((dir / "training_args.json").string());
  write_json(dir / kTrainerStateFile, state.to_json());
}

void load_weights(Trainer::Impl& m, const std::string& folder) {
  const fs::path dir(folder);
  const SafetensorsFile weights = read_safetensors((dir / "model.safetensors").string());
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : weights.tensors) by_name[name] = &t;
  const auto& params = m.module->parameter_names();
  for (const auto& [name, t] : weights.tensors)
    if (std::find(params.begin(), params.end(), name) == params.end())
      throw CorruptFile(
          fmt::format("checkpoint '{}': model.safetensors holds '{}', which is not a parameter of the "
                      "model (a checkpoint of another model?)",
                      folder, name));
  for (const auto& name : params) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw CorruptFile(fmt::format("checkpoint '{}' has no weights for parameter '{}'", folder, name));
    m.state->parameter(name).set_data(*it->second);
  }
}

namespace {

// A folder without optimizer.safetensors: saved with save_only_model (its training_args.json says
// so), or damaged.
void check_optimizer_file(const fs::path& dir) {
  if (fs::exists(dir / "optimizer.safetensors")) return;
  bool model_only = false;
  try {
    model_only = read_json(dir / "training_args.json").value("save_only_model", false);
  } catch (const std::exception&) {
    model_only = false;  // no readable arguments: report the missing file itself
  }
  if (model_only)
    throw InvalidArgument(
        fmt::format("checkpoint '{}' holds only the model (saved with save_only_model): training "
                    "cannot resume from it; load its weights instead (evaluate / predict with "
                    "--resume_from_checkpoint, or Trainer::load_model_weights)",
                    dir.string()));
  throw CorruptFile(
      fmt::format("checkpoint '{}' has no optimizer.safetensors: it is incomplete or damaged, and "
                  "training cannot resume from it",
                  dir.string()));
}

// The step counts of trainer_state.json, the optimizer and the scheduler are written together and
// must agree; an edited or mixed-up file would otherwise resume into a different run silently.
void check_steps_agree(const Trainer::Impl& m, const TrainerState& loaded, const training::OptimizerState& o,
                       const std::string& folder) {
  if (loaded.global_step < 0)
    throw CorruptFile(
        fmt::format("checkpoint '{}': trainer_state.json has a negative global_step {}", folder, loaded.global_step));
  if (o.step + m.skipped_updates != loaded.global_step)
    throw CorruptFile(
        fmt::format("checkpoint '{}' disagrees with itself: trainer_state.json says global_step {} "
                    "but optimizer.safetensors holds optimizer step {} and rng_state.json {} skipped updates",
                    folder, loaded.global_step, o.step, m.skipped_updates));
  if (!m.scheduler->steps_on_metric() && m.scheduler->last_step() + m.scaler_skips != loaded.global_step)
    throw CorruptFile(
        fmt::format("checkpoint '{}' disagrees with itself: trainer_state.json says global_step {} "
                    "but scheduler.json's last_step is {} and rng_state.json {} loss-scaler skips",
                    folder, loaded.global_step, m.scheduler->last_step(), m.scaler_skips));
}

// fp16: the loss scaler's state, and the Module's scale with it.
void load_scaler(Trainer::Impl& m, const std::string& folder) {
  const fs::path path = fs::path(folder) / "scaler.json";
  if (!fs::exists(path))
    throw CorruptFile(fmt::format(
        "'{}' has no scaler.json: it was not saved by an fp16 run, and this run scales its loss (fp16)", folder));
  try {
    m.scaler->load_state_dict(read_json(path));
  } catch (const CorruptFile& e) {
    throw CorruptFile(fmt::format("'{}/scaler.json': {}", folder, e.what()));
  }
  m.module->set_loss_scale(static_cast<float>(m.scaler->scale()));
}

}  // namespace

void load_checkpoint_files(Trainer::Impl& m, TrainerState& state, const std::string& folder) {
  const fs::path dir(folder);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw IOError(fmt::format("checkpoint '{}' is a file; a checkpoint is a folder (checkpoint-<step>)", folder));
  if (!fs::is_directory(dir, ec)) throw IOError(fmt::format("checkpoint folder '{}' does not exist", folder));
  const TrainerState loaded = TrainerState::from_json(read_json(dir / kTrainerStateFile));
  check_optimizer_file(dir);
  load_weights(m, folder);

  const SafetensorsFile opt = read_safetensors((dir / "optimizer.safetensors").string());
  auto meta = opt.metadata.find("kiln.optimizer");
  if (meta == opt.metadata.end())
    throw CorruptFile(fmt::format("'{}/optimizer.safetensors' has no optimizer metadata", folder));
  std::string type;
  int64_t step = 0;
  float learning_rate = 0;
  try {
    check_json_limits(meta->second, "optimizer metadata");
    const nlohmann::json info = nlohmann::json::parse(meta->second);
    type = info.at("type").get<std::string>();
    step = json_int64(info.at("step"), "optimizer metadata: step");
    learning_rate = json_float(info.at("learning_rate"), "optimizer metadata: learning_rate");
  } catch (const std::exception& e) {  // nlohmann's errors and json_int64's CorruptFile
    throw CorruptFile(fmt::format("'{}/optimizer.safetensors': bad optimizer metadata: {}", folder, e.what()));
  }
  training::OptimizerState& o = m.state->optimizer_state();
  if (type != o.type)
    throw InvalidArgument(
        fmt::format("checkpoint '{}' holds {} optimizer state but the run uses {}", folder, type, o.type));
  o.step = step;
  o.learning_rate = learning_rate;
  for (const auto& [key, t] : opt.tensors) {
    const auto dot = key.find('.');
    if (dot == std::string::npos)
      throw CorruptFile(fmt::format("'{}/optimizer.safetensors': bad key '{}'", folder, key));
    Tensor& slot = o.slots[key.substr(0, dot)][key.substr(dot + 1)];
    if (slot.defined() && (slot.shape() != t.shape() || slot.dtype() != t.dtype()))
      throw CorruptFile(fmt::format("'{}/optimizer.safetensors': '{}' is {} but the run's is {}", folder, key,
                                    t.describe(), slot.describe()));
    if (slot.defined()) slot.copy_from(t);
    else slot = t.clone();
  }

  m.scheduler->load_state(read_json(dir / "scheduler.json"));
  if (m.scaler) load_scaler(m, folder);
  const nlohmann::json rng = read_json(dir / "rng_state.json");
  try {
    m.module->set_training_run_count(json_uint64(rng.at("training_runs"), "training_runs"));
    m.tr_loss = rng.at("tr_loss").get<double>();
    m.total_loss = rng.at("total_loss").get<double>();
    m.globalstep_last_logged = json_int64(rng.at("globalstep_last_logged"), "globalstep_last_logged");
    m.nan_inf_run = json_int64(rng.at("nan_inf_run"), "nan_inf_run");
    // Absent from checkpoints written before updates could be skipped and resumed.
    m.skipped_updates = rng.contains("skipped_updates") ? json_int64(rng["skipped_updates"], "skipped_updates") : 0;
    m.scaler_skips = rng.contains("scaler_skips") ? json_int64(rng["scaler_skips"], "scaler_skips") : 0;
  } catch (const std::exception& e) {  // nlohmann's errors and json_int64's CorruptFile
    throw CorruptFile(fmt::format("'{}/rng_state.json': {}", folder, e.what()));
  }
  check_steps_agree(m, loaded, o, folder);
  // The run's own settings stay (max_steps, logging steps...); the progress comes from the checkpoint.
  state.global_step = loaded.global_step;
  state.epoch = loaded.epoch;
  state.log_history = loaded.log_history;
  state.best_metric = loaded.best_metric;
  state.best_global_step = loaded.best_global_step;
  state.best_model_checkpoint = loaded.best_model_checkpoint;
  state.stateful_callbacks = loaded.stateful_callbacks;
  state.total_flos = loaded.total_flos;
  state.num_input_tokens_seen = loaded.num_input_tokens_seen;
}

}  // namespace kiln::trainer
