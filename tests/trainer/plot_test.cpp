// kiln plot: tick positions and labels, the bitmap font, facts of the rendered picture (where each
// series' colour lies, gaps for NaN), finding trainer_state.json, errors, and the written PNG.
#include "kiln/plot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/png_reader.h"
#include "kiln/error.h"
#include "test_util.h"
#include "trainer/plot/plot_axes.h"
#include "trainer/plot/plot_font.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using kiln::test::expect_error;
using kiln::test::has;
using kiln::test::TempDir;
using nlohmann::json;

using Labels = std::vector<std::string>;

TEST(PlotAxes, TicksAreRoundNumbersInsideThePaddedRange) {
  const plot::Axis a = plot::make_axis(0.5, 2.0, 8, 0.05, false);  // shown range 0.425 .. 2.075
  EXPECT_DOUBLE_EQ(a.lo, 0.425);
  EXPECT_DOUBLE_EQ(a.hi, 2.075);
  EXPECT_DOUBLE_EQ(a.step, 0.2);  // 0.6 .. 2.0: 8 ticks; 0.1 would give 16
  EXPECT_EQ(a.labels, (Labels{"0.6", "0.8", "1.0", "1.2", "1.4", "1.6", "1.8", "2.0"}));
  const plot::Axis steps = plot::make_axis(5, 100, 6, 0.0, true);
  EXPECT_EQ(steps.labels, (Labels{"20", "40", "60", "80", "100"}));
  // Training steps never get fractional ticks, even over a span of 3.
  EXPECT_EQ(plot::make_axis(1, 4, 10, 0.0, true).labels, (Labels{"1", "2", "3", "4"}));
}

TEST(PlotAxes, SmallLearningRatesUseScientificLabels) {
  EXPECT_EQ(plot::make_axis(0, 5e-5, 6, 0.0, false).labels, (Labels{"0", "1e-5", "2e-5", "3e-5", "4e-5", "5e-5"}));
  EXPECT_EQ(plot::tick_labels({1e-4, 1.5e-4, 2e-4}, 5e-5), (Labels{"1e-4", "1.5e-4", "2e-4"}));
  EXPECT_EQ(plot::tick_labels({-2e-4, 0, 2e-4}, 2e-4), (Labels{"-2e-4", "0", "2e-4"}));
  EXPECT_EQ(plot::tick_labels({0, 2e6, 4e6}, 2e6), (Labels{"0", "2e+6", "4e+6"}));
  EXPECT_EQ(plot::tick_labels({0.001, 0.002}, 0.001), (Labels{"0.001", "0.002"}));
}

TEST(PlotAxes, OneValueGetsAVisibleRange) {
  const plot::Axis a = plot::make_axis(0.7, 0.7, 5, 0.05, false);
  EXPECT_LT(a.lo, 0.7);
  EXPECT_GT(a.hi, 0.7);
  EXPECT_GE(a.ticks.size(), 2u);
  expect_error<InvalidArgument>([] { plot::make_axis(-1e308, 1e308, 5, 0.05, false); }, "-1e+308");
  const plot::Axis s = plot::make_axis(10, 10, 5, 0.02, true);
  EXPECT_EQ(s.labels, (Labels{"9", "10", "11"}));
}

TEST(PlotFont, GlyphsAreTheDrawnPictures) {
  // 'A' = .###. / #...# / #...# / ##### / #...# / #...# / #...#, nothing below the baseline.
  EXPECT_EQ(plot::glyph('A'), (plot::Glyph{0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0, 0}));
  EXPECT_EQ(plot::glyph('g')[8], 0x0E) << "g descends";
  EXPECT_EQ(plot::glyph(' '), plot::Glyph{});
  // A character without a glyph is an outlined box, not blank.
  EXPECT_EQ(plot::glyph('~'), (plot::Glyph{0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F, 0, 0}));
  for (char c : std::string("0123456789.-_+e%:/()abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    EXPECT_NE(plot::glyph(c), plot::glyph('~')) << "no glyph for '" << c << "'";
}

// ---- the picture ----

using Pixels = std::vector<uint8_t>;

bool is(const Pixels& rgb, int w, int x, int y, size_t colour) {
  const size_t i = (static_cast<size_t>(y) * w + x) * 3;
  return rgb[i] == kPlotPalette[colour][0] && rgb[i + 1] == kPlotPalette[colour][1] &&
         rgb[i + 2] == kPlotPalette[colour][2];
}

// For each column holding the colour, the median row of its pixels.
std::map<int, double> median_rows(const Pixels& rgb, int w, int h, size_t colour) {
  std::map<int, double> out;
  for (int x = 0; x < w; ++x) {
    std::vector<int> rows;
    for (int y = 0; y < h; ++y)
      if (is(rgb, w, x, y, colour)) rows.push_back(y);
    if (!rows.empty()) out[x] = rows[rows.size() / 2];
  }
  return out;
}

std::vector<json> linear_run(int steps) {
  std::vector<json> h;
  for (int s = 5; s <= steps; s += 5) {
    h.push_back({{"loss", 2.0 - 1.5 * (s - 5) / (steps - 5)},
                 {"learning_rate", 1e-4 * (1 - double(s) / steps)},
                 {"epoch", s / 50.0},
                 {"step", s}});
    if (s % 20 == 0)
      h.push_back({{"eval_loss", 2.2 - 1.5 * s / steps},
                   {"eval_accuracy", 0.5 + 0.4 * s / steps},
                   {"eval_runtime", 1.5},
                   {"epoch", s / 50.0},
                   {"step", s}});
  }
  h.push_back({{"train_loss", 1.2}, {"train_runtime", 10.0}, {"epoch", 2.0}, {"step", steps}});
  return h;
}

TEST(PlotRender, AFallingLossIsAStraightFallingLineInTheTopPanel) {
  const PlotOptions o{1200, 800, "test"};
  const Pixels rgb = render_log_history(linear_run(100), o);
  ASSERT_EQ(rgb.size(), 1200u * 800 * 3);
  const auto loss = median_rows(rgb, 1200, 800, 0);
  ASSERT_GT(loss.size(), 400u) << "the loss spans the full-width top panel";
  // A least-squares line through the medians, fitted again without the columns more than 5 pixels
  // off (the legend's swatch has the same colour); a straight line then fits them within 1.5 pixels.
  double slope = 0, icept = 0;
  for (int pass = 0; pass < 2; ++pass) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
    for (const auto& [x, y] : loss) {
      if (pass == 1 && std::fabs(y - (slope * x + icept)) > 5) continue;
      sx += x, sy += y, sxx += double(x) * x, sxy += x * y, n += 1;
    }
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), icept = (sy - slope * sx) / n;
  }
  // 2.0 -> 0.5 over about 1100 columns and a panel about 290 rows high (loss range 1.5 + 10%).
  EXPECT_GT(slope, 0.2) << "rows grow downwards: a falling loss has a positive slope";
  EXPECT_LT(slope, 0.3);
  size_t off = 0;
  for (const auto& [x, y] : loss) off += std::fabs(y - (slope * x + icept)) > 1.5 ? 1 : 0;
  EXPECT_LT(off, loss.size() / 20);
  for (const auto& [x, y] : loss) EXPECT_LT(y, 400) << "column " << x << ": the loss panel is the top half";
  // eval_loss (markers), learning_rate and eval_accuracy each appear, the last two in the bottom half.
  EXPECT_FALSE(median_rows(rgb, 1200, 800, 1).empty());
  for (size_t colour : {2u, 4u})
    for (const auto& [x, y] : median_rows(rgb, 1200, 800, colour)) EXPECT_GT(y, 400) << "colour " << colour;
}

TEST(PlotRender, TwoPanelsShareTheHeight) {
  // Evaluations only: eval_loss in the loss panel above, eval_accuracy (rising to its maximum at
  // the last step) below, each half the height, so the accuracy's lowest point is near the bottom.
  std::vector<json> h;
  for (int s = 0; s <= 90; s += 10)
    h.push_back({{"eval_loss", 1.0 / (s + 1)}, {"eval_accuracy", 0.5 + s / 200.0}, {"step", s}});
  const Pixels rgb = render_log_history(h, {800, 600, ""});
  const auto accuracy = median_rows(rgb, 800, 600, 4);
  ASSERT_FALSE(accuracy.empty());
  double lowest = 0;
  for (const auto& [x, y] : accuracy) lowest = std::max(lowest, y);
  EXPECT_GT(lowest, 0.8 * 600);
  for (const auto& [x, y] : median_rows(rgb, 800, 600, 1)) EXPECT_LT(y, 300) << "eval_loss in the top half";
}

TEST(PlotRender, NonFiniteValuesLeaveAGap) {
  std::vector<json> h;
  for (int s = 0; s <= 100; s += 10) h.push_back({{"loss", s == 50 ? json(nullptr) : json(1.0)}, {"step", s}});
  const Pixels rgb = render_log_history(h, {800, 400, ""});
  const auto loss = median_rows(rgb, 800, 400, 0);
  ASSERT_FALSE(loss.empty());
  // Steps 0..100 span the loss columns (less the round caps); the line breaks from 40 to 60.
  const double c0 = loss.begin()->first, c1 = loss.rbegin()->first;
  auto column = [&](double step) { return static_cast<int>(c0 + (c1 - c0) * step / 100); };
  for (int x = column(43); x <= column(57); ++x) EXPECT_FALSE(loss.count(x)) << "column " << x << " is in the gap";
  EXPECT_TRUE(loss.count(column(35)) && loss.count(column(65)));
}

TEST(PlotRender, NothingToPlotAndBadEntriesAreNamed) {
  expect_error<InvalidArgument>([] { render_log_history({}, {}, "run/x.json"); },
                                "run/x.json: log_history has no loss or eval metrics");
  const std::vector<json> nan_only{{{"loss", nullptr}, {"step", 1}}, {{"train_loss", 0.3}, {"step", 1}}};
  expect_error<InvalidArgument>([&] { render_log_history(nan_only, {}); }, "no loss or eval metrics");
  expect_error<CorruptFile>([] { render_log_history({json(3)}, {}); }, "log_history[0] is 3");
  expect_error<CorruptFile>(
      [] {
        render_log_history({{{"loss", "low"}, {"step", 1}}}, {});
      },
      "log_history[0][\"loss\"] is \"low\"");
  expect_error<CorruptFile>([] { render_log_history({{{"loss", 1.0}}}, {}); }, "no numeric \"step\"");
  expect_error<InvalidArgument>([] { render_log_history(linear_run(20), {100, 800, ""}); }, "100x800");
}

// ---- files ----

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string state_with(const std::vector<json>& history) { return json{{"log_history", history}}.dump(); }

TEST(PlotRun, FindsTheStateOfTheRunOrOfItsNewestCheckpoint) {
  TempDir t;
  const fs::path run = t / "run";
  expect_error<IOError>([&] { find_trainer_state((t / "nothing").string()); },
                        {(t / "nothing").string(), "does not exist"});
  fs::create_directories(run);
  expect_error<IOError>([&] { find_trainer_state(run.string()); }, "checkpoint-*");
  write_text(run / "checkpoint-9" / "trainer_state.json", state_with(linear_run(20)));
  write_text(run / "checkpoint-20" / "trainer_state.json", state_with(linear_run(20)));
  EXPECT_EQ(find_trainer_state(run.string()), (run / "checkpoint-20" / "trainer_state.json").string());
  write_text(run / "trainer_state.json", state_with(linear_run(20)));
  EXPECT_EQ(find_trainer_state(run.string()), (run / "trainer_state.json").string());
  const std::string file = (run / "checkpoint-9" / "trainer_state.json").string();
  EXPECT_EQ(find_trainer_state(file), file);
}

TEST(PlotRun, WritesADecodablePngOfTheRequestedSize) {
  TempDir t;
  write_text(t / "run" / "trainer_state.json", state_with(linear_run(100)));
  const fs::path png_path = t / "curves.png";
  plot_run((t / "run").string(), png_path.string(), {640, 480, ""});
  std::ifstream in(png_path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const auto png = kiln::testing::decode_png(bytes.str());
  EXPECT_EQ(png.width, 640);
  EXPECT_EQ(png.height, 480);
  EXPECT_EQ(png.rgb, render_log_history(linear_run(100), {640, 480, "run"})) << "the default title is the folder name";
}

TEST(PlotRun, CorruptOrUnwritableFilesAreNamed) {
  TempDir t;
  const fs::path bad = t / "bad" / "trainer_state.json";
  write_text(bad, "{\"log_history\": [");
  expect_error<CorruptFile>([&] { plot_run(bad.parent_path().string(), (t / "a.png").string()); },
                            bad.string() + "' is not valid JSON");
  const fs::path other = t / "other" / "trainer_state.json";
  write_text(other, "{\"global_step\": 3}");
  expect_error<CorruptFile>([&] { plot_run(other.string(), (t / "a.png").string()); },
                            other.string() + "' has no log_history");
  const fs::path good = t / "good" / "trainer_state.json";
  write_text(good, state_with(linear_run(40)));
  const std::string unwritable = (t / "missing_folder" / "a.png").string();
  expect_error<IOError>([&] { plot_run(good.string(), unwritable); }, unwritable);
  EXPECT_FALSE(fs::exists(t / "a.png"));
}

}  // namespace
}  // namespace kiln::trainer
