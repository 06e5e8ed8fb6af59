// Issue 16's findings in the Trainer, each fed the exact bad state: F4 two runs on one output_dir,
// F5 kills between the renames of a checkpoint replace and during rotation, F7 resume from edited
// step counts, F8 misleading errors (huge step numbers in folder names, a missing optimizer file, a
// file given as a checkpoint, a tensor the model does not have).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "kiln/safetensors.h"
#include "kiln/trainer.h"
#include "test_util.h"
#include "trainer/loop/checkpoint_folder.h"
#include "trainer/loop/output_dir_lock.h"
#include "trainer_fixtures.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using kiln::test::expect_error;
using kiln::test::TempDir;
using testing::base_args;
using testing::dataset;
using testing::write_model;

// A complete checkpoint folder whose trainer_state.json holds `tag`.
void complete_folder(const fs::path& p, const std::string& tag) {
  fs::create_directories(p);
  std::ofstream(p / kTrainerStateFile) << nlohmann::json{{"tag", tag}}.dump();
}

std::string tag_of(const fs::path& p) {
  std::ifstream in(p / kTrainerStateFile);
  return nlohmann::json::parse(in).at("tag").get<std::string>();
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CrashSafetyF4, ASecondRunOnALockedOutputDirIsAnErrorNamingTheFirst) {
  TempDir dir;
  const OutputDirLock first((dir / "out").string());
  // flock locks belong to open files: a second lock in this very process conflicts like another run's.
  expect_error<InvalidArgument>([&] { OutputDirLock second((dir / "out").string()); },
                                {"is in use by another training run", "pid", "on host"});
}

TEST(CrashSafetyF4, ALockLeftByADeadRunIsTakenOver) {
  TempDir dir;
  fs::create_directories(dir / "out");
  std::ofstream(dir / "out" / kLockFile) << "pid 999999 on host gone, since 2026-01-01T00:00:00Z\n";
  ::testing::internal::CaptureStderr();
  { const OutputDirLock lock((dir / "out").string()); }  // no one holds the flock: taken over
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("kiln: warning: output_dir '" + (dir / "out").string() +
                         "' was locked by a run that is gone (pid 999999 on host gone"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("taking it over"), std::string::npos) << warning;
  std::ifstream in(dir / "out" / kLockFile);
  const std::string left((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(left, "");  // released cleanly: no owner recorded
}

TEST(CrashSafetyF4, TrainHoldsTheLockWhileItRuns) {
  TempDir dir;
  TrainingArguments a = base_args(dir / "out");
  a.max_steps = 1;
  const OutputDirLock held((dir / "out").string());
  Trainer t(ModelSource::onnx(write_model(dir.path(), false).string(), training::LossType::CrossEntropyLoss), a,
            dataset(8, 1));
  expect_error<InvalidArgument>([&] { t.train(); }, "is in use by another training run");
  EXPECT_FALSE(fs::exists(dir / "out" / "checkpoint-1"));
}

TEST(CrashSafetyF5, AKillBetweenTheRenamesOfAReplaceIsFinishedAtStart) {
  TempDir dir;
  // Killed after checkpoint-4 moved aside and before the new one moved in: the new one wins.
  complete_folder(dir / ".checkpoint-4.tmp-abcdef", "new");
  complete_folder(dir / ".checkpoint-4.tmp-abcdef.old", "old");
  recover_checkpoint_folders(dir.path().string());
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"checkpoint-4"});
  EXPECT_EQ(tag_of(dir / "checkpoint-4"), "new");
}

TEST(CrashSafetyF5, AReplaceKilledAfterItsSecondRenameDropsTheOldFolder) {
  TempDir dir;
  complete_folder(dir / "checkpoint-4", "new");
  complete_folder(dir / ".checkpoint-4.tmp-abcdef.old", "old");
  recover_checkpoint_folders(dir.path().string());
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"checkpoint-4"});
  EXPECT_EQ(tag_of(dir / "checkpoint-4"), "new");
}

TEST(CrashSafetyF5, AnOldFolderWhoseReplacementIsGoneIsPutBack) {
  TempDir dir;
  complete_folder(dir / ".checkpoint-4.tmp-abcdef.old", "old");
  recover_checkpoint_folders(dir.path().string());
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"checkpoint-4"});
  EXPECT_EQ(tag_of(dir / "checkpoint-4"), "old");
}

TEST(CrashSafetyF5, UnfinishedWritesAndDeletionsAreRemovedAtStart) {
  TempDir dir;
  complete_folder(dir / "checkpoint-2", "kept");
  fs::create_directories(dir / ".checkpoint-6.tmp-zzzzzz");   // killed while writing
  complete_folder(dir / ".checkpoint-1.deleting", "doomed");  // killed while rotation deleted it
  fs::create_directories(dir / "runs");                       // not ours: untouched
  recover_checkpoint_folders(dir.path().string());
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"checkpoint-2", "runs"}));
}

TEST(CrashSafetyF5, RotationMovesADoomedFolderOutOfSightBeforeDeletingIt) {
  TempDir dir;
  for (int s : {1, 2, 3}) complete_folder(dir / fmt::format("checkpoint-{}", s), std::to_string(s));
  // A file inside that cannot be deleted would stop remove_all midway: the folder is already hidden.
  rotate_checkpoints(dir.path().string(), 2, std::nullopt);
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"checkpoint-2", "checkpoint-3"}));
}

TEST(CrashSafetyF8, AStepBeyondInt64InAFolderNameIsNotACheckpoint) {
  TempDir dir;
  complete_folder(dir / "checkpoint-99999999999999999999999", "huge");
  complete_folder(dir / "checkpoint-7", "seven");
  const auto all = sorted_checkpoints(dir.path().string());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(fs::path(all[0]).filename(), "checkpoint-7");
  rotate_checkpoints(dir.path().string(), 1, std::nullopt);  // stopped a fresh run at its first rotation
}

// Found by scripts/kill-gauntlet: a kill while the artifacts were written left
// artifacts/training_model.onnx.tmp-XXXXXX behind for good. train() removes such files from the
// folders the run owns; other files stay.
TEST(CrashSafetyF5, TemporariesOfInterruptedWritesAreRemovedAtTrainStart) {
  TempDir dir;
  const fs::path out = dir / "out";
  fs::create_directories(out / "artifacts");
  for (const fs::path& f : {out / "model.onnx.tmp-Ab3xY9", out / "artifacts" / "training_model.onnx.tmp-q1W2e3",
                            out / "notes.txt", out / "artifacts" / "keep.tmp-toolongname"})
    std::ofstream(f) << "x";
  TrainingArguments args = base_args(out);
  args.max_steps = 1;
  Trainer t(ModelSource::onnx(write_model(dir.path(), false).string(), training::LossType::CrossEntropyLoss), args,
            dataset(8, 1));
  t.train();
  EXPECT_FALSE(fs::exists(out / "model.onnx.tmp-Ab3xY9"));
  EXPECT_FALSE(fs::exists(out / "artifacts" / "training_model.onnx.tmp-q1W2e3"));
  EXPECT_TRUE(fs::exists(out / "notes.txt"));
  EXPECT_TRUE(fs::exists(out / "artifacts" / "keep.tmp-toolongname"));
}

// A finished 4-step run with a checkpoint at every step, and the arguments that made it.
struct SavedRun {
  TempDir dir;
  fs::path model;
  TrainingArguments args;
  SavedRun() {
    model = write_model(dir.path(), false);
    args = base_args(dir / "out");
    args.max_steps = 4;
    args.save_strategy = SaveStrategy::steps;
    args.save_steps = 1;
    Trainer t(source(), args, dataset(32, 7));
    t.train();
  }
  ModelSource source() const { return ModelSource::onnx(model.string(), training::LossType::CrossEntropyLoss); }
  fs::path checkpoint(int step) const { return dir / "out" / fmt::format("checkpoint-{}", step); }
  void edit_json(const fs::path& file, const std::function<void(nlohmann::json&)>& change) const {
    nlohmann::json j;
    {
      std::ifstream in(file);
      j = nlohmann::json::parse(in);
    }
    change(j);
    std::ofstream(file) << j.dump();
  }
  void resume_expecting(const fs::path& ckpt, std::initializer_list<std::string> fragments) {
    TrainingArguments a = args;
    a.max_steps = 6;
    Trainer t(source(), a, dataset(32, 7));
    expect_error<CorruptFile>([&] { t.train(ckpt.string()); }, fragments);
  }
};

TEST(CrashSafetyF7, AnEditedGlobalStepIsAnErrorNamingBothCounts) {
  SavedRun r;
  r.edit_json(r.checkpoint(2) / kTrainerStateFile, [](nlohmann::json& j) { j["global_step"] = INT64_MAX; });
  r.resume_expecting(r.checkpoint(2),
                     {"says global_step 9223372036854775807", "optimizer.safetensors holds optimizer step 2"});
  r.edit_json(r.checkpoint(3) / kTrainerStateFile, [](nlohmann::json& j) { j["global_step"] = -7; });
  r.resume_expecting(r.checkpoint(3), {"negative global_step -7"});
}

TEST(CrashSafetyF7, ASchedulerStepThatDisagreesIsAnError) {
  SavedRun r;
  r.edit_json(r.checkpoint(2) / "scheduler.json", [](nlohmann::json& j) { j["last_step"] = 3; });
  r.resume_expecting(r.checkpoint(2), {"global_step 2", "scheduler.json's last_step is 3"});
}

TEST(CrashSafetyF8, AMissingOptimizerFileIsNotCalledSaveOnlyModel) {
  SavedRun r;
  fs::remove(r.checkpoint(2) / "optimizer.safetensors");
  r.resume_expecting(r.checkpoint(2), {"has no optimizer.safetensors", "incomplete or damaged"});
}

// Optimizer metadata with a field of the wrong type or missing escaped as nlohmann's own exception
// (an internal error): now a CorruptFile naming the file.
TEST(CrashSafetyF8, MalformedOptimizerMetadataIsCorruptFile) {
  SavedRun r;
  const fs::path file = r.checkpoint(2) / "optimizer.safetensors";
  const SafetensorsFile saved = read_safetensors(file.string());
  const std::vector<std::pair<std::string, Tensor>> tensors(saved.tensors.begin(), saved.tensors.end());
  for (const char* info : {R"({"type": "AdamW", "step": "two", "learning_rate": 0.01})",
                           R"({"type": "AdamW", "learning_rate": 0.01})", R"({"type": 3, "step": 2})"}) {
    write_safetensors(file.string(), tensors, {{"kiln.optimizer", info}});
    r.resume_expecting(r.checkpoint(2), {file.string(), "bad optimizer metadata"});
  }
}

TEST(CrashSafetyF8, AFileGivenAsACheckpointIsNamedAsAFile) {
  SavedRun r;
  Trainer t(r.source(), r.args, dataset(32, 7));
  expect_error<IOError>([&] { t.train((r.checkpoint(2) / kTrainerStateFile).string()); },
                        "is a file; a checkpoint is a folder");
}

TEST(CrashSafetyF8, ATensorTheModelDoesNotHaveIsNotIgnored) {
  SavedRun r;
  const fs::path file = r.checkpoint(2) / "model.safetensors";
  const SafetensorsFile weights = read_safetensors(file.string());
  std::vector<std::pair<std::string, Tensor>> tensors(weights.tensors.begin(), weights.tensors.end());
  tensors.emplace_back("extra.weight", Tensor::zeros(DType::Float32, {2}));
  write_safetensors(file.string(), tensors, weights.metadata);
  r.resume_expecting(r.checkpoint(2), {"holds 'extra.weight', which is not a parameter of the model"});
}

}  // namespace
}  // namespace kiln::trainer
