// A process killed (SIGKILL) while saving a checkpoint must leave a complete, loadable one: the
// previous file or the new one, never a torn mix. A child saves checkpoints in a loop; the parent
// kills it after a random delay of up to twice one save's time (at least 30 ms), many times, and
// loads what is there.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "kiln/checkpoint.h"
#include "test_util.h"

namespace kiln::training {
namespace {

namespace fs = std::filesystem;

// Contents alternate between two layouts, A (even rounds) and B (odd), so that a torn file would
// mix them; within one checkpoint every element of every tensor equals the round number, which is
// also a property. About 4 MB each, so saves take long enough to be interrupted.
struct Layout {
  const char* name;
  std::vector<std::pair<std::string, Shape>> params;
  DType dtype;
};
const Layout kLayouts[2] = {
    {"A", {{"a.weight", {512, 512}}, {"a.bias", {512}}}, DType::Float32},
    {"B", {{"b.weight", {256, 1024}}, {"b.scale", {300}}, {"b.extra", {7, 9}}}, DType::Float64},
};

Tensor filled(DType dtype, const Shape& shape, int64_t value) {
  Tensor t = Tensor::empty(dtype, shape);
  if (dtype == DType::Float32) std::fill_n(t.data<float>(), t.numel(), static_cast<float>(value));
  else std::fill_n(t.data<double>(), t.numel(), static_cast<double>(value));
  return t;
}

CheckpointState make_round(int64_t round) {
  const Layout& layout = kLayouts[round % 2];
  CheckpointState s;
  s.optimizer_state().type = "SGD";
  s.optimizer_state().step = round;
  s.optimizer_state().learning_rate = static_cast<float>(round);
  for (const auto& [name, shape] : layout.params) {
    s.add_parameter(Parameter(name, filled(layout.dtype, shape, round), true));
    s.optimizer_state().slots["momentum_buffer"][name] = filled(layout.dtype, shape, round);
  }
  s.properties().set("round", round);
  s.properties().set("layout", std::string(layout.name));
  return s;
}

// The child: saves forever until killed. Never returns; a failure exits with a code the parent sees.
[[noreturn]] void save_forever(const std::string& path, int64_t first_round) {
  try {
    for (int64_t round = first_round;; ++round) CheckpointState::save_checkpoint(make_round(round), path, true);
  } catch (...) {
    ::_exit(3);
  }
}

template <class T>
bool all_equal(const Tensor& t, double value) {
  const T* p = t.data<T>();
  return std::all_of(p, p + t.numel(), [&](T x) { return static_cast<double>(x) == value; });
}

// Returns the checkpoint's round after checking that everything in it agrees with it.
int64_t check_consistent(const CheckpointState& s) {
  const int64_t round = s.properties().get_as<int64_t>("round");
  const Layout& layout = kLayouts[round % 2];
  EXPECT_EQ(s.properties().get_as<std::string>("layout"), layout.name);
  EXPECT_EQ(s.optimizer_state().step, round);
  EXPECT_EQ(s.optimizer_state().learning_rate, static_cast<float>(round));
  EXPECT_EQ(s.parameter_names().size(), layout.params.size());
  const auto& slot = s.optimizer_state().slots.at("momentum_buffer");
  for (const auto& [name, shape] : layout.params) {
    const Tensor& w = s.parameter(name).data();
    const Tensor& m = slot.at(name);
    EXPECT_EQ(w.shape(), shape) << name;
    EXPECT_EQ(m.shape(), shape) << name;
    const double v = static_cast<double>(round);
    const bool ok = layout.dtype == DType::Float32 ? all_equal<float>(w, v) && all_equal<float>(m, v)
                                                   : all_equal<double>(w, v) && all_equal<double>(m, v);
    EXPECT_TRUE(ok) << name << " holds values other than the round " << round;
  }
  return round;
}

TEST(CheckpointKill, SigkillWhileSavingLeavesACompleteCheckpoint) {
  const kiln::test::TempDir tmp;  // removed also when an ASSERT leaves the test early
  const fs::path& dir = tmp.path();
  const std::string path = (dir / "checkpoint").string();
  // One save's time here (sanitizer builds are several times slower), so that kills land inside
  // saves on any build.
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointState::save_checkpoint(make_round(0), (dir / "timing").string(), true);
  const auto one_save = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  fs::remove(dir / "timing");
  std::mt19937 rng(6);  // fixed: the same delays every run on one machine
  std::uniform_int_distribution<int> delay_ms(1, std::max(30, 2 * static_cast<int>(one_save.count())));
  constexpr int kRounds = 60;
  int64_t last_round = -1;
  int killed_mid_save = 0;  // rounds that left a temporary file: the kill landed inside a save

  for (int r = 0; r < kRounds; ++r) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0) << "fork failed";
    // Rounds of later children are larger, so a loaded round never goes back (max ~6e6 < 2^24,
    // exact in float too).
    if (child == 0) save_forever(path, int64_t{r} * 100'000);

    if (r == 0) {  // the first child must finish one save, so that every round has a file to load
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!fs::exists(path) && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "round " << r << ": the saving child stopped by itself (exit code "
        << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ")";

    SCOPED_TRACE("round " + std::to_string(r));
    ASSERT_TRUE(fs::exists(path)) << "no checkpoint after the first save";
    CheckpointState state;
    ASSERT_NO_THROW(state = CheckpointState::load_checkpoint(path));
    const int64_t round = check_consistent(state);
    EXPECT_GE(round, last_round) << "an older checkpoint came back";
    last_round = round;

    // Only the checkpoint and temporaries of interrupted saves ("<path>.tmp-XXXXXX"), which a
    // SIGKILL cannot clean up; they are removed here so that each round's are counted.
    bool left_temporary = false;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name == "checkpoint") continue;
      ASSERT_EQ(name.rfind("checkpoint.tmp-", 0), 0u) << "unexpected file " << name;
      left_temporary = true;
      fs::remove(entry.path());
    }
    killed_mid_save += left_temporary ? 1 : 0;
  }
  // Shows the kills really hit saves in progress (the child spends nearly all its time saving).
  EXPECT_GT(killed_mid_save, 0);
  std::cout << "[ kill test ] " << kRounds << " kills, " << killed_mid_save
            << " inside a save (temporary left behind), last round loaded " << last_round << "\n";
}

}  // namespace
}  // namespace kiln::training
