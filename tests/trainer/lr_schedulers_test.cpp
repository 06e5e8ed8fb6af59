// HF's schedulers at chosen steps (0, warmup-1, warmup, middle, end, beyond) against values worked
// out by hand from the formulas in transformers/optimization.py; ReduceLROnPlateau against torch's
// rules traced by hand; state round trips; errors. Rates agree to 1e-12 relative (the expected values
// are closed forms evaluated in another order than the code's, so the last bits may differ).
#include "kiln/lr_schedulers.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "test_util.h"

namespace kiln::trainer {
namespace {

using Json = nlohmann::json;
using kiln::test::expect_error;
constexpr double kRel = 1e-12;
constexpr double kLr = 1e-3;
constexpr int64_t kWarmup = 10;
constexpr int64_t kTotal = 100;

void expect_rel(double actual, double expected, const std::string& what) {
  if (expected == 0.0) {
    EXPECT_EQ(actual, 0.0) << what;
  } else {
    EXPECT_LE(std::abs(actual - expected), kRel * std::abs(expected)) << what << ": " << actual << " vs " << expected;
  }
}

// {step, expected lr} pairs for one schedule; also checks that stepping gives the same rates.
void expect_schedule(const std::string& type, const std::vector<std::pair<int64_t, double>>& expected,
                     const Json& kwargs = {}, int64_t warmup = kWarmup, int64_t total = kTotal) {
  auto s = make_lr_scheduler(type, kLr, warmup, total, kwargs);
  EXPECT_EQ(s->type(), type);
  EXPECT_FALSE(s->steps_on_metric());
  for (const auto& [step, lr] : expected)
    expect_rel(s->lr(step), lr, fmt::format("{} {} step {}", type, kwargs.dump(), step));
  // current_lr() after n step() calls is lr(n).
  auto ordered = expected;
  std::sort(ordered.begin(), ordered.end());
  int64_t done = 0;
  for (const auto& [step, lr] : ordered) {
    for (; done < step; ++done) s->step();
    EXPECT_EQ(s->last_step(), step);
    EXPECT_EQ(s->current_lr(), s->lr(step)) << type << " step " << step;
  }
}

TEST(LRSchedulers, NamesAreHuggingFaces) {
  EXPECT_EQ(LRScheduler::names(),
            (std::vector<std::string>{"constant", "constant_with_warmup", "cosine", "cosine_with_restarts",
                                      "inverse_sqrt", "linear", "polynomial", "reduce_lr_on_plateau"}));
}

TEST(LRSchedulers, Linear) {
  // warmup: step/10; then (100 - step) / 90, floored at 0.
  expect_schedule(
      "linear",
      {{0, 0.0}, {1, kLr / 10}, {9, kLr * 9 / 10}, {10, kLr}, {55, kLr / 2}, {99, kLr / 90}, {100, 0.0}, {150, 0.0}});
  // No warmup: max(1, 0) keeps the division defined; step 0 is the full rate.
  expect_schedule("linear", {{0, kLr}, {50, kLr / 2}, {100, 0.0}}, {}, 0, 100);
}

TEST(LRSchedulers, Cosine) {
  // 0.5 * (1 + cos(pi * 0.5 * 2 * progress)), progress = (step - 10) / 90.
  expect_schedule("cosine", {{0, 0.0},
                             {9, kLr * 0.9},
                             {10, kLr},
                             {55, kLr / 2},
                             {40, kLr * 0.75},  // cos(pi/3) = 1/2
                             {100, 0.0},
                             // past the end HF's cosine rises again: progress 14/9, cos(14pi/9) = cos(80 deg)
                             {150, kLr * 0.5 * (1 + std::sin(std::numbers::pi / 18))}});
  // num_cycles = 2: two full waves; step 55 is progress 1/2 (cos 2pi = 1), step 40 is 1/3 (cos 4pi/3 = -1/2).
  expect_schedule("cosine", {{10, kLr}, {55, kLr}, {40, kLr * 0.25}, {100, kLr}}, {{"num_cycles", 2}});
}

TEST(LRSchedulers, CosineWithRestarts) {
  // num_cycles = 1: 0.5 * (1 + cos(pi * (progress % 1))), 0 from progress 1 on.
  expect_schedule("cosine_with_restarts", {{0, 0.0},
                                           {9, kLr * 0.9},
                                           {10, kLr},
                                           {55, kLr / 2},
                                           {100, 0.0},
                                           {150, 0.0},
                                           {99, kLr * 0.5 * (1 - std::cos(std::numbers::pi / 90))}});
  // num_cycles = 3: step 25 is progress 1/6 -> (1/2 % 1); step 45 is 7/18 -> 7/6 % 1 = 1/6 -> cos(pi/6).
  expect_schedule("cosine_with_restarts", {{25, kLr / 2}, {45, kLr * 0.5 * (1 + std::sqrt(3.0) / 2)}, {100, 0.0}},
                  {{"num_cycles", 3}});
}

TEST(LRSchedulers, Polynomial) {
  // (lr_init - lr_end) * (1 - (step - 10) / 90) ** power + lr_end, then / lr_init * lr_init; lr_end past the end.
  const double end = 1e-7;
  expect_schedule("polynomial",
                  {{0, 0.0}, {9, kLr * 0.9}, {10, kLr}, {55, (kLr - end) * 0.5 + end}, {100, end}, {150, end}});
  expect_schedule("polynomial", {{10, kLr}, {55, (kLr - 1e-4) * 0.25 + 1e-4}, {100, 1e-4}, {101, 1e-4}},
                  {{"lr_end", 1e-4}, {"power", 2.0}});
}

TEST(LRSchedulers, ConstantIgnoresWarmup) {
  expect_schedule("constant", {{0, kLr}, {9, kLr}, {10, kLr}, {55, kLr}, {100, kLr}, {150, kLr}});
}

TEST(LRSchedulers, ConstantWithWarmup) {
  expect_schedule("constant_with_warmup", {{0, 0.0}, {9, kLr * 0.9}, {10, kLr}, {55, kLr}, {100, kLr}, {150, kLr}});
}

TEST(LRSchedulers, InverseSqrt) {
  // timescale = num_warmup_steps = 10: 1 / sqrt((step + 0) / 10).
  expect_schedule("inverse_sqrt",
                  {{0, 0.0}, {9, kLr * 0.9}, {10, kLr}, {40, kLr / 2}, {90, kLr / 3}, {1000, kLr / 10}});
  // timescale 100: 1 / sqrt((step + 90) / 100).
  expect_schedule("inverse_sqrt", {{10, kLr}, {310, kLr / 2}, {9910, kLr / 10}}, {{"timescale", 100}});
  // No warmup: timescale 10_000.
  expect_schedule("inverse_sqrt", {{0, kLr}, {30000, kLr / 2}, {2500, kLr / std::sqrt(1.25)}}, {}, 0, 100);
}

TEST(LRSchedulers, PlateauFollowsTorchRules) {
  // patience 2, factor 0.5, rel threshold 1e-4: a metric counts as better only below best * 0.9999.
  auto s = make_lr_scheduler("reduce_lr_on_plateau", 1.0, 5, 100, {{"patience", 2}, {"factor", 0.5}});
  EXPECT_TRUE(s->steps_on_metric());
  EXPECT_EQ(s->current_lr(), 1.0);  // warmup is ignored, as in HF
  const std::vector<std::pair<double, double>> trace = {
      {1.0, 1.0},      // best inf -> 1.0
      {0.99995, 1.0},  // not below 0.9999: bad 1
      {1.0, 1.0},      // bad 2
      {1.0, 0.5},      // bad 3 > patience: halve, bad 0
      {0.5, 0.5},      // better
      {0.6, 0.5},     {0.6, 0.5}, {0.6, 0.25},
  };
  for (size_t i = 0; i < trace.size(); ++i) {
    s->step(trace[i].first);
    EXPECT_EQ(s->current_lr(), trace[i].second) << "evaluation " << i + 1;
  }
  EXPECT_EQ(s->last_step(), 8);
  // lr(k): the rate after k evaluations.
  EXPECT_EQ(s->lr(0), 1.0);
  EXPECT_EQ(s->lr(3), 1.0);
  EXPECT_EQ(s->lr(4), 0.5);
  EXPECT_EQ(s->lr(7), 0.5);
  EXPECT_EQ(s->lr(8), 0.25);
  EXPECT_EQ(s->lr(100), 0.25);
}

TEST(LRSchedulers, PlateauCooldownMinLrAndMax) {
  // mode max, abs threshold 0.1, patience 0, cooldown 1, min_lr 0.3, factor 0.5.
  auto s = make_lr_scheduler("reduce_lr_on_plateau", 1.0, 0, 0,
                             {{"mode", "max"},
                              {"threshold_mode", "abs"},
                              {"threshold", 0.1},
                              {"patience", 0},
                              {"cooldown", 1},
                              {"min_lr", 0.3},
                              {"factor", 0.5},
                              {"verbose", false}});
  s->step(1.0);  // better than -inf
  EXPECT_EQ(s->current_lr(), 1.0);
  s->step(1.05);  // not above 1.0 + 0.1: bad 1 > 0 -> 0.5, cooldown 1
  EXPECT_EQ(s->current_lr(), 0.5);
  s->step(0.0);  // in cooldown: bad reset
  EXPECT_EQ(s->current_lr(), 0.5);
  s->step(0.0);  // bad -> max(0.25, 0.3) = 0.3
  EXPECT_EQ(s->current_lr(), 0.3);
  s->step(0.0);  // cooldown
  s->step(0.0);  // max(0.15, 0.3) = 0.3: no move
  EXPECT_EQ(s->current_lr(), 0.3);
  s->step(1.2);  // 1.2 > 1.1: better
  EXPECT_EQ(s->current_lr(), 0.3);
}

TEST(LRSchedulers, PlateauEpsBlocksTinyReductions) {
  auto s = make_lr_scheduler("reduce_lr_on_plateau", 1e-8, 0, 0, {{"patience", 0}});
  s->step(1.0);
  s->step(2.0);  // 1e-8 - 1e-9 = 9e-9 is not > eps 1e-8
  EXPECT_EQ(s->current_lr(), 1e-8);
}

template <class F>
void resume_matches(const std::string& type, const Json& kwargs, int64_t split, F&& advance) {
  auto whole = make_lr_scheduler(type, 3e-4, 7, 50, kwargs);
  auto first = make_lr_scheduler(type, 3e-4, 7, 50, kwargs);
  for (int64_t i = 0; i < split; ++i) {
    advance(*whole, i);
    advance(*first, i);
  }
  const std::string saved = first->state().dump();
  auto resumed = make_lr_scheduler(type, 3e-4, 7, 50, kwargs);
  resumed->load_state(Json::parse(saved));
  EXPECT_EQ(resumed->last_step(), split);
  for (int64_t i = split; i < 60; ++i) {
    EXPECT_EQ(resumed->current_lr(), whole->current_lr()) << type << " step " << i;
    advance(*whole, i);
    advance(*resumed, i);
  }
}

TEST(LRSchedulers, StateRoundTripContinuesBitForBit) {
  for (const auto& type : LRScheduler::names()) {
    if (type == "reduce_lr_on_plateau") continue;
    resume_matches(type, {}, 23, [](LRScheduler& s, int64_t) { s.step(); });
  }
  // Plateau: resumed before any evaluation (best = inf must survive JSON) and mid-way.
  const auto metric = [](LRScheduler& s, int64_t i) { s.step(1.0 + 0.01 * std::sin(0.7 * static_cast<double>(i))); };
  resume_matches("reduce_lr_on_plateau", {{"patience", 1}}, 0, metric);
  resume_matches("reduce_lr_on_plateau", {{"patience", 1}}, 17, metric);
  auto fresh = make_lr_scheduler("reduce_lr_on_plateau", 1.0, 0, 0);
  EXPECT_EQ(fresh->state()["best"], "inf");
}

TEST(LRSchedulers, LoadStateRejectsOtherTypesAndBadFields) {
  auto linear = make_lr_scheduler("linear", 1e-3, 1, 10);
  auto cosine = make_lr_scheduler("cosine", 1e-3, 1, 10);
  linear->step();
  linear->step();
  EXPECT_THROW(linear->load_state(cosine->state()), InvalidArgument);
  Json bad = linear->state();
  bad["last_step"] = -3;
  EXPECT_THROW(linear->load_state(bad), InvalidArgument);
  bad.erase("last_step");
  expect_error<InvalidArgument>([&] { linear->load_state(bad); }, "'last_step'");
  auto plateau = make_lr_scheduler("reduce_lr_on_plateau", 1.0, 0, 0);
  Json p = plateau->state();
  p["history"] = Json::array({Json::array({3, 0.5})});
  EXPECT_THROW(plateau->load_state(p), InvalidArgument);
  EXPECT_EQ(linear->last_step(), 2);  // a failed load changes nothing
}

TEST(LRSchedulers, ErrorsNameTheValidChoices) {
  expect_error<InvalidArgument>(
      [] { make_lr_scheduler("cosine_annealing", 1e-3, 0, 10); },
      {"'cosine_annealing'", "constant, constant_with_warmup, cosine", "reduce_lr_on_plateau"});
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("cosine", 1e-3, 0, 10, {{"num_cycle", 1}});
      },
      {"'num_cycle'", "valid: num_cycles"});
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("linear", 1e-3, 0, 10, {{"power", 1}});
      },
      {"'power'", "valid: (none)"});
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("cosine", 1e-3, 0, 10, {{"num_cycles", "two"}});
      },
      {"'num_cycles'", "a number"});
  expect_error<InvalidArgument>([] { make_lr_scheduler("cosine", 1e-3, 0, 10, Json::array({1})); }, "JSON object");
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("polynomial", 1e-3, 0, 10, {{"lr_end", 1e-3}});
      },
      "lr_end (0.001) must be smaller than initial lr (0.001)");
  expect_error<InvalidArgument>([] { make_lr_scheduler("polynomial", 1e-3, 10, 10); },
                                {"num_training_steps (10)", "num_warmup_steps (10)"});
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("inverse_sqrt", 1e-3, 0, 10, {{"timescale", 0}});
      },
      {"timescale", "positive"});
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("inverse_sqrt", 1e-3, 0, 10, {{"timescale", 2.5}});
      },
      {"'timescale'", "integer"});
  expect_error<InvalidArgument>([] { make_lr_scheduler("linear", 1e-3, -1, 10); }, "num_warmup_steps (-1)");
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("reduce_lr_on_plateau", 1e-3, 0, 0, {{"factor", 1.0}});
      },
      "factor should be < 1.0");
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("reduce_lr_on_plateau", 1e-3, 0, 0, {{"mode", "avg"}});
      },
      {"'mode'", "min, max"});
  expect_error<InvalidArgument>(
      [] {
        make_lr_scheduler("reduce_lr_on_plateau", 1e-3, 0, 0, {{"patience", true}});
      },
      {"'patience'", "integer"});
  expect_error<InvalidArgument>([] { make_lr_scheduler("linear", 1e-3, 0, 10)->step(0.5); }, "takes no metric");
  expect_error<InvalidArgument>([] { make_lr_scheduler("reduce_lr_on_plateau", 1e-3, 0, 0)->step(); }, "metric");
  expect_error<InvalidArgument>([] { make_lr_scheduler("linear", 1e-3, 0, 10)->lr(-1); }, "step -1");
}

}  // namespace
}  // namespace kiln::trainer
