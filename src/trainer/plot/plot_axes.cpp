#include "trainer/plot/plot_axes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kiln/error.h"

namespace kiln::trainer::plot {

namespace {

// How many multiples of step lie in [lo, hi].
int tick_count(double lo, double hi, double step) {
  return static_cast<int>(std::floor(hi / step + 1e-9) - std::ceil(lo / step - 1e-9)) + 1;
}

// The smallest step of 1, 2 or 5 times a power of ten that puts at most max_ticks ticks in [lo, hi]
// (Heckbert's nice numbers, counted on the actual range rather than estimated from the span).
double nice_step(double lo, double hi, int max_ticks) {
  double magnitude = std::pow(10.0, std::floor(std::log10((hi - lo) / max_ticks)));
  for (int decade = 0; decade < 3; ++decade, magnitude *= 10)  // found within two decades
    for (double nice : {1.0, 2.0, 5.0})
      if (tick_count(lo, hi, nice * magnitude) <= max_ticks) return nice * magnitude;
  return hi - lo;
}

int decimal_exponent(double v) { return static_cast<int>(std::floor(std::log10(std::fabs(v)) + 1e-9)); }

// "1.50e-4" -> "1.5e-4", "2.0e-5" -> "2e-5".
std::string trim_mantissa(std::string mantissa) {
  if (mantissa.find('.') == std::string::npos) return mantissa;
  while (mantissa.back() == '0') mantissa.pop_back();
  if (mantissa.back() == '.') mantissa.pop_back();
  return mantissa;
}

std::string scientific(double v, int decimals) {
  const int e = decimal_exponent(v);
  double mantissa = v / std::pow(10.0, e);
  std::string m = trim_mantissa(fmt::format("{:.{}f}", mantissa, std::max(0, decimals)));
  if (m == "10" || m == "-10") return scientific(v >= 0 ? std::pow(10.0, e + 1) : -std::pow(10.0, e + 1), 0);
  return fmt::format("{}e{}{}", m, e < 0 ? "-" : "+", std::abs(e));
}

}  // namespace

Axis make_axis(double data_min, double data_max, int max_ticks, double pad, bool integer) {
  Axis axis;
  double span = data_max - data_min;
  if (span <= 0) {  // one value: show it in the middle of a small range around it
    const double half = data_min != 0 ? std::fabs(data_min) * 0.1 : 1.0;
    axis.lo = data_min - (integer ? std::max(half, 1.0) : half);
    axis.hi = data_max + (integer ? std::max(half, 1.0) : half);
  } else {
    axis.lo = data_min - pad * span;
    axis.hi = data_max + pad * span;
  }
  span = axis.hi - axis.lo;
  if (!std::isfinite(span) || span <= 0)  // beyond double's range, or too close to it to subdivide
    throw InvalidArgument(fmt::format("cannot draw an axis for values from {} to {}", data_min, data_max));
  axis.step = nice_step(axis.lo, axis.hi, std::max(2, max_ticks));
  if (integer) axis.step = std::max(axis.step, 1.0);
  const double first = std::ceil(axis.lo / axis.step - 1e-9);
  const double last = std::floor(axis.hi / axis.step + 1e-9);
  for (double k = first; k <= last; ++k) {
    const double t = k * axis.step;  // k * step, not repeated addition: no drift across ticks
    axis.ticks.push_back(std::fabs(t) < axis.step * 1e-9 ? 0.0 : t);
  }
  axis.labels = tick_labels(axis.ticks, axis.step);
  return axis;
}

std::vector<std::string> tick_labels(const std::vector<double>& ticks, double step) {
  double largest = 0;
  for (double t : ticks) largest = std::max(largest, std::fabs(t));
  const bool sci = largest > 0 && (largest < 1e-3 || largest >= 1e6);
  const int step_exponent = decimal_exponent(step);
  std::vector<std::string> labels;
  for (double t : ticks) {
    if (t == 0) {
      labels.push_back("0");
    } else if (sci) {
      labels.push_back(scientific(t, decimal_exponent(t) - step_exponent));
    } else {
      labels.push_back(fmt::format("{:.{}f}", t, std::max(0, -step_exponent)));
    }
  }
  return labels;
}

}  // namespace kiln::trainer::plot
