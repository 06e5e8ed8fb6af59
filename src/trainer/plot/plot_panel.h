// One panel of `kiln plot`: a framed plot area with grid, ticks, tick labels, axis titles, the
// series as lines (and markers) and, unless the y title names the only series, a legend in the
// corner the data leaves most free.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "trainer/plot/plot_axes.h"
#include "trainer/plot/raster.h"

namespace kiln::trainer::plot {

struct Series {
  std::string label;
  Rgb colour;
  // (step, value); a NaN value breaks the line there (a skipped non-finite log value).
  std::vector<std::pair<double, double>> points;
  bool markers = false;
};

struct Panel {
  std::string y_title;
  std::vector<Series> series;
};

// The finite range of the panel's values, {NaN, NaN} when it has none.
std::pair<double, double> value_range(const Panel& p);

// Draws p into area, its x axis spanning the steps [x_min, x_max] (the same for every panel of a
// picture, so panels line up). font is the text scale (2 at 1200x800). p needs a finite value.
void draw_panel(Canvas& canvas, const Rect& area, const Panel& p, double x_min, double x_max, int font);

}  // namespace kiln::trainer::plot
