// What RoiAlign (roi_align.cpp) and its gradient (roi_align_grad.cpp) share: the node's settings
// and, for one output bin of one region, the bilinear samples it averages (or maximises) with their
// four taps, as ONNX Runtime's RoiAlign computes them (sampling grid of sampling_ratio or
// ceil(bin size) points per side, samples beyond one pixel outside the input read zero, the others
// clamped to the border).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::roi {

struct Settings {
  bool max_mode = false;
  int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
  double spatial_scale = 1.0;
  bool half_pixel = true;  // coordinate_transformation_mode; opsets 10-15 behave as "output_half_pixel"
};

Settings read_settings(const Node& node, int64_t opset, const char* op);

// Checks X [N, C, H, W], rois [R, 4] and batch_indices [R]; ShapeError naming `op` otherwise.
void check_shapes(const char* op, const TensorMeta& x, const TensorMeta& rois, const TensorMeta& batch_indices);

// Region r's batch index and corners (x1, y1, x2, y2): InvalidModel naming `op` and the region when
// the index is outside [0, n) or a corner times spatial_scale is not a finite pixel position (NaN,
// infinite, beyond 1e15: sample positions are cast to integers).
void check_region(const char* op, const Settings& s, int64_t batch_index, const double roi[4], int64_t r, int64_t n);

// One sample point: four flat plane offsets (y * W + x) and their weights (all zero outside).
struct Sample {
  std::array<int64_t, 4> index{};
  std::array<double, 4> w{};
};

// The samples of bin (ph, pw) of the region with corners roi[0..3] over an H x W plane.
std::vector<Sample> bin_samples(const Settings& s, const double* roi, int64_t ph, int64_t pw, int64_t h, int64_t w);

}  // namespace kiln::roi
