// Kiln's hyperparameter search (kiln/hp_search.h): the space's JSON and its errors, the random
// backend's draws (ranges, steps, log scale, seeds), the grid, trial arguments, HF's default
// objective, and a search over real Trainer runs that picks the best trial.
#include "kiln/hp_search.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "kiln/metrics.h"
#include "test_util.h"
#include "trainer_fixtures.h"

namespace kiln::trainer {
namespace {

using kiln::test::expect_error;
using nlohmann::json;

const nlohmann::ordered_json kSpace = nlohmann::ordered_json::parse(R"({
  "learning_rate": {"type": "float", "low": 1e-4, "high": 1e-1, "log": true},
  "warmup_ratio": {"type": "float", "low": 0, "high": 0.5, "step": 0.1},
  "num_train_epochs": {"type": "int", "low": 1, "high": 4},
  "seed": {"type": "int", "low": 2, "high": 64, "log": true},
  "per_device_train_batch_size": [8, 16, 32]
})");

TEST(HpSearch, SpaceFromJson) {
  const HpSpace space = HpSpace::from_json(kSpace);
  ASSERT_EQ(space.params.size(), 5u);
  const HpParam& lr = space.params[0];
  EXPECT_EQ(lr.name, "learning_rate");  // the file's order
  EXPECT_EQ(lr.kind, HpParam::Kind::Float);
  EXPECT_TRUE(lr.log);
  EXPECT_EQ(space.params[2].step, 1.0);
  EXPECT_EQ(space.params[4].kind, HpParam::Kind::Categorical);
  const auto bad = [](const char* text) {
    return [text] { HpSpace::from_json(nlohmann::ordered_json::parse(text), "s.json"); };
  };
  expect_error<InvalidArgument>(bad(R"({"lr": {"type": "float", "low": 1, "high": 0}})"), "low 1 is above high 0");
  expect_error<InvalidArgument>(bad(R"({"lr": {"type": "float", "low": 0, "high": 1, "log": true}})"),
                                "log needs low > 0");
  expect_error<InvalidArgument>(bad(R"({"lr": {"type": "float", "low": 0, "hi": 1}})"), "unknown key 'hi'");
  expect_error<InvalidArgument>(bad(R"({"lr": {"type": "beta"}})"), "type 'beta'");
  expect_error<InvalidArgument>(bad(R"({"n": {"type": "int", "low": 0.5, "high": 3}})"), "integer bounds");
  expect_error<InvalidArgument>(bad(R"({"n": []})"), {"s.json", "parameter 'n'", "empty"});
  expect_error<InvalidArgument>(bad(R"([1])"), "a JSON object of parameters");
}

TEST(HpSearch, RandomDrawsStayInTheirSpaceAndRepeatPerSeed) {
  const HpSpace space = HpSpace::from_json(kSpace);
  HpSampler a(7);
  std::map<int, int> decades;
  std::set<int64_t> seeds;
  const int n = 6000;
  for (int i = 0; i < n; ++i) {
    const double lr = a.draw(space.params[0]);
    ASSERT_TRUE(lr >= 1e-4 && lr <= 1e-1) << lr;
    ++decades[static_cast<int>(std::floor(std::log10(lr)))];
    const double warmup = a.draw(space.params[1]);
    EXPECT_NEAR(warmup * 10, std::round(warmup * 10), 1e-9);
    const int64_t epochs = a.draw(space.params[2]);
    EXPECT_TRUE(epochs >= 1 && epochs <= 4);
    seeds.insert(a.draw(space.params[3]).get<int64_t>());
    const json batch = a.draw(space.params[4]);
    EXPECT_TRUE(batch == 8 || batch == 16 || batch == 32);
  }
  // log-uniform: each decade a third of the draws (5 sigma of a binomial: about 0.03)
  for (int d : {-4, -3, -2}) EXPECT_NEAR(decades[d] / static_cast<double>(n), 1.0 / 3, 0.03) << d;
  EXPECT_EQ(*seeds.begin(), 2);
  EXPECT_EQ(*seeds.rbegin(), 64);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += a.suggest_float(0, 1);
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  HpSampler b(11), c(11), d(12);
  std::vector<json> first, second, other;
  for (int i = 0; i < 10; ++i)
    for (const HpParam& p : space.params) {
      first.push_back(b.draw(p));
      second.push_back(c.draw(p));
      other.push_back(d.draw(p));
    }
  EXPECT_EQ(first, second);
  EXPECT_NE(first, other);
}

TEST(HpSearch, GridTrialArgumentsAndTheDefaultObjective) {
  const HpSpace space =
      HpSpace::from_json(nlohmann::ordered_json::parse(R"({"learning_rate": [0.1, 0.01], "seed": [1, 2, 3]})"));
  const auto points = grid_points(space);
  ASSERT_EQ(points.size(), 6u);
  EXPECT_EQ(points[0], json::parse(R"({"learning_rate": 0.1, "seed": 1})"));
  EXPECT_EQ(points[1], json::parse(R"({"learning_rate": 0.1, "seed": 2})"));
  EXPECT_EQ(points[5], json::parse(R"({"learning_rate": 0.01, "seed": 3})"));
  expect_error<InvalidArgument>([] { grid_points(HpSpace::from_json(kSpace)); }, "categorical choices only");

  TrainingArguments base;
  base.output_dir = "out";
  const TrainingArguments t = trial_arguments(base, json::parse(R"({"learning_rate": 0.5, "num_train_epochs": 2})"), 3);
  EXPECT_EQ(t.learning_rate, 0.5);
  EXPECT_EQ(t.num_train_epochs, 2.0);
  EXPECT_EQ(t.output_dir, (std::filesystem::path("out") / "run-3").string());
  expect_error<InvalidArgument>([&] { trial_arguments(base, json::parse(R"({"lr": 1})"), 0); },
                                "Trying to set lr in the hyperparameter search");

  EXPECT_EQ(default_compute_objective({{"eval_loss", 0.5}, {"eval_runtime", 3}, {"epoch", 1}}), 0.5);
  EXPECT_EQ(default_compute_objective({{"eval_loss", 0.5},
                                       {"eval_accuracy", 0.75},
                                       {"eval_f1_macro", 0.25},
                                       {"eval_samples_per_second", 9},
                                       {"eval_mem_cpu_alloc_delta", 4}}),
            1.0);
}

TEST(HpSearch, TrainsEveryTrialInItsFolderAndReturnsTheBest) {
  const auto dir = testing::fresh("hp_search");
  const auto model = testing::write_model(dir, false);
  const auto train = testing::dataset(96, 1), eval = testing::dataset(48, 2);
  TrainingArguments args = testing::base_args(dir / "search");
  args.num_train_epochs = 2;
  args.validate();
  const HpSpace space = HpSpace::from_json(nlohmann::ordered_json::parse(R"({"learning_rate": [1e-5, 0.05, 0.002]})"));
  int made = 0;
  const TrainerFactory make = [&](const TrainingArguments& a) {
    ++made;
    EXPECT_EQ(a.output_dir, (dir / "search" / fmt::format("run-{}", made - 1)).string());
    return std::make_unique<Trainer>(ModelSource::onnx(model.string(), training::LossType::CrossEntropyLoss), a, train,
                                     eval);
  };
  HpSearchOptions o;
  o.backend = "grid";
  o.n_trials = 10;  // the grid has 3
  std::vector<int> seen;
  const BestRun best =
      hyperparameter_search(make, args, space, o, nullptr, [&](const HpTrial& t) { seen.push_back(t.number); });
  EXPECT_EQ(made, 3);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(best.trials.size(), 3u);
  double lowest = best.trials[0].objective;
  for (const auto& t : best.trials) {
    lowest = std::min(lowest, t.objective);
    EXPECT_EQ(t.objective, t.metrics.at("eval_loss"));
    EXPECT_TRUE(std::filesystem::exists(dir / "search" / fmt::format("run-{}", t.number)));
  }
  EXPECT_EQ(best.objective, lowest);
  EXPECT_EQ(best.hyperparameters["learning_rate"], 0.05);  // 1e-5 barely moves in 12 steps
  EXPECT_LT(best.trials[1].objective, best.trials[0].objective);

  o.direction = "maximize";
  o.backend = "random";
  o.n_trials = 2;
  made = 0;
  const BestRun worst = hyperparameter_search(make, args, space, o);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(worst.objective, std::max(worst.trials[0].objective, worst.trials[1].objective));
  o.backend = "optuna";
  expect_error<InvalidArgument>([&] { hyperparameter_search(make, args, space, o); }, "'random', 'grid'");
}

}  // namespace
}  // namespace kiln::trainer
