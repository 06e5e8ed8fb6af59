// Reporting integrations: callbacks that send the Trainer's logs somewhere, selected by
// TrainingArguments.report_to as in Hugging Face ("all", "none", or a list of names):
//
//   tensorboard  TensorBoard event files under logging_dir, scalars at global_step, with HF's tag
//                rewriting (eval_loss -> eval/loss, test_x -> test/x, loss -> train/loss)
//   mlflow       a local MLflow file store (mlruns/<experiment id>/<run id>/ with meta.yaml,
//                metrics/, params/, tags/), the layout MLflow's own UI and client read
//   jsonl        <output_dir>/logs.jsonl: one JSON object per log
//   csv          <output_dir>/logs.csv: one row per log, a column per key
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensorboard.h"
#include "kiln/trainer_callback.h"

namespace kiln::trainer {

// HF's rewrite_logs: "eval_" and "test_" prefixes become "eval/" and "test/"; any other key goes
// under "train/".
std::string tensorboard_tag(const std::string& key);

// Writes every numeric log as a scalar at state.global_step; the args as a text summary at the
// start. The writer opens at on_train_begin (in logging_dir, or `log_dir` when given) and closes
// at on_train_end.
class TensorBoardCallback : public TrainerCallback {
 public:
  explicit TensorBoardCallback(std::optional<std::string> log_dir = std::nullopt);
  void on_train_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_log(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_train_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  const TensorBoardWriter* writer() const { return writer_.get(); }

 private:
  std::optional<std::string> log_dir_;
  std::unique_ptr<TensorBoardWriter> writer_;
};

// HF's MLflowCallback, writing a local MLflow file store itself (the layout of MLflow's FileStore,
// which `mlflow ui --backend-store-uri DIR` and MlflowClient read). Configured as HF's by the
// environment, read at setup (the first on_train_begin, or an on_log before any):
//   MLFLOW_TRACKING_URI     a folder or a file: URI; unset: ./mlruns. Other schemes (http:,
//                           databricks, ...): Unsupported, Kiln writes only local stores.
//   MLFLOW_EXPERIMENT_NAME  found by name among the store's experiments, else created with a fresh
//                           18-digit id; unset: "Default" (id "0").
//   MLFLOW_RUN_ID           append to that existing run (set back to RUNNING) instead of a new one.
//   MLFLOW_TAGS             a JSON object of extra run tags.
//   MLFLOW_FLATTEN_PARAMS   nested objects of the args become "a.b" params (HF's flatten_dict).
//   MLFLOW_MAX_LOG_PARAMS   log only the first N params (in the sorted order of args.to_json()).
//   HF_MLFLOW_LOG_ARTIFACTS truthy: Unsupported (checkpoints are not copied into the store).
// A run per train(): RUNNING (1) from on_train_begin, FINISHED (3) with end_time at on_train_end;
// a run whose train() never ended (an exception) is marked FAILED (4) when the callback is
// destroyed. Params: the args (values as Python's str() prints them; longer than 6000 characters:
// dropped with a warning, as HF does). Metrics: every log value at state.global_step, one line
// "<ms> <value> <step>" appended per log to metrics/<key>; keys keep MLflow's characters
// ([0-9A-Za-z_-. :/], others become "_", HF's rule), "/" making sub-folders.
class MLflowCallback : public TrainerCallback {
 public:
  MLflowCallback();
  ~MLflowCallback() override;
  void on_train_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_log(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_train_end(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;

  // The run being written (empty before setup): for tests and tools.
  std::string run_dir() const;
  std::string run_id() const;
  std::string experiment_id() const;

 private:
  struct Run;
  void setup(const Args& args, bool from_train);
  std::unique_ptr<Run> run_;
};

// HF's metric-name rule for MLflow: every character other than [0-9A-Za-z_-. :/] becomes "_".
std::string mlflow_metric_name(const std::string& key);

// <output_dir>/logs.jsonl: one JSON object per log, the logs in their order and then "step"
// (state.global_step), appended and flushed per line. Non-finite values are written as null (strict
// JSON, as trainer_state.json holds them). At on_train_begin, lines with a step above
// state.global_step (the part of an interrupted run after the checkpoint now resumed) are dropped,
// so that a resumed run's file equals an uninterrupted one's; a malformed line is a CorruptFile
// naming the file and line.
class JsonLinesCallback : public TrainerCallback {
 public:
  void on_train_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_log(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  static std::string path_for(const Args& args);  // <output_dir>/logs.jsonl
};

// <output_dir>/logs.csv: a header row ("step", then every key in first-seen order) and a row per
// log, a key the log lacks left empty; numbers in shortest round-trip form. The whole file is
// rewritten atomically at each log (the header can grow). The resume rule of JsonLinesCallback.
class CsvLoggerCallback : public TrainerCallback {
 public:
  CsvLoggerCallback();
  ~CsvLoggerCallback() override;
  void on_train_begin(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  void on_log(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&) override;
  static std::string path_for(const Args& args);  // <output_dir>/logs.csv

 private:
  struct Table;
  void load(const std::string& path);
  std::unique_ptr<Table> table_;
  std::string loaded_path_;  // the file table_ holds (empty: none loaded yet)
};

// The integration callbacks report_to names, in the order given; "all" is every registered
// integration. InvalidArgument naming an unknown integration and listing the known ones.
std::vector<std::shared_ptr<TrainerCallback>> reporting_integration_callbacks(
    const std::vector<std::string>& report_to);

// The registry behind report_to: each integration registers a factory under its name.
using IntegrationFactory = std::function<std::shared_ptr<TrainerCallback>()>;
void register_integration(const std::string& name, IntegrationFactory factory);
std::vector<std::string> integration_names();  // sorted

}  // namespace kiln::trainer
