// Resize (opsets 11-17; 18's antialias, axes and keep_aspect_ratio_policy are refused): nearest,
// linear and cubic interpolation over every dimension, with all of the spec's coordinate
// transformation modes. Each output coordinate of each dimension maps to a few input taps and
// weights, computed once per dimension and checked against ONNX's reference implementation:
//   - nearest moves bytes, so it serves every dtype;
//   - linear and cubic are separable: one pass per resized dimension, in double, for float types;
//   - ai.kiln.ResizeGrad, the gradient, runs the transposed passes (resize_grad.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/int_values.h"
#include "kernels/cpu/resize_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::resize {
namespace {

template <class E>
E parse_enum(const std::string& attr, const std::string& value, const std::vector<std::pair<const char*, E>>& table) {
  std::vector<std::string> names;
  for (const auto& [name, e] : table) {
    if (value == name) return e;
    names.push_back(name);
  }
  throw Unsupported(fmt::format("{} '{}' is not supported (valid: {})", attr, value, fmt::join(names, ", ")));
}

// The input coordinate of output coordinate x, as the spec defines it. `length` is the resized
// length as a real number: in * scale when scales are given (as ONNX's reference computes it, so
// that align_corners with a fractional scale matches), the output size when sizes are given.
double source_coordinate(double x, int64_t in, double scale, double length, Coord c, double roi_start, double roi_end) {
  switch (c) {
    case Coord::HalfPixel:
      return (x + 0.5) / scale - 0.5;
    case Coord::PytorchHalfPixel:
      return length > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
    case Coord::AlignCorners:
      return length == 1 ? 0.0 : x * static_cast<double>(in - 1) / (length - 1);
    case Coord::Asymmetric:
      return x / scale;
    case Coord::TfHalfPixelForNn:
      return (x + 0.5) / scale;
    case Coord::TfCropAndResize:
      if (length > 1)
        return x * (roi_end - roi_start) * static_cast<double>(in - 1) / (length - 1) +
               roi_start * static_cast<double>(in - 1);
      return 0.5 * (roi_start + roi_end) * static_cast<double>(in - 1);
  }
  return 0.0;
}

void cubic_weights(double r, double a, double* w) {
  const double s = r + 1, t = 1 - r, u = 2 - r;
  w[0] = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
  w[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
  w[2] = ((a + 2) * t - (a + 3)) * t * t + 1;
  w[3] = ((a * u - 5 * a) * u + 8 * a) * u - 4 * a;
}

}  // namespace

AxisMap map_axis(int64_t in, int64_t out, double scale, double length, const Attrs& at, double roi_start,
                 double roi_end) {
  AxisMap m;
  m.in = in;
  m.out = out;
  m.n = at.mode == Mode::Nearest ? 1 : at.mode == Mode::Linear ? 2 : 4;
  m.taps.assign(static_cast<size_t>(out * m.n), 0);
  m.weights.assign(static_cast<size_t>(out * m.n), 0.0);
  m.outside.assign(static_cast<size_t>(out), false);
  m.identity = in == out;
  for (int64_t o = 0; o < out; ++o) {
    const double x = source_coordinate(static_cast<double>(o), in, scale, length, at.coord, roi_start, roi_end);
    int64_t* taps = &m.taps[o * m.n];
    double* w = &m.weights[o * m.n];
    if (at.coord == Coord::TfCropAndResize && (x < 0 || x > static_cast<double>(in - 1))) {
      m.outside[o] = true;
      m.identity = false;
      w[0] = 1.0;  // any valid tap: the value is replaced by the extrapolation value
      continue;
    }
    double f = std::floor(x);
    double r = x - f;
    if (at.mode == Mode::Nearest) {
      int64_t i = static_cast<int64_t>(f);
      if (r != 0) {
        const bool up = at.rounding == Rounding::PreferFloor  ? r > 0.5
                        : at.rounding == Rounding::PreferCeil ? r >= 0.5
                                                              : at.rounding == Rounding::Ceil;
        i += up ? 1 : 0;
      }
      taps[0] = std::clamp<int64_t>(i, 0, in - 1);
      w[0] = 1.0;
    } else {
      // Like the reference: an integral x takes the taps left of it with ratio 1 (same value).
      if (r == 0) {
        f -= 1;
        r = 1;
      }
      const int64_t first = static_cast<int64_t>(f) - (m.n == 4 ? 1 : 0);
      if (m.n == 2) {
        w[0] = 1 - r;
        w[1] = r;
      } else {
        cubic_weights(r, at.cubic_a, w);
      }
      double sum = 0;
      for (int64_t t = 0; t < m.n; ++t) {
        const int64_t i = first + t;
        if (at.exclude_outside && (i < 0 || i >= in)) w[t] = 0;
        sum += w[t];
        taps[t] = std::clamp<int64_t>(i, 0, in - 1);  // the reference pads with edge values
      }
      if (at.exclude_outside && sum != 0)
        for (int64_t t = 0; t < m.n; ++t) w[t] /= sum;
    }
    for (int64_t t = 0; t < m.n; ++t)
      if (w[t] != 0 && !(taps[t] == o && w[t] == 1.0)) m.identity = false;
  }
  return m;
}

Shape ResizeBase::geometry(const InferContext& ctx, const Shape& in, DType dtype, size_t first) {
  read_attrs(ctx.opset);
  const size_t rank = in.size();
  const bool has_scales = ctx.has_input(first + 1) && numel(ctx.shape(first + 1)) > 0;
  const bool has_sizes = ctx.has_input(first + 2) && numel(ctx.shape(first + 2)) > 0;
  if (has_scales == has_sizes)
    throw InvalidModel(fmt::format("exactly one of scales and sizes must be given (non-empty); got {}",
                                   has_scales ? "both" : "neither"));
  if (attrs_.mode != Mode::Nearest && !is_floating(dtype))
    throw Unsupported(
        fmt::format("{} interpolation of {} input {} is not supported (float types only; nearest "
                    "serves every dtype)",
                    node_.attr_string("mode", "nearest"), dtype_name(dtype), to_string(in)));
  Shape out(rank);
  scales_.assign(rank, 1.0);
  lengths_.assign(rank, 0.0);
  if (has_scales) {
    const Tensor& s = ctx.value(first + 1);
    if (!is_floating(s.dtype()) || s.numel() != static_cast<int64_t>(rank))
      throw ShapeError(
          fmt::format("scales {} must be float with one entry per dimension of input {}", s.describe(), to_string(in)));
    for (size_t d = 0; d < rank; ++d) {
      // float32 scales widen to double, as in the reference.
      scales_[d] = static_cast<double>(static_cast<float>(s.contiguous().item_as_double(static_cast<int64_t>(d))));
      if (!(scales_[d] > 0)) throw InvalidArgument(fmt::format("scales {} must all be positive", to_string_doubles(s)));
      lengths_[d] = scales_[d] * static_cast<double>(in[d]);
      out[d] = static_cast<int64_t>(std::floor(lengths_[d]));
    }
  } else {
    const Tensor& s = ctx.value(first + 2);
    if (s.dtype() != DType::Int64 || s.numel() != static_cast<int64_t>(rank))
      throw ShapeError(
          fmt::format("sizes {} must be int64 with one entry per dimension of input {}", s.describe(), to_string(in)));
    const std::vector<int64_t> sizes = s.to_int64_vector();
    for (size_t d = 0; d < rank; ++d) {
      if (sizes[d] <= 0) throw InvalidArgument(fmt::format("sizes {} must all be positive", to_string(sizes)));
      if (in[d] == 0)
        throw ShapeError(fmt::format("cannot resize the empty dimension {} of input {}", d, to_string(in)));
      out[d] = sizes[d];
      scales_[d] = static_cast<double>(sizes[d]) / static_cast<double>(in[d]);
      lengths_[d] = static_cast<double>(sizes[d]);
    }
  }
  if (attrs_.coord == Coord::TfCropAndResize) {
    if (!ctx.has_input(first) || numel(ctx.shape(first)) != static_cast<int64_t>(2 * rank))
      throw ShapeError(
          fmt::format("tf_crop_and_resize needs roi with 2 * {} entries for input {}", rank, to_string(in)));
  }
  for (size_t d = 0; d < rank; ++d)
    if (in[d] == 0 && out[d] > 0)
      throw ShapeError(fmt::format("cannot resize the empty dimension {} of input {} to {}", d, to_string(in), out[d]));
  return out;
}

std::vector<AxisMap> ResizeBase::axis_maps(const ComputeContext& ctx, size_t roi_input, const Shape& is,
                                           const Shape& os) const {
  std::vector<double> roi;
  if (attrs_.coord == Coord::TfCropAndResize) {
    const Tensor r = ctx.input(roi_input).contiguous();
    for (int64_t i = 0; i < r.numel(); ++i) roi.push_back(r.item_as_double(i));
  }
  std::vector<AxisMap> maps;
  for (size_t d = 0; d < is.size(); ++d) {
    const double start = roi.empty() ? 0.0 : roi[d], end = roi.empty() ? 1.0 : roi[d + is.size()];
    maps.push_back(map_axis(is[d], os[d], scales_[d], lengths_[d], attrs_, start, end));
  }
  return maps;
}

std::string ResizeBase::to_string_doubles(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.item_as_double(i));
  return fmt::format("[{}]", fmt::join(v, ", "));
}

void ResizeBase::read_attrs(int64_t opset) {
  if (node_.attr_int("antialias", 0) != 0 || node_.has_attr("axes") ||
      node_.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    throw Unsupported("Resize's antialias, axes and keep_aspect_ratio_policy (opset 18) are not supported");
  attrs_.mode = parse_enum<Mode>("mode", node_.attr_string("mode", "nearest"),
                                 {{"nearest", Mode::Nearest}, {"linear", Mode::Linear}, {"cubic", Mode::Cubic}});
  attrs_.coord = parse_enum<Coord>("coordinate_transformation_mode",
                                   node_.attr_string("coordinate_transformation_mode", "half_pixel"),
                                   {{"half_pixel", Coord::HalfPixel},
                                    {"pytorch_half_pixel", Coord::PytorchHalfPixel},
                                    {"align_corners", Coord::AlignCorners},
                                    {"asymmetric", Coord::Asymmetric},
                                    {"tf_half_pixel_for_nn", Coord::TfHalfPixelForNn},
                                    {"tf_crop_and_resize", Coord::TfCropAndResize}});
  if (opset >= 18 && attrs_.coord == Coord::TfHalfPixelForNn)
    throw InvalidModel("coordinate_transformation_mode 'tf_half_pixel_for_nn' was removed in opset 18");
  attrs_.rounding = parse_enum<Rounding>("nearest_mode", node_.attr_string("nearest_mode", "round_prefer_floor"),
                                         {{"round_prefer_floor", Rounding::PreferFloor},
                                          {"round_prefer_ceil", Rounding::PreferCeil},
                                          {"floor", Rounding::Floor},
                                          {"ceil", Rounding::Ceil}});
  attrs_.cubic_a = node_.attr_float("cubic_coeff_a", -0.75f);
  attrs_.exclude_outside = node_.attr_int("exclude_outside", 0) != 0;
  attrs_.extrapolation = node_.attr_float("extrapolation_value", 0.0f);
}

}  // namespace kiln::resize

namespace kiln {
namespace {

using resize::AxisMap;
using resize::Coord;
using resize::Mode;
using resize::ResizeBase;
using resize::Rounding;

class ResizeKernel : public ResizeBase {
 public:
  using ResizeBase::ResizeBase;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape out = geometry(ctx, ctx.shape(0), ctx.dtype(0), 1);
    return {{ctx.dtype(0), out, ctx.input(0).dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    const Shape& is = x.shape();
    const Shape& os = y.shape();
    const std::vector<AxisMap> maps = axis_maps(ctx, 1, is, os);
    if (attrs_.mode == Mode::Nearest) nearest(x, y, maps);
    else interpolate(x, y, maps);
  }

 private:
  // Nearest: a byte gather; rows over all dims but the last, then a column gather.
  void nearest(const Tensor& x, Tensor& y, const std::vector<AxisMap>& maps) const {
    const size_t esize = dtype_size(x.dtype());
    Tensor fill = Tensor::empty(x.dtype(), {});
    visit_dtype(x.dtype(),
                [&](auto tag) { *fill.data<decltype(tag)>() = from_double<decltype(tag)>(attrs_.extrapolation); });
    const Shape& os = y.shape();
    const Strides st = contiguous_strides(x.shape());
    const size_t r = os.size();
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y.raw_data());
    if (r == 0) {
      std::memcpy(dst, src, esize);
      return;
    }
    const int64_t cols = os[r - 1];
    const int64_t rows = y.numel() / cols;
    const AxisMap& last = maps[r - 1];
    parallel_for(rows, std::max<int64_t>(1, 4096 / cols), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        char* o = dst + row * cols * static_cast<int64_t>(esize);
        int64_t off = 0;
        bool outside = false;
        for (int64_t rem = row, d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
          const int64_t c = rem % os[d];
          rem /= os[d];
          outside = outside || maps[d].outside[c];
          off += maps[d].taps[c] * st[d];
        }
        for (int64_t c = 0; c < cols; ++c) {
          const char* from = outside || last.outside[c] ? static_cast<const char*>(fill.raw_data())
                                                        : src + (off + last.taps[c]) * static_cast<int64_t>(esize);
          std::memcpy(o + c * static_cast<int64_t>(esize), from, esize);
        }
      }
    });
  }

  // Linear and cubic: separable passes over the dimensions that change, in double.
  void interpolate(const Tensor& x, Tensor& y, const std::vector<AxisMap>& maps) const {
    Shape cur = x.shape();
    std::vector<double> buf(static_cast<size_t>(x.numel()));
    visit_dtype(x.dtype(), [&](auto tag) {
      const auto* p = static_cast<const decltype(tag)*>(x.raw_data());
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = to_double(p[i]);
    });
    for (size_t d = 0; d < cur.size(); ++d) {
      const AxisMap& m = maps[d];
      if (m.identity) continue;
      const int64_t outer = numel(Shape(cur.begin(), cur.begin() + static_cast<int64_t>(d)));
      const int64_t inner = numel(Shape(cur.begin() + static_cast<int64_t>(d) + 1, cur.end()));
      std::vector<double> next(static_cast<size_t>(outer * m.out * inner), 0.0);
      parallel_for(outer * m.out, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t o = k / m.out, c = k % m.out;
          double* dst = &next[static_cast<size_t>(k * inner)];
          for (int64_t t = 0; t < m.n; ++t) {
            const double w = m.weights[c * m.n + t];
            if (w == 0) continue;
            const double* src = &buf[static_cast<size_t>((o * m.in + m.taps[c * m.n + t]) * inner)];
            for (int64_t i = 0; i < inner; ++i) dst[i] += w * src[i];
          }
        }
      });
      buf.swap(next);
      cur[d] = m.out;
    }
    const Shape& os = y.shape();
    const bool crop = attrs_.coord == Coord::TfCropAndResize;
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = static_cast<T*>(y.raw_data());
      if (!crop) {
        for (size_t i = 0; i < buf.size(); ++i) p[i] = from_double<T>(buf[i]);
        return;
      }
      Shape pos(os.size(), 0);
      for (size_t i = 0; i < buf.size(); ++i) {
        bool outside = false;
        for (size_t d = 0; d < os.size(); ++d) outside = outside || maps[d].outside[pos[d]];
        p[i] = from_double<T>(outside ? attrs_.extrapolation : buf[i]);
        for (size_t d = os.size(); d-- > 0;) {
          if (++pos[d] < os[d]) break;
          pos[d] = 0;
        }
      }
    });
  }
};

const KernelRegistrar reg_resize({"", "Resize", 11, kMaxOpset, {}},
                                 [](const Node& n) { return std::make_unique<ResizeKernel>(n); });

}  // namespace
}  // namespace kiln
