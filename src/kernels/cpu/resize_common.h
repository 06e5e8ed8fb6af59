// What Resize and its gradient (resize.cpp, resize_grad.cpp) share: the attributes, the per-axis
// maps from output coordinates to input taps and weights, and the output geometry from the input
// shape and the roi / scales / sizes inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::resize {

enum class Mode { Nearest, Linear, Cubic };
enum class Coord { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn, TfCropAndResize };
enum class Rounding { PreferFloor, PreferCeil, Floor, Ceil };

struct Attrs {
  Mode mode = Mode::Nearest;
  Coord coord = Coord::HalfPixel;
  Rounding rounding = Rounding::PreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};

// One dimension's mapping: for output coordinate o, taps[o * n .. o * n + n) with their weights
// (unused taps have weight 0), and whether o lies outside the crop (tf_crop_and_resize).
struct AxisMap {
  int64_t in = 0, out = 0;
  int64_t n = 1;  // taps per output coordinate
  std::vector<int64_t> taps;
  std::vector<double> weights;
  std::vector<bool> outside;
  bool identity = false;
};

// The map of one axis of `in` elements resized to `out`; `scale` and `length` as geometry()
// computed them, roi_start / roi_end the axis's roi (tf_crop_and_resize; else 0 and 1).
AxisMap map_axis(int64_t in, int64_t out, double scale, double length, const Attrs& at, double roi_start,
                 double roi_end);

// What the forward and its gradient share: the attributes and, from the input shape and the
// roi/scales/sizes inputs (at `first`, first + 1, first + 2), the output shape and per-axis scales.
class ResizeBase : public Kernel {
 public:
  using Kernel::Kernel;

 protected:
  Shape geometry(const InferContext& ctx, const Shape& in, DType dtype, size_t first);
  // The per-axis maps from input shape `is` to output shape `os`; roi is read from `roi_input`.
  std::vector<AxisMap> axis_maps(const ComputeContext& ctx, size_t roi_input, const Shape& is, const Shape& os) const;
  static std::string to_string_doubles(const Tensor& t);
  void read_attrs(int64_t opset);

  Attrs attrs_;
  std::vector<double> scales_, lengths_;
};

}  // namespace kiln::resize
