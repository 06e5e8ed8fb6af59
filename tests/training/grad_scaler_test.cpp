// GradScaler (kiln/grad_scaler.h) against torch.cuda.amp.GradScaler's documented semantics: growth
// by growth_factor after growth_interval finite steps in a row, backoff on a non-finite one (the
// count restarting), unscaling by factor / scale with found_inf for inf and NaN, torch's
// state_dict keys, and clear errors for bad options and bad saved state.
#include "kiln/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "test_util.h"

namespace kiln::training {
namespace {

using kiln::test::expect_error;

TEST(GradScaler, GrowsAfterTheIntervalAndBacksOffOnOverflow) {
  GradScaler s;  // torch's defaults
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.options().growth_interval, 2000);
  GradScaler g({.init_scale = 4, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
  g.update(false);
  g.update(false);
  EXPECT_EQ(g.scale(), 4.0);
  EXPECT_EQ(g.growth_tracker(), 2);
  g.update(false);
  EXPECT_EQ(g.scale(), 8.0);
  EXPECT_EQ(g.growth_tracker(), 0);
  g.update(false);
  g.update(true);  // the count restarts
  EXPECT_EQ(g.scale(), 4.0);
  EXPECT_EQ(g.growth_tracker(), 0);
  g.update(false);
  g.update(false);
  EXPECT_EQ(g.scale(), 4.0);
  g.update(false);
  EXPECT_EQ(g.scale(), 8.0);
}

TEST(GradScaler, UnscalesInPlaceAndFindsInfAndNan) {
  GradScaler g({.init_scale = 1024});
  Tensor a = Tensor::from_vector<float>({3}, {1024.f, -512.f, 0.f});
  Tensor b = Tensor::from_vector<float>({2}, {2048.f, 256.f});
  EXPECT_FALSE(g.unscale({&a, &b}, 0.5));  // 1 / 2 accumulation steps
  EXPECT_EQ(a.data<float>()[0], 0.5f);
  EXPECT_EQ(a.data<float>()[1], -0.25f);
  EXPECT_EQ(b.data<float>()[0], 1.f);
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    Tensor c = Tensor::from_vector<float>({2}, {1.f, bad});
    EXPECT_TRUE(g.unscale({&a, &c}));
  }
  Tensor d = Tensor::from_vector<double>({1}, {1.0});
  expect_error<TypeError>([&] { g.unscale({&d}); }, "contiguous float32");
}

TEST(GradScaler, StateRoundTripsWithTorchKeysAndBadStateIsCorrupt) {
  GradScaler g({.init_scale = 16, .growth_interval = 5});
  g.update(true);
  g.update(false);
  const nlohmann::json s = g.state_dict();
  EXPECT_EQ(s, nlohmann::json({{"scale", 8.0},
                               {"growth_factor", 2.0},
                               {"backoff_factor", 0.5},
                               {"growth_interval", 5},
                               {"_growth_tracker", 1}}));
  GradScaler back;
  back.load_state_dict(s);
  EXPECT_EQ(back.scale(), 8.0);
  EXPECT_EQ(back.growth_tracker(), 1);
  EXPECT_EQ(back.options().growth_interval, 5);
  nlohmann::json bad = s;
  bad.erase("scale");
  expect_error<CorruptFile>([&] { back.load_state_dict(bad); }, "'scale' is missing");
  bad = s;
  bad["_growth_tracker"] = 7;
  expect_error<CorruptFile>([&] { back.load_state_dict(bad); }, "not in [0, growth_interval)");
  bad = s;
  bad["scale"] = -1;
  expect_error<CorruptFile>([&] { back.load_state_dict(bad); }, "init_scale must be finite and > 0");
  expect_error<InvalidArgument>([] { GradScaler({.growth_factor = 1.0}); }, "growth_factor must be > 1");
  expect_error<InvalidArgument>([] { GradScaler({.backoff_factor = 1.0}); }, "backoff_factor must be in (0, 1)");
  expect_error<InvalidArgument>([] { GradScaler({.growth_interval = 0}); }, "growth_interval must be >= 1");
}

// IPU-style fixed loss scaling: the scale stays whatever the updates find, and survives a
// state_dict round trip.
TEST(GradScaler, AFixedScaleNeverMoves) {
  GradScaler g({.init_scale = 128, .growth_interval = 1, .dynamic = false});
  g.update(false);
  g.update(true);
  g.update(false);
  EXPECT_EQ(g.scale(), 128.0);
  EXPECT_EQ(g.growth_tracker(), 0);
  g.load_state_dict(g.state_dict());
  g.update(true);
  EXPECT_EQ(g.scale(), 128.0);
}

// DeepSpeed's DynamicLossScaler: with hysteresis h, the scale backs off at the h-th overflow since
// it last grew (each overflow restarts the growth count), never below min_scale; growing restores
// the hysteresis; consecutive_hysteresis restores it at every finite step.
TEST(GradScaler, DeepSpeedHysteresisAndMinimumScale) {
  GradScaler g({.init_scale = 8, .growth_interval = 2, .hysteresis = 2, .min_scale = 2});
  g.update(true);  // the first overflow: held
  EXPECT_EQ(g.scale(), 8.0);
  g.update(true);  // the second: backs off, and every later one too until the scale grows
  EXPECT_EQ(g.scale(), 4.0);
  g.update(true);
  EXPECT_EQ(g.scale(), 2.0);
  g.update(true);  // min_scale
  EXPECT_EQ(g.scale(), 2.0);
  g.update(false);
  g.update(false);  // grows, and the hysteresis is back
  EXPECT_EQ(g.scale(), 4.0);
  g.update(true);
  EXPECT_EQ(g.scale(), 4.0);
  // The state round-trips with the hysteresis left: one more overflow backs off.
  GradScaler again({.hysteresis = 2});
  again.load_state_dict(g.state_dict());
  again.update(true);
  EXPECT_EQ(again.scale(), 2.0);
  nlohmann::json bad = g.state_dict();
  bad["_hysteresis_left"] = 3;
  expect_error<CorruptFile>([&] { again.load_state_dict(bad); }, "_hysteresis_left");

  GradScaler c({.init_scale = 8, .growth_interval = 100, .hysteresis = 2, .consecutive_hysteresis = true});
  c.update(true);
  c.update(false);  // restores the hysteresis
  c.update(true);
  EXPECT_EQ(c.scale(), 8.0);
  c.update(true);
  EXPECT_EQ(c.scale(), 4.0);
  expect_error<InvalidArgument>([] { GradScaler({.hysteresis = 0}); }, "hysteresis");
  expect_error<InvalidArgument>([] { GradScaler({.init_scale = 4, .min_scale = 8}); }, "min_scale");
}

}  // namespace
}  // namespace kiln::training
