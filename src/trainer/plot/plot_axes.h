// Axis ranges, "nice" tick positions (1, 2 or 5 times a power of ten) and their labels for
// `kiln plot`, kept apart from drawing so they can be tested as plain numbers and strings.
#pragma once

#include <string>
#include <vector>

namespace kiln::trainer::plot {

struct Axis {
  double lo = 0, hi = 1;            // the drawn range
  double step = 1;                  // distance between ticks
  std::vector<double> ticks;        // multiples of step inside [lo, hi]
  std::vector<std::string> labels;  // one per tick
};

// An axis showing [data_min, data_max] widened by pad (a fraction of the span on both sides), with
// about max_ticks ticks at most. A zero span is widened to something visible. `integer` keeps the
// step at 1 or more (training steps). The data must be finite with data_min <= data_max;
// InvalidArgument when the range overflows (values near double's limit).
Axis make_axis(double data_min, double data_max, int max_ticks, double pad, bool integer);

// Labels for ticks spaced by step: fixed notation with as many decimals as the step needs
// ("0.25", "1.50"), scientific for tiny or huge magnitudes ("5e-5", "1.5e-4", "2e+6"); 0 is "0".
std::vector<std::string> tick_labels(const std::vector<double>& ticks, double step);

}  // namespace kiln::trainer::plot
