// What MaxRoiPool (max_roi_pool.cpp) and its gradient (max_roi_pool_grad.cpp) share: the node's
// settings and, for one output bin of one region, the window of input pixels it takes the maximum
// of, as Caffe's ROI pooling (Fast R-CNN), ONNX Runtime and torchvision.ops.roi_pool compute it: the
// region's corners scaled by spatial_scale and rounded half away from zero, its size (end - start + 1,
// at least 1) split into pooled_shape bins of fractional size, each bin's window floor(start) to
// ceil(end) offset by the region's corner and clamped to the input. An empty window gives 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::roi_pool {

struct Settings {
  int64_t out_h = 1, out_w = 1;
  float spatial_scale = 1.0f;
};

// Reads pooled_shape (required, two positive ints) and spatial_scale; InvalidModel naming `op`.
Settings read_settings(const Node& node, const char* op);

// Checks X [N, C, H, W] and rois [R, 5] of X's dtype; ShapeError / TypeError naming `op` otherwise.
void check_shapes(const char* op, const TensorMeta& x, const TensorMeta& rois);

// Region r = rois[r, 0:5]: its batch index into X's n images (truncated as the references cast it);
// InvalidModel outside [0, n), or when a corner times spatial_scale is not a finite pixel position
// (NaN, infinite, or beyond 1e15, which no image has and int64 could not hold).
int64_t check_region(const char* op, const double row[5], const Settings& s, int64_t r, int64_t n);

// check_region over every row of rois [r, 5]: the regions' batch indices.
template <class T>
std::vector<int64_t> check_regions(const char* op, const T* rois, int64_t r, const Settings& s, int64_t n) {
  std::vector<int64_t> batch(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    double row[5];
    for (int k = 0; k < 5; ++k) row[k] = to_double(rois[i * 5 + k]);
    batch[static_cast<size_t>(i)] = check_region(op, row, s, i, n);
  }
  return batch;
}

struct Window {
  int64_t h0 = 0, h1 = 0, w0 = 0, w1 = 0;  // rows [h0, h1), columns [w0, w1)
  bool empty() const { return h1 <= h0 || w1 <= w0; }
};

// The window of bin (ph, pw) of the region with corners (x1, y1, x2, y2) over an h x w plane, in
// precision A (float for float inputs, as the references compute it; double for double).
template <class A>
Window window(const Settings& s, const A corners[4], int64_t ph, int64_t pw, int64_t h, int64_t w) {
  const A scale = static_cast<A>(s.spatial_scale);
  const auto start_w = static_cast<int64_t>(std::round(corners[0] * scale));
  const auto start_h = static_cast<int64_t>(std::round(corners[1] * scale));
  const auto end_w = static_cast<int64_t>(std::round(corners[2] * scale));
  const auto end_h = static_cast<int64_t>(std::round(corners[3] * scale));
  const A bin_h = static_cast<A>(std::max<int64_t>(end_h - start_h + 1, 1)) / static_cast<A>(s.out_h);
  const A bin_w = static_cast<A>(std::max<int64_t>(end_w - start_w + 1, 1)) / static_cast<A>(s.out_w);
  const auto clamp = [](int64_t v, int64_t hi) { return std::min(std::max<int64_t>(v, 0), hi); };
  Window win;
  win.h0 = clamp(static_cast<int64_t>(std::floor(static_cast<A>(ph) * bin_h)) + start_h, h);
  win.h1 = clamp(static_cast<int64_t>(std::ceil(static_cast<A>(ph + 1) * bin_h)) + start_h, h);
  win.w0 = clamp(static_cast<int64_t>(std::floor(static_cast<A>(pw) * bin_w)) + start_w, w);
  win.w1 = clamp(static_cast<int64_t>(std::ceil(static_cast<A>(pw + 1) * bin_w)) + start_w, w);
  return win;
}

// The flat offset (y * w + x) of the window's maximum in an h x w plane, the first on ties; -1 for
// an empty window or one whose values are all NaN or below -max (the references' starting value).
template <class T>
int64_t argmax(const T* plane, const Window& win, int64_t w) {
  int64_t best = -1;
  double best_v = -static_cast<double>(std::numeric_limits<float>::max());
  for (int64_t y = win.h0; y < win.h1; ++y)
    for (int64_t x = win.w0; x < win.w1; ++x)
      if (const double v = to_double(plane[y * w + x]); v > best_v) {
        best_v = v;
        best = y * w + x;
      }
  return best;
}

}  // namespace kiln::roi_pool
