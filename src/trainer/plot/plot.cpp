// `kiln plot`: trainer_state.json -> panels (plot_panel.h) -> a grid on one canvas -> PNG.
#include "kiln/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/png.h"
#include "trainer/loop/checkpoint_folder.h"
#include "trainer/plot/plot_panel.h"

namespace kiln::trainer {

namespace fs = std::filesystem;
using plot::Panel;
using plot::Rgb;
using plot::Series;

namespace {

constexpr int kMinWidth = 400, kMinHeight = 300, kMaxSide = 16384;

Rgb palette(size_t i) {
  const auto& c = kPlotPalette[i % kPlotPalette.size()];
  return {c[0], c[1], c[2]};
}

// Eval keys that are timings or memory deltas, not quality metrics.
bool is_bookkeeping(const std::string& key) {
  auto ends_with = [&](std::string_view tail) {
    return key.size() >= tail.size() && key.compare(key.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends_with("_runtime") || ends_with("_per_second") || ends_with("_time") ||
         key.find("_mem_") != std::string::npos;
}

// A log value: a number, or NaN for null (how JSON writers store NaN and inf). Anything else is a
// corrupt log.
double value_of(const nlohmann::json& v, const std::string& source, size_t index, const std::string& key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return std::nan("");
  throw CorruptFile(fmt::format("{}: log_history[{}][\"{}\"] is {}, not a number", source, index, key, v.dump()));
}

// What log_history holds, as series by key in the order of the entries.
struct Collected {
  std::map<std::string, Series> by_key;
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
};

bool wanted(const std::string& key) {
  if (key == "loss" || key == "learning_rate" || key == "grad_norm") return true;
  return key.rfind("eval_", 0) == 0 && !is_bookkeeping(key);
}

Collected collect(const std::vector<nlohmann::json>& log_history, const std::string& source) {
  Collected c;
  for (size_t i = 0; i < log_history.size(); ++i) {
    const nlohmann::json& entry = log_history[i];
    if (!entry.is_object())
      throw CorruptFile(fmt::format("{}: log_history[{}] is {}, not an object", source, i, entry.dump()));
    bool any = false;
    for (const auto& [key, v] : entry.items()) any = any || wanted(key);
    if (!any) continue;  // the run summary, or a log of something else
    const auto step = entry.find("step");
    if (step == entry.end() || !step->is_number())
      throw CorruptFile(fmt::format("{}: log_history[{}] has values but no numeric \"step\"", source, i));
    const double x = step->get<double>();
    for (const auto& [key, v] : entry.items()) {
      if (!wanted(key)) continue;
      const double y = value_of(v, source, i, key);
      c.by_key[key].label = key;
      c.by_key[key].points.emplace_back(x, y);
      if (std::isfinite(y)) c.x_min = std::min(c.x_min, x), c.x_max = std::max(c.x_max, x);
    }
  }
  return c;
}

bool has_finite(const Series& s) {
  return std::any_of(s.points.begin(), s.points.end(), [](const auto& p) { return std::isfinite(p.second); });
}

// The panels in drawing order, with their colours (kPlotPalette's order).
std::vector<Panel> make_panels(Collected& c) {
  auto take = [&](const std::string& key, size_t colour, bool markers) -> std::optional<Series> {
    auto it = c.by_key.find(key);
    if (it == c.by_key.end() || !has_finite(it->second)) return std::nullopt;
    Series s = std::move(it->second);
    s.colour = palette(colour);
    s.markers = markers;
    c.by_key.erase(it);
    return s;
  };
  std::vector<Panel> panels;
  Panel loss{"loss", {}};
  if (auto s = take("loss", 0, false)) loss.series.push_back(std::move(*s));
  if (auto s = take("eval_loss", 1, true)) loss.series.push_back(std::move(*s));
  const auto lr = take("learning_rate", 2, false);
  const auto grad = take("grad_norm", 3, false);
  Panel metrics{"eval metric", {}};
  size_t colour = 4;
  for (auto& [key, s] : c.by_key)  // the remaining eval_<metric> keys, in name order
    if (has_finite(s)) metrics.series.push_back(Series{key, palette(colour++), std::move(s.points), true});
  if (loss.series.empty() && metrics.series.empty()) return {};
  if (!loss.series.empty()) panels.push_back(std::move(loss));
  if (lr) panels.push_back(Panel{"learning_rate", {*lr}});
  if (grad) panels.push_back(Panel{"grad_norm", {*grad}});
  if (metrics.series.size() == 1) metrics.y_title = metrics.series[0].label;
  if (!metrics.series.empty()) panels.push_back(std::move(metrics));
  return panels;
}

// Grid cells for n panels: one column for up to two, else two columns; with an odd count the
// first (the loss) spans the whole top row.
std::vector<plot::Rect> layout(size_t n, const plot::Rect& r) {
  const int cols = n >= 3 ? 2 : 1;
  const int rows = static_cast<int>((n + cols - 1) / static_cast<size_t>(cols));
  const bool span_first = cols == 2 && n % 2 == 1;
  std::vector<plot::Rect> cells;
  for (int row = 0; row < rows; ++row) {
    const int y0 = r.y0 + r.height() * row / rows, y1 = r.y0 + r.height() * (row + 1) / rows;
    const int in_row = (row == 0 && span_first) ? 1 : cols;
    for (int col = 0; col < in_row && cells.size() < n; ++col)
      cells.push_back({r.x0 + r.width() * col / in_row, y0, r.x0 + r.width() * (col + 1) / in_row, y1});
  }
  return cells;
}

std::string run_name(const fs::path& folder) {
  fs::path p = fs::absolute(folder).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// "out" for out/trainer_state.json, "out/checkpoint-60" for a checkpoint's state.
std::string default_title(const std::string& state_file) {
  const fs::path folder = fs::absolute(state_file).lexically_normal().parent_path();
  std::string name = folder.filename().string();
  if (name.rfind(kCheckpointPrefix, 0) == 0) return run_name(folder.parent_path()) + "/" + name;
  return name;
}

}  // namespace

std::string find_trainer_state(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st))
    throw IOError(fmt::format("'{}' does not exist: give a training output_dir or a {} file", path, kTrainerStateFile));
  if (!fs::is_directory(st)) return path;
  const fs::path direct = fs::path(path) / kTrainerStateFile;
  if (fs::is_regular_file(direct, ec)) return direct.string();
  if (const auto last = last_checkpoint(path)) return (fs::path(*last) / kTrainerStateFile).string();
  throw IOError(fmt::format("no {} in '{}': looked for {} and {}", kTrainerStateFile, path, direct.string(),
                            (fs::path(path) / (kCheckpointPrefix + "*") / kTrainerStateFile).string()));
}

std::vector<uint8_t> render_log_history(const std::vector<nlohmann::json>& log_history, const PlotOptions& options,
                                        const std::string& source) {
  if (options.width < kMinWidth || options.height < kMinHeight || options.width > kMaxSide || options.height > kMaxSide)
    throw InvalidArgument(fmt::format("plot size {}x{} is out of range: at least {}x{}, at most {} a side",
                                      options.width, options.height, kMinWidth, kMinHeight, kMaxSide));
  Collected c = collect(log_history, source);
  std::vector<Panel> panels = make_panels(c);
  if (panels.empty())
    throw InvalidArgument(
        fmt::format("{}: log_history has no loss or eval metrics to plot ({} entries)", source, log_history.size()));
  const int font = std::max(1, std::min(options.width / 600, options.height / 400));
  plot::Canvas canvas(options.width, options.height, {250, 250, 250});
  const int title_font = font + 1;
  const int title_h = plot::text_height(title_font) + 8 * font;
  if (!options.title.empty())
    canvas.text((options.width - plot::text_width(options.title, title_font)) / 2, 4 * font, options.title, title_font,
                {20, 20, 20});
  const int top = options.title.empty() ? 2 * font : title_h;
  const auto cells = layout(panels.size(), {2 * font, top, options.width - 2 * font, options.height - 2 * font});
  for (size_t i = 0; i < panels.size(); ++i) plot::draw_panel(canvas, cells[i], panels[i], c.x_min, c.x_max, font);
  return canvas.rgb();
}

void plot_run(const std::string& output_dir_or_state_file, const std::string& png_path, const PlotOptions& options) {
  const std::string file = find_trainer_state(output_dir_or_state_file);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IOError(fmt::format("cannot open '{}' for reading", file));
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw IOError(fmt::format("cannot read '{}'", file));
  nlohmann::json state;
  try {
    check_json_limits(text.str(), "'" + file + "'");
    state = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw CorruptFile(fmt::format("'{}' is not valid JSON: {}", file, e.what()));
  }
  const auto history = state.is_object() ? state.find("log_history") : state.end();
  if (!state.is_object() || history == state.end() || !history->is_array())
    throw CorruptFile(fmt::format("'{}' has no log_history list: is it a {}?", file, kTrainerStateFile));
  PlotOptions o = options;
  if (o.title.empty()) o.title = default_title(file);
  const std::vector<uint8_t> rgb = render_log_history(history->get<std::vector<nlohmann::json>>(), o, "'" + file + "'");
  write_png(png_path, o.width, o.height, rgb);
}

}  // namespace kiln::trainer
