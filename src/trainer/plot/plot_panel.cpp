#include "trainer/plot/plot_panel.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::trainer::plot {

namespace {

constexpr Rgb kInk{40, 40, 40};
constexpr Rgb kGrid{225, 225, 225};
constexpr Rgb kPaper{255, 255, 255};

// Value -> pixel maps of a plot area (y grows downwards on the canvas).
struct Mapping {
  Rect area;
  Axis x, y;
  double px(double v) const { return area.x0 + (v - x.lo) / (x.hi - x.lo) * (area.width() - 1) + 0.5; }
  double py(double v) const { return area.y1 - 1 - (v - y.lo) / (y.hi - y.lo) * (area.height() - 1) + 0.5; }
};

int widest(const std::vector<std::string>& labels, int font) {
  int w = 0;
  for (const std::string& s : labels) w = std::max(w, text_width(s, font));
  return w;
}

void draw_axes(Canvas& c, const Mapping& m, const std::string& y_title, const Rect& area, int font) {
  const int tick = 3 * font, gap = 2 * font;
  for (size_t i = 0; i < m.y.ticks.size(); ++i) {
    const int y = static_cast<int>(std::floor(m.py(m.y.ticks[i])));
    c.fill_rect({m.area.x0, y, m.area.x1, y + 1}, kGrid);
    c.fill_rect({m.area.x0 - tick, y, m.area.x0, y + 1}, kInk);
    const std::string& label = m.y.labels[i];
    c.text(m.area.x0 - tick - gap - text_width(label, font), y - text_height(font) / 2, label, font, kInk);
  }
  for (size_t i = 0; i < m.x.ticks.size(); ++i) {
    const int x = static_cast<int>(std::floor(m.px(m.x.ticks[i])));
    c.fill_rect({x, m.area.y0, x + 1, m.area.y1}, kGrid);
    c.fill_rect({x, m.area.y1, x + 1, m.area.y1 + tick}, kInk);
    const std::string& label = m.x.labels[i];
    c.text(x - text_width(label, font) / 2, m.area.y1 + tick + gap, label, font, kInk);
  }
  c.outline_rect({m.area.x0 - 1, m.area.y0 - 1, m.area.x1 + 1, m.area.y1 + 1}, kInk);
  const std::string x_title = "step";
  c.text((m.area.x0 + m.area.x1 - text_width(x_title, font)) / 2, area.y1 - text_height(font) - 4 * font, x_title, font,
         kInk);
  c.text_up(area.x0 + font, (m.area.y0 + m.area.y1 + text_width(y_title, font)) / 2, y_title, font, kInk);
}

void draw_series(Canvas& c, const Mapping& m, const Series& s, int font) {
  const double width = std::max(2.0, 1.25 * font);  // 2 px at least, so every column has a full pixel
  c.set_clip(m.area);
  const std::pair<double, double>* prev = nullptr;
  for (const auto& p : s.points) {
    if (!std::isfinite(p.second)) {
      prev = nullptr;  // a gap where the log had NaN or inf
      continue;
    }
    if (prev) c.line(m.px(prev->first), m.py(prev->second), m.px(p.first), m.py(p.second), width, s.colour);
    prev = &p;
  }
  size_t finite = 0;
  for (const auto& p : s.points) finite += std::isfinite(p.second) ? 1 : 0;
  if (s.markers || finite == 1)  // a lone point would be invisible without a marker
    for (const auto& p : s.points)
      if (std::isfinite(p.second)) c.disc(m.px(p.first), m.py(p.second), 2.5 * font, s.colour);
  c.reset_clip();
}

// The legend box in the corner of the plot area holding the fewest data points.
void draw_legend(Canvas& c, const Mapping& m, const Panel& p, int font) {
  const int line_h = text_height(font) + 4 * font, swatch = 12 * font, pad = 3 * font;
  int text_w = 0;
  for (const Series& s : p.series) text_w = std::max(text_w, text_width(s.label, font));
  const int w = pad * 3 + swatch + text_w, h = pad * 2 + line_h * static_cast<int>(p.series.size()) - 2 * font;
  const int margin = 3 * font;
  const Rect corners[] = {
      {m.area.x1 - margin - w, m.area.y0 + margin, m.area.x1 - margin, m.area.y0 + margin + h},
      {m.area.x0 + margin, m.area.y0 + margin, m.area.x0 + margin + w, m.area.y0 + margin + h},
      {m.area.x1 - margin - w, m.area.y1 - margin - h, m.area.x1 - margin, m.area.y1 - margin},
      {m.area.x0 + margin, m.area.y1 - margin - h, m.area.x0 + margin + w, m.area.y1 - margin},
  };
  const Rect* best = &corners[0];
  size_t best_count = std::numeric_limits<size_t>::max();
  for (const Rect& r : corners) {
    size_t count = 0;
    for (const Series& s : p.series)
      for (const auto& pt : s.points) {
        if (!std::isfinite(pt.second)) continue;
        const double x = m.px(pt.first), y = m.py(pt.second);
        count += (x >= r.x0 - pad && x < r.x1 + pad && y >= r.y0 - pad && y < r.y1 + pad) ? 1 : 0;
      }
    if (count < best_count) best_count = count, best = &r;
  }
  c.fill_rect(*best, kPaper);
  c.outline_rect(*best, kInk);
  int y = best->y0 + pad;
  for (const Series& s : p.series) {
    const double mid = y + text_height(font) / 2.0;
    c.line(best->x0 + pad, mid, best->x0 + pad + swatch, mid, std::max(2.0, 1.25 * font), s.colour);
    if (s.markers) c.disc(best->x0 + pad + swatch / 2.0, mid, 2.5 * font, s.colour);
    c.text(best->x0 + 2 * pad + swatch, y, s.label, font, kInk);
    y += line_h;
  }
}

}  // namespace

std::pair<double, double> value_range(const Panel& p) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Series& s : p.series)
    for (const auto& pt : s.points)
      if (std::isfinite(pt.second)) lo = std::min(lo, pt.second), hi = std::max(hi, pt.second);
  if (lo > hi) return {std::nan(""), std::nan("")};
  return {lo, hi};
}

void draw_panel(Canvas& canvas, const Rect& area, const Panel& p, double x_min, double x_max, int font) {
  const auto [lo, hi] = value_range(p);
  // Below the plot area: tick (3), gap (2), labels (7), gap (3), title (7 + 2 descending), margin (2).
  const int below = 26 * font, above = 2 * font;
  const int plot_h = area.height() - below - above;
  Mapping m{{}, {}, make_axis(lo, hi, std::max(2, plot_h / (20 * font)), 0.05, false)};
  // Left of it: margin (1), upward title (9), gap (2), labels, gap (2), tick (3).
  const int left = 12 * font + widest(m.y.labels, font) + 5 * font;
  const int right = 4 * font + text_width("000000", font) / 2;  // room for the last x label's half
  m.area = {area.x0 + left, area.y0 + above, area.x1 - right, area.y1 - below};
  const int label_room = text_width("000000", font) + 8 * font;
  m.x = make_axis(x_min, x_max, std::max(2, m.area.width() / label_room), 0.02, true);
  canvas.fill_rect(m.area, kPaper);
  draw_axes(canvas, m, p.y_title, area, font);
  for (const Series& s : p.series) draw_series(canvas, m, s, font);
  // A legend unless the axis title already names the only series.
  if (p.series.size() > 1 || (p.series.size() == 1 && p.series[0].label != p.y_title)) draw_legend(canvas, m, p, font);
}

}  // namespace kiln::trainer::plot
