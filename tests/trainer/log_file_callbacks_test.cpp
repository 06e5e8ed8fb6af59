// JsonLinesCallback and CsvLoggerCallback driven through their events: exact file contents, key
// order, the growing CSV header, round-trip numbers, the resume rule (a resumed run's file equals
// an uninterrupted run's, byte for byte) and CorruptFile errors naming file and line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/integrations.h"
#include "test_util.h"
#include "trainer/trainer_fixtures.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using kiln::test::error_message;
using kiln::test::expect_error;
using kiln::test::has;
using kiln::test::TempDir;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// One callback driven like the Trainer drives it.
struct Driver {
  TrainingArguments args;
  TrainerState state;
  TrainerControl control;
  std::shared_ptr<TrainerCallback> cb;

  Driver(std::shared_ptr<TrainerCallback> callback, const fs::path& out) : cb(std::move(callback)) {
    args.output_dir = out.string();
  }
  void begin(int64_t global_step = 0) {
    state.global_step = global_step;
    cb->on_train_begin(args, state, control, CallbackContext{});
  }
  void log(int64_t step, const Logs& logs) {
    state.global_step = step;
    CallbackContext ctx;
    ctx.logs = &logs;
    cb->on_log(args, state, control, ctx);
  }
  void end() { cb->on_train_end(args, state, control, CallbackContext{}); }
};

Logs train_log(int64_t step) {
  return {{"loss", 1.0 / static_cast<double>(step)},
          {"grad_norm", 0.5 * static_cast<double>(step)},
          {"learning_rate", 5e-05 * static_cast<double>(20 - step) / 20.0},
          {"epoch", static_cast<double>(step) / 8.0}};
}

// An uninterrupted run logging at steps `steps`, or one interrupted after `crash_after` and then
// resumed from the checkpoint at `resume_at` (logging the remaining steps again).
template <class Callback>
std::string run_logs(const fs::path& out, const std::vector<int64_t>& steps, int64_t crash_after = -1,
                     int64_t resume_at = -1) {
  {
    Driver d(std::make_shared<Callback>(), out);
    d.begin();
    for (int64_t s : steps) {
      d.log(s, train_log(s));
      if (s == crash_after) break;  // killed: no on_train_end
    }
    if (crash_after < 0) d.end();
  }
  if (crash_after >= 0) {
    Driver d(std::make_shared<Callback>(), out);
    d.begin(resume_at);
    for (int64_t s : steps)
      if (s > resume_at) d.log(s, train_log(s));
    d.end();
  }
  return read(out / (std::is_same_v<Callback, JsonLinesCallback> ? "logs.jsonl" : "logs.csv"));
}

// ---- JSON lines ----

TEST(JsonLinesCallback, OneObjectPerLogInTheLogsOrderThenStep) {
  TempDir tmp;
  Driver d(std::make_shared<JsonLinesCallback>(), tmp / "out");  // output_dir is created
  d.begin();
  d.log(5, {{"loss", 0.5}, {"grad_norm", 1.25}, {"learning_rate", 5e-05}, {"epoch", 1.0}});
  d.log(5, {{"eval_loss", 0.25}, {"eval_accuracy", 0.875}, {"epoch", 1.0}});
  d.log(7, {{"zeta", 3.0}, {"alpha", -2.5e-300}});  // not sorted: the logs' order
  d.end();
  EXPECT_EQ(read(tmp / "out" / "logs.jsonl"),
            "{\"loss\":0.5,\"grad_norm\":1.25,\"learning_rate\":5e-05,\"epoch\":1.0,\"step\":5}\n"
            "{\"eval_loss\":0.25,\"eval_accuracy\":0.875,\"epoch\":1.0,\"step\":5}\n"
            "{\"zeta\":3.0,\"alpha\":-2.5e-300,\"step\":7}\n");
  EXPECT_EQ(JsonLinesCallback::path_for(d.args), (tmp / "out" / "logs.jsonl").string());
}

TEST(JsonLinesCallback, NumbersRoundTripAndNonFiniteIsNull) {
  TempDir tmp;
  Driver d(std::make_shared<JsonLinesCallback>(), tmp.path());
  const double third = 1.0 / 3.0, tiny = std::numeric_limits<double>::denorm_min();
  d.log(1, {{"a", third}, {"b", tiny}, {"c", std::nan("")}, {"d", -std::numeric_limits<double>::infinity()}});
  const std::string text = read(tmp / "logs.jsonl");
  EXPECT_EQ(text, "{\"a\":0.3333333333333333,\"b\":5e-324,\"c\":null,\"d\":null,\"step\":1}\n");
  EXPECT_EQ(std::strtod("0.3333333333333333", nullptr), third);
  EXPECT_EQ(std::strtod("5e-324", nullptr), tiny);
}

TEST(JsonLinesCallback, ResumedRunEqualsUninterruptedRun) {
  TempDir tmp;
  const std::vector<int64_t> steps = {5, 10, 15, 20, 25};
  const std::string straight = run_logs<JsonLinesCallback>(tmp / "a", steps);
  // Killed after logging step 20; the last checkpoint was at step 10.
  const std::string resumed = run_logs<JsonLinesCallback>(tmp / "b", steps, 20, 10);
  EXPECT_EQ(resumed, straight);
  EXPECT_EQ(std::count(straight.begin(), straight.end(), '\n'), 5);
  // Resuming where the file ends changes nothing.
  const auto before = read(tmp / "a" / "logs.jsonl");
  Driver d(std::make_shared<JsonLinesCallback>(), tmp / "a");
  d.begin(25);
  EXPECT_EQ(read(tmp / "a" / "logs.jsonl"), before);
}

TEST(JsonLinesCallback, FreshRunDropsAnEarlierRunsStepsButKeepsStepZero) {
  TempDir tmp;
  write(tmp / "logs.jsonl", "{\"eval_loss\":2.0,\"step\":0}\n{\"loss\":1.0,\"step\":3}\n");
  Driver d(std::make_shared<JsonLinesCallback>(), tmp.path());
  d.begin(0);
  EXPECT_EQ(read(tmp / "logs.jsonl"), "{\"eval_loss\":2.0,\"step\":0}\n");
}

TEST(JsonLinesCallback, NoFileNoWrite) {
  TempDir tmp;
  Driver d(std::make_shared<JsonLinesCallback>(), tmp / "out");
  d.begin(10);
  EXPECT_FALSE(fs::exists(tmp / "out" / "logs.jsonl"));
}

TEST(JsonLinesCallback, CorruptLinesNameFileAndLine) {
  TempDir tmp;
  const fs::path file = tmp / "logs.jsonl";
  write(file, "{\"loss\":1.0,\"step\":1}\n{\"loss\":1.0,\"st\n");
  Driver d(std::make_shared<JsonLinesCallback>(), tmp.path());
  std::string msg = error_message<CorruptFile>([&] { d.begin(5); });
  EXPECT_TRUE(has(msg, file.string() + " line 2: not JSON")) << msg;

  write(file, "{\"loss\":1.0,\"step\":1}\n\n{\"loss\":1.0}\n");
  msg = error_message<CorruptFile>([&] { d.begin(5); });
  EXPECT_TRUE(has(msg, file.string() + " line 3: not a log object with an integer \"step\"")) << msg;

  write(file, "[1, 2]\n");
  msg = error_message<CorruptFile>([&] { d.begin(5); });
  EXPECT_TRUE(has(msg, " line 1: ")) << msg;
}

// A kill in the middle of a write leaves a last line without its newline: resuming drops it (the
// resumed run logs that step again) instead of refusing to train.
TEST(JsonLinesCallback, ATornLastLineIsDroppedOnResume) {
  TempDir tmp;
  const fs::path file = tmp / "logs.jsonl";
  write(file, "{\"loss\":1.0,\"step\":1}\n{\"loss\":0.5,\"st");
  Driver d(std::make_shared<JsonLinesCallback>(), tmp.path());
  d.begin(5);
  EXPECT_EQ(read(file), "{\"loss\":1.0,\"step\":1}\n");
}

TEST(JsonLinesCallback, OnlyWorldProcessZeroWrites) {
  TempDir tmp;
  Driver d(std::make_shared<JsonLinesCallback>(), tmp.path());
  d.state.is_world_process_zero = false;
  d.log(1, {{"loss", 1.0}});
  EXPECT_FALSE(fs::exists(tmp / "logs.jsonl"));
}

TEST(JsonLinesCallback, UnwritableFolderIsAnIOErrorNamingThePath) {
  TempDir tmp;
  write(tmp / "file", "x");  // output_dir under a regular file
  Driver d(std::make_shared<JsonLinesCallback>(), tmp / "file" / "out");
  expect_error<IOError>([&] { d.log(1, {{"loss", 1.0}}); }, (tmp / "file" / "out").string());
}

// ---- CSV ----

TEST(CsvLoggerCallback, HeaderGrowsInFirstSeenOrderAndMissingCellsAreEmpty) {
  TempDir tmp;
  Driver d(std::make_shared<CsvLoggerCallback>(), tmp / "out");
  d.begin();
  d.log(5, {{"loss", 0.5}, {"learning_rate", 5e-05}});
  EXPECT_EQ(read(tmp / "out" / "logs.csv"), "step,loss,learning_rate\n5,0.5,5e-05\n");
  d.log(5, {{"eval_loss", 0.25}, {"epoch", 1.0}});
  d.log(10, {{"loss", 0.25}, {"learning_rate", 2.5e-05}, {"epoch", 2.0}});
  d.end();
  EXPECT_EQ(read(tmp / "out" / "logs.csv"),
            "step,loss,learning_rate,eval_loss,epoch\n"
            "5,0.5,5e-05,,\n"
            "5,,,0.25,1\n"
            "10,0.25,2.5e-05,,2\n");
}

TEST(CsvLoggerCallback, NumbersRoundTrip) {
  TempDir tmp;
  Driver d(std::make_shared<CsvLoggerCallback>(), tmp.path());
  const std::vector<double> values = {0.1 + 0.2, 1.0 / 3.0,   6.02214076e23,
                                      -1e-300,   123456789.0, std::numeric_limits<double>::denorm_min()};
  Logs logs;
  for (size_t i = 0; i < values.size(); ++i) logs.emplace_back("v" + std::to_string(i), values[i]);
  logs.emplace_back("nan", std::nan(""));
  logs.emplace_back("inf", std::numeric_limits<double>::infinity());
  d.log(3, logs);
  const std::string text = read(tmp / "logs.csv");
  EXPECT_EQ(text,
            "step,v0,v1,v2,v3,v4,v5,nan,inf\n3,0.30000000000000004,0.3333333333333333,6.02214076e+23,-1e-300,"
            "123456789,5e-324,nan,inf\n");
  std::istringstream row(text.substr(text.find('\n') + 1));
  std::string cell;
  std::getline(row, cell, ',');  // step
  for (double v : values) {
    std::getline(row, cell, ',');
    EXPECT_EQ(std::strtod(cell.c_str(), nullptr), v) << cell;  // bit-exact
  }
}

TEST(CsvLoggerCallback, KeysWithCommasAndQuotesAreQuotedAndReadBack) {
  TempDir tmp;
  {
    Driver d(std::make_shared<CsvLoggerCallback>(), tmp.path());
    d.begin();
    d.log(1, {{"f1,macro", 0.5}, {"say \"hi\"", 2.0}});
  }
  const std::string expected = "step,\"f1,macro\",\"say \"\"hi\"\"\"\n1,0.5,2\n";
  EXPECT_EQ(read(tmp / "logs.csv"), expected);
  Driver d(std::make_shared<CsvLoggerCallback>(), tmp.path());
  d.begin(1);  // reads the quoted header back; nothing to drop
  d.log(2, {{"say \"hi\"", 3.0}});
  EXPECT_EQ(read(tmp / "logs.csv"), expected + "2,,3\n");
}

TEST(CsvLoggerCallback, ResumedRunEqualsUninterruptedRun) {
  TempDir tmp;
  const std::vector<int64_t> steps = {4, 8, 12, 16};
  const std::string straight = run_logs<CsvLoggerCallback>(tmp / "a", steps);
  const std::string resumed = run_logs<CsvLoggerCallback>(tmp / "b", steps, 12, 4);
  EXPECT_EQ(resumed, straight);
  EXPECT_EQ(std::count(straight.begin(), straight.end(), '\n'), 5);
}

TEST(CsvLoggerCallback, ResumeKeepsRowsUpToTheCheckpointAndTheHeader) {
  TempDir tmp;
  write(tmp / "logs.csv", "step,loss,eval_loss\n2,0.5,\n4,,0.25\n6,0.125,\n");
  Driver d(std::make_shared<CsvLoggerCallback>(), tmp.path());
  d.begin(4);
  EXPECT_EQ(read(tmp / "logs.csv"), "step,loss,eval_loss\n2,0.5,\n4,,0.25\n");
  d.log(6, {{"loss", 0.75}, {"grad_norm", 1.5}});
  EXPECT_EQ(read(tmp / "logs.csv"), "step,loss,eval_loss,grad_norm\n2,0.5,,\n4,,0.25,\n6,0.75,,1.5\n");
}

TEST(CsvLoggerCallback, LogBeforeTrainKeepsTheFile) {
  TempDir tmp;
  write(tmp / "logs.csv", "step,loss\n9,0.5\n");
  Driver d(std::make_shared<CsvLoggerCallback>(), tmp.path());
  d.log(9, {{"eval_loss", 0.25}});  // evaluate() alone
  EXPECT_EQ(read(tmp / "logs.csv"), "step,loss,eval_loss\n9,0.5,\n9,,0.25\n");
}

TEST(CsvLoggerCallback, CorruptFilesNameFileAndLine) {
  TempDir tmp;
  const fs::path file = tmp / "logs.csv";
  Driver d(std::make_shared<CsvLoggerCallback>(), tmp.path());
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case& c : {Case{"step,loss\n1,0.5\n2,0.5,7\n", " line 3: 3 fields where the header has 2"},
                        Case{"loss,step\n", " line 1: the header does not start with \"step\""},
                        Case{"step,loss\n1,0.5\nx,0.5\n", " line 3: step 'x' is not an integer"},
                        Case{"step,loss\n1,abc\n", " line 2: 'abc' of column 'loss' is not a number"},
                        Case{"step,\"lo\nss\"\n1,\"0.5\n", " line 3: a quoted field never ends"}}) {
    write(file, c.text);
    expect_error<CorruptFile>([&] { d.begin(5); }, file.string() + c.expected);
  }
}

// ---- registry ----

TEST(LogFileIntegrations, RegisteredUnderTheirReportToNames) {
  const auto names = integration_names();
  for (const char* n : {"csv", "jsonl", "mlflow"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  const auto cbs = reporting_integration_callbacks({"jsonl", "csv", "mlflow"});
  ASSERT_EQ(cbs.size(), 3u);
  EXPECT_NE(dynamic_cast<JsonLinesCallback*>(cbs[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<CsvLoggerCallback*>(cbs[1].get()), nullptr);
  EXPECT_NE(dynamic_cast<MLflowCallback*>(cbs[2].get()), nullptr);
  EXPECT_EQ(cbs[0]->name(), "JsonLinesCallback");
  EXPECT_EQ(cbs[1]->name(), "CsvLoggerCallback");
  EXPECT_EQ(cbs[2]->name(), "MLflowCallback");
}

}  // namespace
}  // namespace kiln::trainer
