// What the linear quantization kernels share (quantize.cpp, quantize_conv.cpp): 8-bit types, the
// rounding and saturation ONNX defines (round half to even, clamp to the type's range), and scale /
// zero-point parameters that are per tensor (scalars) or per slice along one axis (1-D).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::quant {

// Calls f(Q{}) for a uint8 or int8 `dt`; TypeError naming `what` otherwise.
template <class F>
void visit_8bit(DType dt, const std::string& what, F&& f) {
  if (dt == DType::Uint8) f(uint8_t{});
  else if (dt == DType::Int8) f(int8_t{});
  else throw TypeError(fmt::format("{} is {}; Kiln quantizes to uint8 and int8", what, dtype_name(dt)));
}

// saturate(round_half_to_even(v)) into Q.
template <class Q>
Q saturate(float v) {
  const float r = std::nearbyint(v);
  const float lo = float(std::numeric_limits<Q>::min()), hi = float(std::numeric_limits<Q>::max());
  return static_cast<Q>(r < lo ? lo : r > hi ? hi : r);
}

// A scale or zero point read as doubles: one value, or one per slice of `axis` of the data.
struct PerAxis {
  std::vector<double> values;
  int64_t inner = 1;  // elements per step of the axis (product of the dims after it)
  int64_t dim = 1;    // size of the axis (1 when per tensor)
  double at(int64_t flat) const { return values.size() == 1 ? values[0] : values[size_t((flat / inner) % dim)]; }
};

// Reads `t` (scalar or 1-element: per tensor; 1-D of shape[axis]: per axis) against data of `shape`.
// `what` names it in the ShapeError.
PerAxis per_axis(const Tensor& t, const Shape& shape, int64_t axis, const std::string& what);

// A quantization axis, negative counting from the end; InvalidModel when outside the rank.
int64_t normalize_axis(int64_t axis, size_t rank, const char* op);

}  // namespace kiln::quant
