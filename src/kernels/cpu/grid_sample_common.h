// What GridSample (grid_sample.cpp) and its gradient (grid_sample_grad.cpp) share: the node's
// settings and, for one output point, the input taps it reads with their weights and the weights'
// derivatives along the grid's x and y. The arithmetic is torch.nn.functional.grid_sample's
// (ATen's GridSampler.h), which ONNX's cases come from: unnormalize with or without
// align_corners, border / reflection applied to the source coordinate for bilinear and nearest and
// to each tap for bicubic (A = -0.75), zeros for taps outside.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/graph.h"

namespace kiln::grid {

enum class Mode { Bilinear, Nearest, Bicubic };
enum class Padding { Zeros, Border, Reflection };

struct Settings {
  Mode mode = Mode::Bilinear;
  Padding padding = Padding::Zeros;
  bool align_corners = false;
};

// Reads mode, padding_mode and align_corners; InvalidModel naming `op` for unknown values.
Settings read_settings(const Node& node, const char* op);

// A coordinate in input pixels and its derivative with respect to the grid value it came from.
struct Coord {
  double v = 0, d = 0;
};

inline Coord unnormalize(double g, int64_t size, bool align) {
  return align ? Coord{(g + 1) / 2 * double(size - 1), double(size - 1) / 2}
               : Coord{((g + 1) * double(size) - 1) / 2, double(size) / 2};
}

inline Coord clip(Coord c, int64_t size) {
  if (c.v <= 0) return {0, 0};
  if (c.v >= double(size - 1)) return {double(size - 1), 0};
  return c;
}

// Reflects c into [low2 / 2, high2 / 2] (ATen's reflect_coordinates, with its gradient's sign).
inline Coord reflect(Coord c, double low2, double high2) {
  if (low2 == high2) return {0, 0};
  const double lo = low2 / 2, span = (high2 - low2) / 2;
  double sign = 1, v = c.v - lo;
  if (v < 0) {
    v = -v;
    sign = -1;
  }
  const double extra = std::fmod(v, span);
  const int64_t flips = static_cast<int64_t>(std::floor(v / span));
  if (flips % 2 == 0) return {extra + lo, c.d * sign};
  return {span - extra + lo, -c.d * sign};
}

inline Coord apply_padding(Coord c, int64_t size, const Settings& s) {
  if (s.padding == Padding::Border) return clip(c, size);
  if (s.padding == Padding::Reflection) {
    c = s.align_corners ? reflect(c, 0, 2.0 * double(size - 1)) : reflect(c, -1, 2.0 * double(size) - 1);
    return clip(c, size);
  }
  return c;
}

// One input pixel an output point reads: flat index y * W + x (-1: outside, reads zero), its
// weight and the weight's derivatives with respect to the grid's x and y values.
struct Tap {
  int64_t index = -1;
  double w = 0, dgx = 0, dgy = 0;
};

struct Taps {
  std::array<Tap, 16> taps;
  int count = 0;
};

// The taps of the output point at grid values (gx, gy) over an H x W input. A grid value that is
// NaN, infinite or beyond 1e9 (far outside any image: 1 is its edge) has no taps, so its output is
// 0 and it gets no gradient, whatever the padding (coordinates are cast to integers).
Taps taps_at(double gx, double gy, int64_t h, int64_t w, const Settings& s);

}  // namespace kiln::grid
