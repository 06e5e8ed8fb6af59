// HF's MLflowCallback (transformers/integrations/integration_utils.py) over Kiln's own writer of
// MLflow's file store (mlflow_store.h): the same environment variables, params, tags and metrics.
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/integrations.h"
#include "trainer/loggers/mlflow_store.h"

namespace kiln::trainer {

namespace {

using nlohmann::json;
namespace store = kiln::trainer::mlflow;

constexpr size_t kMaxParamValueLength = 6000;  // MLflow's MAX_PARAM_VAL_LENGTH (HF drops longer ones)

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// HF's ENV_VARS_TRUE_VALUES test.
bool env_true(const char* name) {
  std::string v = env(name);
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

void warn(const std::string& message) { std::fprintf(stderr, "kiln: warning: %s\n", message.c_str()); }

// Python's repr() of a str: single quotes unless the text has one and no double quote.
std::string python_repr_str(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

// Python's repr() of the value json.loads would give for `v`.
std::string python_repr(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "None";
    case json::value_t::boolean:
      return v.get<bool>() ? "True" : "False";
    case json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float:
      return store::python_float(v.get<double>());
    case json::value_t::string:
      return python_repr_str(v.get<std::string>());
    case json::value_t::array: {
      std::string out = "[";
      for (const auto& item : v) out += (out.size() > 1 ? ", " : "") + python_repr(item);
      return out + "]";
    }
    case json::value_t::object: {
      std::string out = "{";
      for (const auto& [k, item] : v.items())
        out += (out.size() > 1 ? ", " : "") + python_repr_str(k) + ": " + python_repr(item);
      return out + "}";
    }
    default:
      return v.dump();
  }
}

// Python's str(): what MLflow writes for a param or tag value.
std::string python_str(const json& v) { return v.is_string() ? v.get<std::string>() : python_repr(v); }

// HF's flatten_dict: non-empty nested objects become "parent.child" keys.
void flatten(const json& obj, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  for (const auto& [k, v] : obj.items()) {
    const std::string key = prefix.empty() ? k : prefix + "." + k;
    if (v.is_object() && !v.empty()) flatten(v, key, out);
    else out.emplace_back(key, v);
  }
}

// Python's getpass.getuser(): the first of LOGNAME, USER, LNAME, USERNAME, else the password entry.
std::string user_name() {
  for (const char* var : {"LOGNAME", "USER", "LNAME", "USERNAME"})
    if (std::string v = env(var); !v.empty()) return v;
  if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_name) return pw->pw_name;
  return "unknown";
}

// MLflow's source name is sys.argv[0]; Kiln's is the program's argv[0].
std::string source_name() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string argv0;
  if (in) std::getline(in, argv0, '\0');
  return argv0.empty() ? "<console>" : argv0;
}

struct MLflowRegistrar {
  MLflowRegistrar() {
    register_integration("mlflow", [] { return std::make_shared<MLflowCallback>(); });
  }
} const mlflow_registrar;

}  // namespace

std::string mlflow_metric_name(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if ((c & 0xC0) == 0x80) continue;  // one "_" per non-ASCII character, as Python's re.sub gives
    out += std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ' ' || c == ':' || c == '/'
               ? static_cast<char>(c)
               : '_';
  }
  return out;
}

struct MLflowCallback::Run {
  explicit Run(std::filesystem::path root) : store(std::move(root)) {}
  store::FileStore store;
  store::RunInfo info;
  bool from_train = false;  // started (or continued) by train(): FAILED if destroyed before on_train_end
  bool ended = false;
};

MLflowCallback::MLflowCallback() = default;

MLflowCallback::~MLflowCallback() {
  if (!run_ || run_->ended) return;
  try {
    run_->info.status = run_->from_train ? store::RunStatus::failed : store::RunStatus::finished;
    run_->info.end_time = store::now_millis();
    run_->store.write_run_info(run_->info);
  } catch (const std::exception& e) {
    warn(fmt::format("could not close the MLflow run {}: {}", run_->info.run_id, e.what()));
  }
}

std::string MLflowCallback::run_dir() const { return run_ ? run_->store.run_dir(run_->info).string() : ""; }
std::string MLflowCallback::run_id() const { return run_ ? run_->info.run_id : ""; }
std::string MLflowCallback::experiment_id() const { return run_ ? run_->info.experiment_id : ""; }

namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

// HF: "MLFLOW_RUN_ID ... reattach to an existing run"; it runs again until on_train_end.
store::RunInfo reattach_run(const store::FileStore& files, const std::string& run_id,
                            const std::string& experiment_name) {
  store::RunInfo info = files.find_run(run_id);
  if (!experiment_name.empty()) {
    const auto meta = store::read_flat_yaml(files.root() / info.experiment_id / "meta.yaml");
    if (auto it = meta.find("name"); it == meta.end() || it->second != experiment_name)
      throw InvalidArgument(
          fmt::format("MLFLOW_RUN_ID '{}' is a run of experiment {}, not of MLFLOW_EXPERIMENT_NAME "
                      "'{}'",
                      run_id, info.experiment_id, experiment_name));
  }
  info.status = store::RunStatus::running;
  info.end_time.reset();
  files.write_run_info(info);
  return info;
}

store::RunInfo create_run(store::FileStore& files, const std::string& experiment_name, const TrainingArguments& args) {
  const std::string experiment = files.experiment_by_name(experiment_name.empty() ? "Default" : experiment_name);
  const std::string user = user_name();
  store::RunInfo info =
      files.create_run(experiment, args.run_name.value_or(store::random_run_name()), user, store::now_millis());
  // The tags MLflow's default run context adds to a new run.
  files.set_tag(info, "mlflow.user", user);
  files.set_tag(info, "mlflow.source.name", source_name());
  files.set_tag(info, "mlflow.source.type", "LOCAL");
  return info;
}

// The params: the args, as HF logs args.to_dict() (Kiln's models have no config to merge in),
// flattened on MLFLOW_FLATTEN_PARAMS, without values MLflow refuses, cut to MLFLOW_MAX_LOG_PARAMS.
Params params_of(const TrainingArguments& args) {
  std::vector<std::pair<std::string, json>> items;
  const json args_json = args.to_json();
  if (env_true("MLFLOW_FLATTEN_PARAMS")) {
    flatten(args_json, "", items);
  } else {
    for (const auto& [k, v] : args_json.items()) items.emplace_back(k, v);
  }
  Params params;
  for (const auto& [key, value] : items) {
    std::string text = python_str(value);
    size_t length = 0;
    for (unsigned char c : text) length += (c & 0xC0) != 0x80;
    if (length > kMaxParamValueLength) {
      warn(
          fmt::format("MLflow param '{}' ({} characters) dropped: MLflow's log_param() accepts values of at most {} "
                      "characters (MLFLOW_FLATTEN_PARAMS=1 may split it)",
                      key, length, kMaxParamValueLength));
      continue;
    }
    params.emplace_back(mlflow_metric_name(key), std::move(text));
  }
  // HF applies MLFLOW_MAX_LOG_PARAMS only when it is all digits.
  if (const std::string max = env("MLFLOW_MAX_LOG_PARAMS");
      !max.empty() && max.find_first_not_of("0123456789") == std::string::npos) {
    const unsigned long long n = std::strtoull(max.c_str(), nullptr, 10);  // saturates on overflow
    if (n < params.size()) params.resize(n);
  }
  return params;
}

void log_params(const store::FileStore& files, const store::RunInfo& info, const Params& params, bool created) {
  for (const auto& [key, value] : params) {
    // MLflow forbids changing a logged param; a re-attached run keeps the values it has (a resumed
    // run's args differ at least in resume_from_checkpoint) instead of failing as MLflow would.
    if (!created) {
      if (auto old = files.param(info, key); old && *old != value) {
        warn(fmt::format("MLflow run {} keeps param '{}' = '{}' (now '{}'): MLflow params cannot change", info.run_id,
                         key, *old, value));
        continue;
      }
    }
    files.log_param(info, key, value);
  }
}

// MLFLOW_TAGS: a JSON object of tags set on the run.
void set_env_tags(const store::FileStore& files, store::RunInfo& info) {
  const std::string tags = env("MLFLOW_TAGS");
  if (tags.empty()) return;
  json parsed;
  try {
    check_json_limits(tags, "MLFLOW_TAGS");
    parsed = json::parse(tags);
  } catch (const std::exception& e) {
    throw InvalidArgument(fmt::format("MLFLOW_TAGS is not JSON ({}): '{}'", e.what(), tags));
  }
  if (!parsed.is_object()) throw InvalidArgument(fmt::format("MLFLOW_TAGS must be a JSON object, not '{}'", tags));
  for (const auto& [k, v] : parsed.items()) {
    files.set_tag(info, k, python_str(v));
    if (k == "mlflow.runName") {  // MLflow keeps meta.yaml's run_name equal to this tag
      info.run_name = python_str(v);
      files.write_run_info(info);
    }
  }
}

}  // namespace

void MLflowCallback::setup(const Args& args, bool from_train) {
  if (env_true("HF_MLFLOW_LOG_ARTIFACTS"))
    throw Unsupported(
        "HF_MLFLOW_LOG_ARTIFACTS is set, but Kiln's MLflow integration does not copy checkpoints into "
        "the run's artifacts (they stay in output_dir); unset it");
  auto run = std::make_unique<Run>(store::tracking_root(env("MLFLOW_TRACKING_URI")));
  const std::string experiment_name = env("MLFLOW_EXPERIMENT_NAME");
  const std::string resume_id = env("MLFLOW_RUN_ID");
  const bool created = resume_id.empty();
  run->info =
      created ? create_run(run->store, experiment_name, args) : reattach_run(run->store, resume_id, experiment_name);
  run->from_train = from_train;
  log_params(run->store, run->info, params_of(args), created);
  set_env_tags(run->store, run->info);
  run_ = std::move(run);
}

void MLflowCallback::on_train_begin(const Args& args, const TrainerState& state, TrainerControl&,
                                    const CallbackContext&) {
  if (!state.is_world_process_zero) return;
  if (!run_ || run_->ended) setup(args, true);
  else run_->from_train = true;  // a run an evaluate() before train() opened goes on
}

void MLflowCallback::on_log(const Args& args, const TrainerState& state, TrainerControl&, const CallbackContext& ctx) {
  if (!state.is_world_process_zero || !ctx.logs) return;
  // HF sets up on a log outside train() too (evaluate() alone). A log after train() ended goes to
  // the run that train() wrote (MLflow accepts values for a finished run).
  if (!run_) setup(args, false);
  const int64_t now = store::now_millis();
  for (const auto& [key, value] : *ctx.logs)
    run_->store.log_metric(run_->info, mlflow_metric_name(key), value, now, state.global_step);
}

void MLflowCallback::on_train_end(const Args&, const TrainerState& state, TrainerControl&, const CallbackContext&) {
  if (!state.is_world_process_zero || !run_ || run_->ended) return;
  run_->info.status = store::RunStatus::finished;
  run_->info.end_time = store::now_millis();
  run_->store.write_run_info(run_->info);
  run_->ended = true;
}

}  // namespace kiln::trainer
