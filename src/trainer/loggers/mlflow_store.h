// A writer of MLflow's local tracking store (mlflow/store/tracking/file_store.py), enough for the
// Trainer's MLflowCallback: experiments found or created by name, runs created or re-opened, params,
// tags and metric histories. The layout and field names are MLflow's, so that `mlflow ui` and
// MlflowClient read what Kiln writes:
//
//   <root>/.trash/                           (MLflow makes it with the store)
//   <root>/<experiment id>/meta.yaml         artifact_location, creation_time, experiment_id,
//                                            last_update_time, lifecycle_stage, name
//   <root>/<experiment id>/<run id>/meta.yaml  the run's info (status 1 RUNNING ... 3 FINISHED)
//   <root>/<experiment id>/<run id>/params/<key>   the value, no newline
//   <root>/<experiment id>/<run id>/tags/<key>     the value, no newline
//   <root>/<experiment id>/<run id>/metrics/<key>  "<timestamp ms> <value> <step>\n" per value
//   <root>/<experiment id>/<run id>/artifacts/
//
// meta.yaml files are replaced atomically; metric files are appended. Errors are IOError naming
// the path (CorruptFile for a meta.yaml Kiln cannot read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace kiln::trainer::mlflow {

// MLflow's RunStatus values, as meta.yaml stores them.
enum class RunStatus : int { running = 1, scheduled = 2, finished = 3, failed = 4, killed = 5 };

// The folder of a tracking URI: a path, or a file: URI (file:///abs, file:rel, file://localhost/abs,
// percent-escapes decoded); empty: ./mlruns (MLflow's default). Made absolute. Any other scheme is
// Unsupported, naming `uri`.
std::filesystem::path tracking_root(const std::string& uri);

// "file://" + the absolute path with MLflow's (pathlib's as_uri) percent-escapes.
std::string path_to_file_uri(const std::filesystem::path& path);

// A flat YAML mapping as PyYAML's safe_dump writes MLflow's meta.yaml files: "key: scalar" lines,
// scalars plain, '...' or "..."; folded continuation lines are joined with a space. Values are the
// scalars' text ("null" stays "null"; quoted scalars unquoted). CorruptFile naming `path` when a
// line is not of that form.
std::map<std::string, std::string> read_flat_yaml(const std::filesystem::path& path);
// The YAML text of one scalar string, quoted only when YAML would read it as something else.
std::string yaml_string(const std::string& s);

// MLflow's name rules (mlflow/utils/validation.py): only [/\w.\- :] characters, at most 250 of
// them, and a name that normalises to itself as a relative path. InvalidArgument naming `what`
// ("metric", "param", "tag") and the name.
void validate_name(const std::string& what, const std::string& name);

struct RunInfo {
  std::string run_id;
  std::string experiment_id;
  std::string run_name;
  std::string user_id;
  std::string artifact_uri;
  std::string lifecycle_stage = "active";
  RunStatus status = RunStatus::running;
  int64_t start_time = 0;
  std::optional<int64_t> end_time;
};

class FileStore {
 public:
  // Creates the root (and .trash) when missing, as MLflow's FileStore does.
  explicit FileStore(std::filesystem::path root);
  const std::filesystem::path& root() const { return root_; }

  // The id of the active experiment called `name`, created when there is none ("Default" is "0",
  // created with that id when missing). InvalidArgument when only a deleted one (in .trash) has it.
  std::string experiment_by_name(const std::string& name);

  // A new run (32-hex id) in `experiment_id`: meta.yaml RUNNING, metrics/, params/, artifacts/,
  // and the mlflow.runName tag.
  RunInfo create_run(const std::string& experiment_id, const std::string& run_name, const std::string& user,
                     int64_t start_time);
  // The run with this id in any active experiment; InvalidArgument naming the id and the store
  // when there is none.
  RunInfo find_run(const std::string& run_id) const;
  // Rewrites the run's meta.yaml (atomically).
  void write_run_info(const RunInfo& run) const;

  std::filesystem::path run_dir(const RunInfo& run) const { return root_ / run.experiment_id / run.run_id; }
  void log_param(const RunInfo& run, const std::string& key, const std::string& value) const;
  void set_tag(const RunInfo& run, const std::string& key, const std::string& value) const;
  void log_metric(const RunInfo& run, const std::string& key, double value, int64_t timestamp_ms, int64_t step) const;
  // The value a param file holds, if any.
  std::optional<std::string> param(const RunInfo& run, const std::string& key) const;

 private:
  void create_experiment(const std::string& id, const std::string& name);
  std::filesystem::path root_;
};

// Milliseconds since the epoch (MLflow's get_current_time_millis).
int64_t now_millis();
// A uuid4-like 32-hex id (version and variant bits set as uuid4().hex has them).
std::string random_run_id();
// An MLflow-style run name, "<adjective>-<animal>-<0..1000>".
std::string random_run_name();
// Python's repr() of a float: shortest round-trip digits, "1.0" not "1", "nan", "inf", "-inf".
std::string python_float(double v);

}  // namespace kiln::trainer::mlflow
