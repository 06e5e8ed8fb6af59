// What a checkpoint folder holds besides trainer_state.json: model.safetensors (every parameter),
// optimizer.safetensors (the optimizer's slots; type, step and learning rate in the metadata), or
// with ZeRO one optimizer-rank<r>-of-<N>.safetensors per rank (its parameters' slots) and the
// optimizer_shards.json manifest that lists them,
// scheduler.json, scaler.json (fp16 runs: the loss scaler), rng_state.json (the Dropout run count and the loss sums the
// logs are made of) and training_args.json. Everything the next step depends on is there, so a resumed run is
// bit-identical to an uninterrupted one.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/npy.h"
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

const std::string kShardManifest = "optimizer_shards.json";

std::string shard_file(int rank, int size) { return fmt::format("optimizer-rank{}-of-{}.safetensors", rank, size); }

nlohmann::json optimizer_info(const training::OptimizerState& o) {
  nlohmann::json slot_names = nlohmann::json::array();
  for (const auto& [slot, tensors] : o.slots) slot_names.push_back(slot);
  return {{"type", o.type}, {"step", o.step}, {"learning_rate", o.learning_rate}, {"slots", slot_names}};
}

// The optimizer's slots as "<slot>.<parameter>" tensors, with its type, step and learning rate.
void write_optimizer_file(const training::OptimizerState& o, const fs::path& path,
                          std::map<std::string, std::string> metadata = {}) {
  std::vector<std::pair<std::string, Tensor>> slots;
  for (const auto& [slot, tensors] : o.slots)
    for (const auto& [param, t] : tensors)
      if (t.defined()) slots.emplace_back(slot + "." + param, t);
  metadata["kiln.optimizer"] = optimizer_info(o).dump();
  write_safetensors(path.string(), slots, metadata);
}

}  // namespace

namespace {

// {"parameter": [begin, end], ...}
nlohmann::json ranges_json(const std::vector<training::ParameterRange>& ranges) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& r : ranges) j[r.name] = {r.begin, r.end};
  return j;
}

}  // namespace

void save_optimizer_shard(const Trainer::Impl& m, const std::string& folder) {
  const int rank = m.dist.rank(), size = m.dist.size();
  const nlohmann::json zero{{"rank", rank}, {"world_size", size}, {"ranges", ranges_json(m.optimizer->ranges())}};
  write_optimizer_file(m.state->optimizer_state(), fs::path(folder) / shard_file(rank, size),
                       {{"kiln.zero", zero.dump()}});
}

namespace {

// Every rank's named tensors on every rank of the pipeline (the first of equal names kept).
std::map<std::string, Tensor> gather_over_pipeline(const DistributedRun& d,
                                                   const std::vector<std::pair<std::string, Tensor>>& mine) {
  std::string bytes;
  auto put = [&](const std::string& part) {
    const uint64_t size = part.size();
    bytes.append(reinterpret_cast<const char*>(&size), sizeof size);
    bytes += part;
  };
  for (const auto& [name, t] : mine) {
    put(name);
    put(serialize_npy(t));
  }
  std::map<std::string, Tensor> all;
  for (const std::string& part : d.pipeline->allgather(bytes)) {
    size_t at = 0;
    auto get = [&] {
      uint64_t size = 0;
      std::memcpy(&size, part.data() + at, sizeof size);
      at += sizeof size;
      std::string piece = part.substr(at, size);
      at += size;
      return piece;
    };
    while (at < part.size()) {
      std::string name = get();
      Tensor value = parse_npy(get(), name);
      all.emplace(std::move(name), std::move(value));
    }
  }
  return all;
}

}  // namespace

PipelineState gather_pipeline_state(const Trainer::Impl& m, bool weights_only) {
  std::vector<std::pair<std::string, Tensor>> weights, slots;
  for (const auto& name : m.module->parameter_names()) weights.emplace_back(name, m.state->parameter(name).data());
  PipelineState s;
  s.weights = gather_over_pipeline(m.dist, weights);
  if (weights_only) return s;
  const training::OptimizerState& o = m.state->optimizer_state();
  for (const auto& [slot, tensors] : o.slots)
    for (const auto& [param, t] : tensors) slots.emplace_back(slot + "/" + param, t);
  s.optimizer.type = o.type;
  s.optimizer.step = o.step;
  s.optimizer.learning_rate = o.learning_rate;
  for (auto& [key, t] : gather_over_pipeline(m.dist, slots)) {
    const auto slash = key.find('/');
    s.optimizer.slots[key.substr(0, slash)][key.substr(slash + 1)] = std::move(t);
  }
  return s;
}

void save_checkpoint_files(const Trainer::Impl& m, const TrainingArguments& args, const TrainerState& state,
                           const std::string& folder, const PipelineState* pipeline) {
  const fs::path dir(folder);
  std::vector<std::pair<std::string, Tensor>> weights;
  if (pipeline) weights.assign(pipeline->weights.begin(), pipeline->weights.end());
  else
    for (const auto& name : m.module->parameter_names()) weights.emplace_back(name, m.state->parameter(name).data());
  write_safetensors((dir / "model.safetensors").string(), weights, {{"format", "pt"}});
  if (args.save_only_model) {  // HF's save_only_model: no optimizer, scheduler or RNG state
    args.save((dir / "training_args.json").string());
    write_json(dir / kTrainerStateFile, state.to_json());
    return;
  }

  const training::OptimizerState& o = pipeline ? pipeline->optimizer : m.state->optimizer_state();
  if (m.dist.sharded()) {  // the shards are there (save_optimizer_shard): the manifest that lists them
    nlohmann::json shards = nlohmann::json::array();
    for (int r = 0; r < m.dist.size(); ++r)
      shards.push_back(
          {{"file", shard_file(r, m.dist.size())}, {"rank", r}, {"ranges", ranges_json(m.dist.ddp->ranges_of(r))}});
    nlohmann::json manifest = optimizer_info(o);
    manifest["world_size"] = m.dist.size();
    manifest["zero_stage"] = m.dist.zero_stage;
    manifest["shards"] = shards;
    write_json(dir / kShardManifest, manifest);
  } else {
    write_optimizer_file(o, dir / "optimizer.safetensors");
  }

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
  for (const auto& [name, t] : weights.tensors)  // a pipeline stage takes its own parameters of the model's
    if (!m.pipeline && std::find(params.begin(), params.end(), name) == params.end())
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
  if (fs::exists(dir / "optimizer.safetensors") || fs::exists(dir / kShardManifest)) return;
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

// One piece of saved optimizer state: slot `slot` of elements [begin, end) of a parameter.
struct SavedPiece {
  std::string slot, param;
  int64_t begin = 0, end = 0;
  Tensor values;  // flat
};

struct OptimizerFile {
  std::string type;
  int64_t step = 0;
  float learning_rate = 0;
  std::vector<std::string> slots;
  std::vector<SavedPiece> pieces;
};

// The type, step, learning rate and slot names an optimizer file's metadata (or the shard
// manifest) holds.
void read_info(const std::string& text, const std::string& where, OptimizerFile& out) {
  try {
    check_json_limits(text, "optimizer metadata");
    const nlohmann::json info = nlohmann::json::parse(text);
    out.type = info.at("type").get<std::string>();
    out.step = json_int64(info.at("step"), "optimizer metadata: step");
    out.learning_rate = json_float(info.at("learning_rate"), "optimizer metadata: learning_rate");
    out.slots = info.value("slots", std::vector<std::string>{});
  } catch (const std::exception& e) {  // nlohmann's errors and json_int64's CorruptFile
    throw CorruptFile(fmt::format("'{}': bad optimizer metadata: {}", where, e.what()));
  }
}

using Ranges = std::map<std::string, std::pair<int64_t, int64_t>>;

Ranges parse_ranges(const nlohmann::json& j) {
  Ranges out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto r = it.value().get<std::vector<int64_t>>();
    if (r.size() != 2 || r[0] < 0 || r[0] >= r[1]) throw CorruptFile(fmt::format("bad range of '{}'", it.key()));
    out[it.key()] = {r[0], r[1]};
  }
  return out;
}

// One optimizer file: its metadata, and its pieces of the parameters `wanted` (whole tensors, or
// with `ranges` the ranges a ZeRO shard holds).
void read_optimizer_file(const fs::path& path, const std::set<std::string>& wanted, const Ranges* ranges,
                         OptimizerFile& out) {
  const SafetensorsFile file = read_safetensors(path.string());
  auto meta = file.metadata.find("kiln.optimizer");
  if (meta == file.metadata.end()) throw CorruptFile(fmt::format("'{}' has no optimizer metadata", path.string()));
  read_info(meta->second, path.string(), out);
  for (const auto& [key, t] : file.tensors) {
    const auto dot = key.find('.');
    if (dot == std::string::npos) throw CorruptFile(fmt::format("'{}': bad key '{}'", path.string(), key));
    SavedPiece piece{key.substr(0, dot), key.substr(dot + 1), 0, t.numel(), t.reshape({t.numel()})};
    if (!wanted.count(piece.param)) continue;
    if (ranges) {
      const auto r = ranges->find(piece.param);
      if (r == ranges->end() || r->second.second - r->second.first != t.numel())
        throw CorruptFile(fmt::format("'{}': '{}' is not the range its shard lists", path.string(), key));
      piece.begin = r->second.first;
      piece.end = r->second.second;
    }
    out.pieces.push_back(std::move(piece));
  }
}

// optimizer.safetensors, or the ZeRO shards the manifest lists: those holding elements of the
// parameters `wanted` are read, whatever the world size that wrote them.
OptimizerFile read_optimizer_state(const fs::path& dir, const std::set<std::string>& wanted) {
  OptimizerFile out;
  if (fs::exists(dir / "optimizer.safetensors")) {
    read_optimizer_file(dir / "optimizer.safetensors", wanted, nullptr, out);
    return out;
  }
  const fs::path manifest_path = dir / kShardManifest;
  const nlohmann::json manifest = read_json(manifest_path);
  read_info(manifest.dump(), manifest_path.string(), out);
  try {
    for (const auto& shard : manifest.at("shards")) {
      const Ranges ranges = parse_ranges(shard.at("ranges"));
      if (std::none_of(ranges.begin(), ranges.end(), [&](const auto& r) { return wanted.count(r.first) > 0; }))
        continue;
      const std::string file = shard.at("file").get<std::string>();
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
        throw CorruptFile(fmt::format("shard file '{}' is not a file name", file));
      OptimizerFile part;
      read_optimizer_file(dir / file, wanted, &ranges, part);
      if (part.type != out.type || part.step != out.step)
        throw CorruptFile(fmt::format("shard '{}' holds {} state at step {}, the manifest {} at step {}", file,
                                      part.type, part.step, out.type, out.step));
      for (auto& piece : part.pieces) out.pieces.push_back(std::move(piece));
    }
  } catch (const nlohmann::json::exception& e) {
    throw CorruptFile(fmt::format("'{}': {}", manifest_path.string(), e.what()));
  } catch (const CorruptFile& e) {
    throw CorruptFile(fmt::format("'{}': {}", manifest_path.string(), e.what()));
  }
  return out;
}

// Slot `slot` of elements [begin, end) of a parameter, put together from the saved pieces that
// cover it; CorruptFile when they do not cover all of it.
Tensor assemble(const OptimizerFile& saved, const std::string& slot, const training::ParameterRange& want, DType dtype,
                const std::string& folder) {
  Tensor out = Tensor::zeros(dtype, {want.end - want.begin});
  const size_t es = dtype_size(dtype);
  int64_t covered = 0;
  for (const SavedPiece& p : saved.pieces) {
    if (p.slot != slot || p.param != want.name) continue;
    const int64_t lo = std::max(p.begin, want.begin), hi = std::min(p.end, want.end);
    if (lo >= hi) continue;
    if (p.values.dtype() != dtype)
      throw CorruptFile(fmt::format("checkpoint '{}': optimizer state '{}.{}' is {}, the parameter {}", folder, slot,
                                    want.name, p.values.describe(), dtype_name(dtype)));
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<size_t>(lo - want.begin) * es,
                static_cast<const char*>(p.values.raw_data()) + static_cast<size_t>(lo - p.begin) * es,
                static_cast<size_t>(hi - lo) * es);
    covered += hi - lo;
  }
  if (covered != want.end - want.begin)
    throw CorruptFile(
        fmt::format("checkpoint '{}' holds {} of the {} elements of optimizer state '{}' of parameter '{}'", folder,
                    covered, want.end - want.begin, slot, want.name));
  return out;
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

  // The slots of what this rank's optimizer updates (with ZeRO its ranges), from whichever files
  // hold them: a checkpoint of any world size, sharded or not.
  const std::vector<training::ParameterRange> ranges = m.optimizer->ranges();
  std::set<std::string> wanted;
  for (const auto& r : ranges) wanted.insert(r.name);
  const OptimizerFile opt = read_optimizer_state(dir, wanted);
  training::OptimizerState& o = m.state->optimizer_state();
  if (opt.type != o.type)
    throw InvalidArgument(
        fmt::format("checkpoint '{}' holds {} optimizer state but the run uses {}", folder, opt.type, o.type));
  o.step = opt.step;
  o.learning_rate = opt.learning_rate;
  for (const auto& slot_name : opt.slots)
    for (const auto& r : ranges) {
      const training::Parameter& p = m.state->parameter(r.name);
      const auto held = o.slots.find(slot_name);
      // A slot this parameter does not have (Adafactor keeps a vector's second moment whole and a
      // matrix's factored).
      if (held == o.slots.end() || !held->second.count(r.name)) continue;
      Tensor& slot = held->second[r.name];
      // A slot of its own shape (Adafactor's factored moments; never sharded) is read whole.
      training::ParameterRange want = r;
      if (slot.defined() && slot.numel() != r.end - r.begin) want = {r.name, 0, slot.numel()};
      Tensor values = assemble(opt, slot_name, want, p.dtype(), folder);
      if (!m.dist.sharded()) values = values.reshape(slot.defined() ? slot.shape() : p.shape());
      if (slot.defined() && slot.shape() != values.shape())
        throw CorruptFile(fmt::format("checkpoint '{}': optimizer state '{}.{}' is {} but the run's is {}", folder,
                                      slot_name, r.name, values.describe(), slot.describe()));
      if (slot.defined()) slot.copy_from(values);
      else slot = values;
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
