// MLflowCallback driven through its events, with the environment HF's MLflowCallback reads, and
// the file store it writes checked file by file against MLflow's FileStore layout
// (mlflow/store/tracking/file_store.py): meta.yaml fields, params as Python's str() prints them,
// tags, metric lines "<ms> <value> <step>". tests/python/test_mlflow_store.py reads the store of
// MLflowDump.Write (written to $KILN_MLFLOW_DUMP) with PyYAML, as MLflow would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/integrations.h"
#include "test_util.h"
#include "trainer/loggers/mlflow_store.h"
#include "trainer/trainer_fixtures.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using kiln::test::error_message;
using kiln::test::expect_error;
using kiln::test::has;
using kiln::test::TempDir;

// Sets the variables the callback reads (unset unless given) and restores them afterwards.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& values) {
    for (const char* name : {"MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_TAGS",
                             "MLFLOW_FLATTEN_PARAMS", "MLFLOW_MAX_LOG_PARAMS", "HF_MLFLOW_LOG_ARTIFACTS"}) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [k, v] : values) set(k, v);
  }
  void set(const std::string& name, const std::string& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~Env() {
    for (const auto& [k, v] : saved_) v ? (void)::setenv(k.c_str(), v->c_str(), 1) : (void)::unsetenv(k.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::vector<std::string> out;
  std::istringstream in(read(p));
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct Driver {
  TrainingArguments args;
  TrainerState state;
  TrainerControl control;
  std::shared_ptr<MLflowCallback> cb = std::make_shared<MLflowCallback>();

  explicit Driver(const fs::path& out) { args.output_dir = out.string(); }
  void begin() { cb->on_train_begin(args, state, control, CallbackContext{}); }
  void log(int64_t step, const Logs& logs) {
    state.global_step = step;
    CallbackContext ctx;
    ctx.logs = &logs;
    cb->on_log(args, state, control, ctx);
  }
  void end() { cb->on_train_end(args, state, control, CallbackContext{}); }
};

// "<ms> <value> <step>" with a plausible timestamp; returns the value's text.
std::string metric_value(const std::string& line, int64_t step, int64_t t0, int64_t t1) {
  static const std::regex form(R"((\d+) (\S+) (-?\d+))");
  std::smatch m;
  EXPECT_TRUE(std::regex_match(line, m, form)) << line;
  if (m.size() != 4) return "";
  const int64_t ts = std::stoll(m[1]);
  EXPECT_GE(ts, t0);
  EXPECT_LE(ts, t1);
  EXPECT_EQ(std::stoll(m[3]), step) << line;
  return m[2];
}

TEST(MLflowCallback, WritesMLflowsFileStoreLayout) {
  TempDir tmp;
  const fs::path root = tmp / "mlruns";
  Env env({{"MLFLOW_TRACKING_URI", root.string()}});
  Driver d(tmp / "out");
  d.args.run_name = "my-run";
  d.args.report_to = {"mlflow"};
  d.args.learning_rate = 3e-4;
  const int64_t t0 = mlflow::now_millis();
  d.begin();

  // The store and the Default experiment, as MLflow's FileStore makes them.
  EXPECT_TRUE(fs::is_directory(root / ".trash"));
  const auto exp = mlflow::read_flat_yaml(root / "0" / "meta.yaml");
  EXPECT_EQ(exp.size(), 6u);
  EXPECT_EQ(exp.at("name"), "Default");
  EXPECT_EQ(exp.at("experiment_id"), "0");
  EXPECT_EQ(exp.at("lifecycle_stage"), "active");
  EXPECT_EQ(exp.at("artifact_location"), "file://" + root.string() + "/0");
  EXPECT_EQ(exp.at("creation_time"), exp.at("last_update_time"));
  EXPECT_TRUE(has(read(root / "0" / "meta.yaml"), "experiment_id: '0'\n"));  // a string, as MLflow writes it

  const std::string id = d.cb->run_id();
  EXPECT_TRUE(std::regex_match(id, std::regex("[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}"))) << id;
  EXPECT_EQ(d.cb->experiment_id(), "0");
  const fs::path run = root / "0" / id;
  EXPECT_EQ(d.cb->run_dir(), run.string());
  for (const char* sub : {"metrics", "params", "artifacts", "tags"}) EXPECT_TRUE(fs::is_directory(run / sub)) << sub;
  auto meta = mlflow::read_flat_yaml(run / "meta.yaml");
  EXPECT_EQ(meta.size(), 15u);
  EXPECT_EQ(meta.at("status"), "1");
  EXPECT_EQ(meta.at("end_time"), "null");
  EXPECT_EQ(meta.at("run_id"), id);
  EXPECT_EQ(meta.at("run_uuid"), id);
  EXPECT_EQ(meta.at("run_name"), "my-run");
  EXPECT_EQ(meta.at("experiment_id"), "0");
  EXPECT_EQ(meta.at("artifact_uri"), "file://" + root.string() + "/0/" + id + "/artifacts");
  EXPECT_EQ(meta.at("lifecycle_stage"), "active");
  EXPECT_EQ(meta.at("source_type"), "4");
  EXPECT_EQ(meta.at("source_name"), "");
  EXPECT_EQ(meta.at("source_version"), "");
  EXPECT_EQ(meta.at("entry_point_name"), "");
  EXPECT_EQ(meta.at("tags"), "[]");
  EXPECT_FALSE(meta.at("user_id").empty());
  EXPECT_GE(std::stoll(meta.at("start_time")), t0);

  // Tags.
  EXPECT_EQ(read(run / "tags" / "mlflow.runName"), "my-run");
  EXPECT_EQ(read(run / "tags" / "mlflow.user"), meta.at("user_id"));
  EXPECT_EQ(read(run / "tags" / "mlflow.source.type"), "LOCAL");
  EXPECT_TRUE(has(read(run / "tags" / "mlflow.source.name"), "kiln_tests"));

  // Params: every args field, as Python's str() of HF's to_dict() value.
  const nlohmann::json args_json = d.args.to_json();
  size_t n_params = 0;
  for (const auto& e : fs::directory_iterator(run / "params")) n_params += e.is_regular_file();
  EXPECT_EQ(n_params, args_json.size());
  EXPECT_EQ(read(run / "params" / "learning_rate"), "0.0003");
  EXPECT_EQ(read(run / "params" / "adam_epsilon"), "1e-08");
  EXPECT_EQ(read(run / "params" / "num_train_epochs"), "3.0");
  EXPECT_EQ(read(run / "params" / "logging_steps"), "500");
  EXPECT_EQ(read(run / "params" / "report_to"), "['mlflow']");
  EXPECT_EQ(read(run / "params" / "run_name"), "my-run");
  EXPECT_EQ(read(run / "params" / "label_names"), "None");
  EXPECT_EQ(read(run / "params" / "do_train"), "False");
  EXPECT_EQ(read(run / "params" / "lr_scheduler_kwargs"), "{}");
  EXPECT_EQ(read(run / "params" / "lr_scheduler_type"), "linear");

  // Metrics: one line per log, at global_step; Python's float repr; names sanitised as HF does.
  d.log(5, {{"loss", 0.5}, {"learning_rate", 3e-4}, {"epoch", 1.0}});
  d.log(10, {{"loss", std::nan("")}, {"eval_top(1)", 1e16}, {"eval/acc", -0.0}, {"grad_norm", 1e-05}});
  d.log(15, {{"loss", std::numeric_limits<double>::infinity()}, {"grad_norm", 123456789012345.0}});
  const int64_t t1 = mlflow::now_millis();
  auto loss = lines_of(run / "metrics" / "loss");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(metric_value(loss[0], 5, t0, t1), "0.5");
  EXPECT_EQ(metric_value(loss[1], 10, t0, t1), "nan");
  EXPECT_EQ(metric_value(loss[2], 15, t0, t1), "inf");
  EXPECT_EQ(metric_value(lines_of(run / "metrics" / "learning_rate").at(0), 5, t0, t1), "0.0003");
  EXPECT_EQ(metric_value(lines_of(run / "metrics" / "epoch").at(0), 5, t0, t1), "1.0");
  EXPECT_EQ(metric_value(lines_of(run / "metrics" / "eval_top_1_").at(0), 10, t0, t1), "1e+16");
  EXPECT_EQ(metric_value(lines_of(run / "metrics" / "eval" / "acc").at(0), 10, t0, t1), "-0.0");  // "/": a folder
  auto grad = lines_of(run / "metrics" / "grad_norm");
  ASSERT_EQ(grad.size(), 2u);
  EXPECT_EQ(metric_value(grad[0], 10, t0, t1), "1e-05");
  EXPECT_EQ(metric_value(grad[1], 15, t0, t1), "123456789012345.0");
  // One timestamp per log.
  EXPECT_EQ(loss[1].substr(0, loss[1].find(' ')), grad[0].substr(0, grad[0].find(' ')));

  d.end();
  meta = mlflow::read_flat_yaml(run / "meta.yaml");
  EXPECT_EQ(meta.at("status"), "3");
  EXPECT_GE(std::stoll(meta.at("end_time")), std::stoll(meta.at("start_time")));
  EXPECT_LE(std::stoll(meta.at("end_time")), mlflow::now_millis());

  // A second train() is a second run; a log after train() goes to the finished run.
  d.log(20, {{"eval_loss", 0.25}});
  EXPECT_EQ(lines_of(run / "metrics" / "eval_loss").size(), 1u);
  EXPECT_EQ(mlflow::read_flat_yaml(run / "meta.yaml").at("status"), "3");
  d.begin();
  EXPECT_NE(d.cb->run_id(), id);
  EXPECT_TRUE(fs::exists(root / "0" / d.cb->run_id() / "meta.yaml"));
}

TEST(MLflowCallback, RunNameIsGeneratedLikeMLflowsWhenUnset) {
  TempDir tmp;
  Env env({{"MLFLOW_TRACKING_URI", tmp.path().string()}});
  Driver d(tmp / "out");
  d.begin();
  const std::string name = read(fs::path(d.cb->run_dir()) / "tags" / "mlflow.runName");
  EXPECT_TRUE(std::regex_match(name, std::regex("[a-z]+-[a-z]+-\\d{1,4}"))) << name;
  EXPECT_LE(name.size(), 20u);
  EXPECT_EQ(mlflow::read_flat_yaml(fs::path(d.cb->run_dir()) / "meta.yaml").at("run_name"), name);
  EXPECT_EQ(read(fs::path(d.cb->run_dir()) / "params" / "run_name"), "None");
}

TEST(MLflowCallback, TrackingUriForms) {
  TempDir tmp;
  const fs::path spaced = tmp / "my runs";
  {
    Env env({{"MLFLOW_TRACKING_URI", "file://" + tmp.path().string() + "/my%20runs"}});
    Driver d(tmp / "out");
    d.begin();
    EXPECT_EQ(fs::path(d.cb->run_dir()).parent_path().parent_path(), spaced);
    EXPECT_EQ(mlflow::read_flat_yaml(spaced / "0" / "meta.yaml").at("artifact_location"),
              "file://" + tmp.path().string() + "/my%20runs/0");
  }
  EXPECT_EQ(mlflow::tracking_root("file:" + tmp.path().string() + "/x"), tmp / "x");
  EXPECT_EQ(mlflow::tracking_root("file://localhost" + tmp.path().string()), tmp.path());
  EXPECT_EQ(mlflow::tracking_root(""), fs::current_path() / "mlruns");
  EXPECT_EQ(mlflow::tracking_root("rel/dir"), fs::current_path() / "rel/dir");
  for (const char* uri :
       {"http://localhost:5000", "https://mlflow.example.com", "databricks://profile", "sqlite:///mlflow.db"}) {
    Env env({{"MLFLOW_TRACKING_URI", std::string(uri)}});
    Driver d(tmp / "out");
    const std::string msg = error_message<Unsupported>([&] { d.begin(); });
    EXPECT_TRUE(has(msg, std::string("MLFLOW_TRACKING_URI '") + uri + "'")) << msg;
    EXPECT_TRUE(has(msg, "local MLflow file stores")) << msg;
  }
  expect_error<Unsupported>([&] { mlflow::tracking_root("file://otherhost/x"); }, "host 'otherhost'");
}

TEST(MLflowCallback, NamedExperimentIsCreatedOnceAndReused) {
  TempDir tmp;
  const fs::path root = tmp / "mlruns";  // a new store: MLflow creates the Default experiment in it
  Env env({{"MLFLOW_TRACKING_URI", root.string()}, {"MLFLOW_EXPERIMENT_NAME", "kiln: exp #1"}});
  Driver a(tmp / "out"), b(tmp / "out");
  a.begin();
  b.begin();
  const std::string id = a.cb->experiment_id();
  EXPECT_TRUE(std::regex_match(id, std::regex("[1-9][0-9]{17}"))) << id;  // MLflow's 18-digit ids
  EXPECT_EQ(b.cb->experiment_id(), id);
  EXPECT_NE(a.cb->run_id(), b.cb->run_id());
  const auto meta = mlflow::read_flat_yaml(root / id / "meta.yaml");
  EXPECT_EQ(meta.at("name"), "kiln: exp #1");  // quoted in the YAML, read back whole
  EXPECT_EQ(meta.at("experiment_id"), id);
  EXPECT_EQ(mlflow::read_flat_yaml(root / "0" / "meta.yaml").at("name"), "Default");
  EXPECT_EQ(mlflow::read_flat_yaml(fs::path(a.cb->run_dir()) / "meta.yaml").at("experiment_id"), id);

  a.end();
  b.end();
  // A deleted experiment of that name (in .trash) is not silently recreated.
  fs::rename(root / id, root / ".trash" / id);
  Driver c(tmp / "out");
  expect_error<InvalidArgument>([&] { c.begin(); }, "'kiln: exp #1' was deleted");
}

TEST(MLflowCallback, RunIdReattachesAndAppends) {
  TempDir tmp;
  Env env({{"MLFLOW_TRACKING_URI", tmp.path().string()}});
  std::string id;
  {
    Driver d(tmp / "out");
    d.args.learning_rate = 1e-3;
    d.begin();
    d.log(5, {{"loss", 2.0}});
    d.end();
    id = d.cb->run_id();
  }
  const fs::path run = tmp / "0" / id;
  env.set("MLFLOW_RUN_ID", id);
  Driver d(tmp / "out");
  d.args.learning_rate = 2e-3;                         // changed: MLflow params cannot change
  d.args.resume_from_checkpoint = "out/checkpoint-5";  // new on resume
  d.state.global_step = 5;
  d.begin();
  EXPECT_EQ(d.cb->run_id(), id);
  auto meta = mlflow::read_flat_yaml(run / "meta.yaml");
  EXPECT_EQ(meta.at("status"), "1");
  EXPECT_EQ(meta.at("end_time"), "null");
  EXPECT_EQ(read(run / "params" / "learning_rate"), "0.001");
  EXPECT_EQ(read(run / "params" / "resume_from_checkpoint"), "None");
  d.log(10, {{"loss", 1.0}});
  d.end();
  const auto loss = lines_of(run / "metrics" / "loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_TRUE(has(loss[0], " 2.0 5")) << loss[0];
  EXPECT_TRUE(has(loss[1], " 1.0 10")) << loss[1];
  EXPECT_EQ(mlflow::read_flat_yaml(run / "meta.yaml").at("status"), "3");
  size_t runs = 0;
  for (const auto& e : fs::directory_iterator(tmp / "0")) runs += e.is_directory();
  EXPECT_EQ(runs, 1u);

  env.set("MLFLOW_RUN_ID", "0123456789abcdef0123456789abcdef");
  Driver missing(tmp / "out");
  std::string msg = error_message<InvalidArgument>([&] { missing.begin(); });
  EXPECT_TRUE(has(msg, "MLFLOW_RUN_ID '0123456789abcdef0123456789abcdef': no such run")) << msg;
  env.set("MLFLOW_RUN_ID", "../etc");
  msg = error_message<InvalidArgument>([&] { missing.begin(); });
  EXPECT_TRUE(has(msg, "'../etc' is not an MLflow run id")) << msg;
  env.set("MLFLOW_RUN_ID", id);
  env.set("MLFLOW_EXPERIMENT_NAME", "other");
  msg = error_message<InvalidArgument>([&] { missing.begin(); });
  EXPECT_TRUE(has(msg, "is a run of experiment 0, not of MLFLOW_EXPERIMENT_NAME 'other'")) << msg;
}

TEST(MLflowCallback, TagsFromMLFLOW_TAGS) {
  TempDir tmp;
  Env env({{"MLFLOW_TRACKING_URI", tmp.path().string()},
           {"MLFLOW_TAGS", R"({"release.candidate": "RC1", "n": 3, "ok": true, "mlflow.runName": "renamed"})"}});
  Driver d(tmp / "out");
  d.begin();
  const fs::path run = d.cb->run_dir();
  EXPECT_EQ(read(run / "tags" / "release.candidate"), "RC1");
  EXPECT_EQ(read(run / "tags" / "n"), "3");
  EXPECT_EQ(read(run / "tags" / "ok"), "True");
  EXPECT_EQ(read(run / "tags" / "mlflow.runName"), "renamed");
  EXPECT_EQ(mlflow::read_flat_yaml(run / "meta.yaml").at("run_name"), "renamed");

  for (const char* bad : {"{not json", "[1, 2]"}) {
    env.set("MLFLOW_TAGS", bad);
    Driver e(tmp / "out");
    const std::string msg = error_message<InvalidArgument>([&] { e.begin(); });
    EXPECT_TRUE(has(msg, "MLFLOW_TAGS")) << msg;
  }
  env.set("MLFLOW_TAGS", R"({"a/../b": "x"})");
  Driver e(tmp / "out");
  expect_error<InvalidArgument>([&] { e.begin(); }, "invalid MLflow tag name 'a/../b'");
}

TEST(MLflowCallback, ParamsFlattenedDroppedAndCapped) {
  TempDir tmp;
  Env env({{"MLFLOW_TRACKING_URI", tmp.path().string()}});
  {
    Driver d(tmp / "out");
    d.args.lr_scheduler_kwargs = {
        {"power", 2.0}, {"nested", {{"a", 1}, {"it's", "x"}}}, {"empty", nlohmann::json::object()}};
    d.begin();
    EXPECT_EQ(read(fs::path(d.cb->run_dir()) / "params" / "lr_scheduler_kwargs"),
              "{'empty': {}, 'nested': {'a': 1, \"it's\": 'x'}, 'power': 2.0}");
  }
  {
    env.set("MLFLOW_FLATTEN_PARAMS", "1");
    Driver d(tmp / "out");
    d.args.lr_scheduler_kwargs = {
        {"power", 2.0}, {"nested", {{"a", 1}, {"b(c)", "x"}}}, {"empty", nlohmann::json::object()}};
    d.begin();
    const fs::path params = fs::path(d.cb->run_dir()) / "params";
    EXPECT_FALSE(fs::exists(params / "lr_scheduler_kwargs"));
    EXPECT_EQ(read(params / "lr_scheduler_kwargs.power"), "2.0");
    EXPECT_EQ(read(params / "lr_scheduler_kwargs.nested.a"), "1");
    EXPECT_EQ(read(params / "lr_scheduler_kwargs.nested.b_c_"), "x");  // keys sanitised
    EXPECT_EQ(read(params / "lr_scheduler_kwargs.empty"), "{}");       // HF keeps empty dicts whole
    env.set("MLFLOW_FLATTEN_PARAMS", "false");
  }
  {
    Driver d(tmp / "out");
    d.args.lr_scheduler_kwargs = {{"x", std::string(5991, 'a')}};  // "{'x': '" + 5991 + "'}": 6000, kept
    d.begin();
    EXPECT_EQ(read(fs::path(d.cb->run_dir()) / "params" / "lr_scheduler_kwargs").size(), 6000u);
    Driver e(tmp / "out");
    e.args.lr_scheduler_kwargs = {{"x", std::string(5992, 'a')}};  // 6001: dropped, as HF drops it
    e.begin();
    EXPECT_FALSE(fs::exists(fs::path(e.cb->run_dir()) / "params" / "lr_scheduler_kwargs"));
    EXPECT_TRUE(fs::exists(fs::path(e.cb->run_dir()) / "params" / "learning_rate"));
  }
  {
    env.set("MLFLOW_MAX_LOG_PARAMS", "3");
    Driver d(tmp / "out");
    d.begin();
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(fs::path(d.cb->run_dir()) / "params"))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    // The first three of to_json()'s sorted keys.
    std::vector<std::string> expected;
    const nlohmann::json args_json = d.args.to_json();
    for (const auto& [k, v] : args_json.items())
      if (expected.size() < 3) expected.push_back(k);
    EXPECT_EQ(names, expected);
  }
}

TEST(MLflowCallback, UnsupportedArtifactLoggingAndBadMetricNames) {
  TempDir tmp;
  Env env({{"MLFLOW_TRACKING_URI", tmp.path().string()}, {"HF_MLFLOW_LOG_ARTIFACTS", "True"}});
  Driver d(tmp / "out");
  std::string msg = error_message<Unsupported>([&] { d.begin(); });
  EXPECT_TRUE(has(msg, "HF_MLFLOW_LOG_ARTIFACTS")) << msg;
  env.set("HF_MLFLOW_LOG_ARTIFACTS", "0");
  d.begin();
  msg = error_message<InvalidArgument>([&] { d.log(1, {{"eval//x", 1.0}}); });
  EXPECT_TRUE(has(msg, "invalid MLflow metric name 'eval//x'")) << msg;
  msg = error_message<InvalidArgument>([&] { d.log(1, {{std::string(251, 'k'), 1.0}}); });
  EXPECT_TRUE(has(msg, "has 251 characters; MLflow allows at most 250")) << msg;
}

TEST(MLflowCallback, MetricNamesFollowHFsRule) {
  EXPECT_EQ(mlflow_metric_name("eval_top(1)"), "eval_top_1_");
  EXPECT_EQ(mlflow_metric_name("a/b:c d.e-f_G9"), "a/b:c d.e-f_G9");
  EXPECT_EQ(mlflow_metric_name("acc@5,x"), "acc_5_x");
  EXPECT_EQ(mlflow_metric_name("\xc3\xa9t\xe2\x82\xac"), "_t_");  // one "_" per character, not per byte
}

TEST(MLflowCallback, InterruptedTrainingIsFailedAndEvaluateAloneIsFinished) {
  TempDir tmp;
  Env env({{"MLFLOW_TRACKING_URI", tmp.path().string()}});
  fs::path train_run, eval_run;
  {
    Driver d(tmp / "out");
    d.begin();
    d.log(1, {{"loss", 1.0}});
    train_run = d.cb->run_dir();
  }  // destroyed without on_train_end: train() threw
  {
    Driver d(tmp / "out");
    d.log(0, {{"eval_loss", 1.0}});  // evaluate() without train(): HF sets up here
    eval_run = d.cb->run_dir();
    EXPECT_TRUE(fs::exists(eval_run / "params" / "learning_rate"));
  }
  auto meta = mlflow::read_flat_yaml(train_run / "meta.yaml");
  EXPECT_EQ(meta.at("status"), "4");
  EXPECT_NE(meta.at("end_time"), "null");
  meta = mlflow::read_flat_yaml(eval_run / "meta.yaml");
  EXPECT_EQ(meta.at("status"), "3");
}

TEST(MLflowCallback, YamlScalarsReadBackAsWritten) {
  TempDir tmp;
  fs::create_directories(tmp.path());
  const std::vector<std::string> values = {"plain",       "0",         "123456789012345678",
                                           "3f2a9c",      "0b101",     "true",
                                           "No",          "null",      "~",
                                           "a: b",        "x #y",      "'q'",
                                           "-dash",       "",          " pad ",
                                           "caf\xc3\xa9", "tab\there", "file:///a b/c",
                                           "1e5",         ".5"};
  std::string text;
  for (size_t i = 0; i < values.size(); ++i)
    text += "k" + std::to_string(i) + ": " + mlflow::yaml_string(values[i]) + "\n";
  std::ofstream(tmp / "m.yaml") << text;
  const auto back = mlflow::read_flat_yaml(tmp / "m.yaml");
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(back.at("k" + std::to_string(i)), values[i]) << text;
  EXPECT_EQ(mlflow::yaml_string("3f2a9c"), "3f2a9c");  // run ids stay plain, as PyYAML leaves them
  EXPECT_EQ(mlflow::yaml_string("0"), "'0'");          // experiment ids are quoted, as PyYAML quotes them
  // A folded long line (PyYAML wraps at 80 columns) is joined with a space.
  std::ofstream(tmp / "f.yaml") << "name: 'a long\n  name'\nb: 1\n";
  EXPECT_EQ(mlflow::read_flat_yaml(tmp / "f.yaml").at("name"), "a long name");
  std::ofstream(tmp / "bad.yaml") << "name Default\n";
  expect_error<CorruptFile>([&] { mlflow::read_flat_yaml(tmp / "bad.yaml"); }, (tmp / "bad.yaml").string() + " line 1");
}

// The store tests/python/test_mlflow_store.py reads: into $KILN_MLFLOW_DUMP when set, else a
// temporary folder (then only the C++ checks run). test_mlflow_store.py holds the same values.
TEST(MLflowDump, Write) {
  TempDir tmp;
  const char* dump = std::getenv("KILN_MLFLOW_DUMP");
  const fs::path root = dump && *dump ? fs::path(dump) : tmp / "mlruns";
  Env env({{"MLFLOW_TRACKING_URI", root.string()},
           {"MLFLOW_EXPERIMENT_NAME", "kiln-dump"},
           {"MLFLOW_TAGS", R"({"team": "kiln", "attempt": 2})"}});
  Driver d(tmp / "out");
  d.args.run_name = "dump-run";
  d.args.learning_rate = 0.001;
  d.args.report_to = {"mlflow", "jsonl"};
  d.begin();
  d.log(5, {{"loss", 2.5}, {"grad_norm", 0.125}, {"learning_rate", 0.001}, {"epoch", 0.5}});
  d.log(10, {{"loss", 1.25}, {"grad_norm", std::nan("")}, {"learning_rate", 5e-05}, {"epoch", 1.0}});
  d.log(10, {{"eval_loss", 1.5}, {"eval_top(1)", 0.75}, {"eval/acc", 1e-07}});
  d.end();
  EXPECT_EQ(lines_of(fs::path(d.cb->run_dir()) / "metrics" / "loss").size(), 2u);
}

}  // namespace
}  // namespace kiln::trainer
