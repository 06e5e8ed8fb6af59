// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d: torch's arguments and checks, exported as ONNX
// MaxPool, AveragePool and GlobalAveragePool.
#include <fmt/format.h>

#include "kiln/nn/layers.h"
#include "models/nn/layer_util.h"

namespace kiln::nn {

using detail::shape_text;

namespace {

void check_pool_window(const std::string& module, const ExpandingArray<2>& kernel, const ExpandingArray<2>& stride,
                       const ExpandingArray<2>& padding, const ExpandingArray<2>& dilation) {
  for (size_t i = 0; i < 2; ++i) {
    if (kernel[i] <= 0)
      throw InvalidArgument(
          fmt::format("{}: kernel_size must be greater than zero, but got {}", module, kernel.repr(true)));
    if (stride[i] <= 0)
      throw InvalidArgument(
          fmt::format("{}: stride should be greater than zero, but got {}", module, stride.repr(true)));
    if (dilation[i] <= 0)
      throw InvalidArgument(
          fmt::format("{}: dilation should be greater than zero, but got {}", module, dilation.repr(true)));
    if (padding[i] < 0 || padding[i] > ((kernel[i] - 1) * dilation[i] + 1) / 2)
      throw InvalidArgument(
          fmt::format("{}: pad should be at most half of effective kernel size, but got pad={}, "
                      "kernel_size={} and dilation={}",
                      module, padding.repr(true), kernel.repr(true), dilation.repr(true)));
  }
}

// The pooled [N, C, oH, oW]; a ShapeError in torch's words when a static output dim is empty.
std::vector<int64_t> pooled_shape(const std::string& module, const Var& x, const ExpandingArray<2>& kernel,
                                  const ExpandingArray<2>& stride, const ExpandingArray<2>& padding,
                                  const ExpandingArray<2>& dilation, bool ceil_mode) {
  std::vector<int64_t> out{x.dim(0), x.dim(1)};
  for (size_t i = 0; i < 2; ++i)
    out.push_back(
        detail::window_out_dim(x.shape[i + 2], kernel[i], stride[i], padding[i], padding[i], dilation[i], ceil_mode));
  if (out[2] == 0 || out[3] == 0)
    throw ShapeError(fmt::format("{}: Given input '{}' of size {}, the calculated output size {} is too small", module,
                                 x.name, shape_text(x.shape), shape_text(out)));
  return out;
}

}  // namespace

// ---- MaxPool2d ---------------------------------------------------------------------------------------

MaxPool2d::MaxPool2d(MaxPool2dOptions options) : options_(options) {
  const auto& o = options_;
  check_pool_window("MaxPool2d", o.kernel_size(), o.stride(), o.padding(), o.dilation());
}

std::vector<Var> MaxPool2d::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& input = detail::single_input(*this, inputs);
  detail::require_float(*this, input);
  const auto& o = options_;
  return {detail::with_batch_dim(t, input, 4, "max_pool2d", [&](const Var& x) {
    const auto out =
        pooled_shape("MaxPool2d", x, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
    return t.op("MaxPool", {x},
                {{"kernel_shape", detail::ints(o.kernel_size().vec())},
                 {"strides", detail::ints(o.stride().vec())},
                 {"pads", detail::ints(detail::symmetric_pads(o.padding().vec()))},
                 {"dilations", detail::ints(o.dilation().vec())},
                 {"ceil_mode", Attribute::of_int(o.ceil_mode())}},
                x.dtype, out);
  })};
}

std::string MaxPool2d::extra_repr() const {
  const auto& o = options_;
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", o.kernel_size().repr(true),
                     o.stride().repr(true), o.padding().repr(true), o.dilation().repr(true),
                     detail::py_bool(o.ceil_mode()));
}

// ---- AvgPool2d ---------------------------------------------------------------------------------------

AvgPool2d::AvgPool2d(AvgPool2dOptions options) : options_(options) {
  const auto& o = options_;
  check_pool_window("AvgPool2d", o.kernel_size(), o.stride(), o.padding(), 1);
}

std::vector<Var> AvgPool2d::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& input = detail::single_input(*this, inputs);
  detail::require_float(*this, input);
  const auto& o = options_;
  return {detail::with_batch_dim(t, input, 4, "avg_pool2d", [&](const Var& x) {
    const auto out = pooled_shape("AvgPool2d", x, o.kernel_size(), o.stride(), o.padding(), 1, o.ceil_mode());
    // Kiln's AveragePool counts the explicit pads but never ceil_mode's extra partial window, as
    // torch's divisor does.
    return t.op("AveragePool", {x},
                {{"kernel_shape", detail::ints(o.kernel_size().vec())},
                 {"strides", detail::ints(o.stride().vec())},
                 {"pads", detail::ints(detail::symmetric_pads(o.padding().vec()))},
                 {"ceil_mode", Attribute::of_int(o.ceil_mode())},
                 {"count_include_pad", Attribute::of_int(o.count_include_pad())}},
                x.dtype, out);
  })};
}

std::string AvgPool2d::extra_repr() const {
  const auto& o = options_;
  return fmt::format("kernel_size={}, stride={}, padding={}", o.kernel_size().repr(true), o.stride().repr(true),
                     o.padding().repr(true));
}

// ---- AdaptiveAvgPool2d ---------------------------------------------------------------------------------

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::vector<int64_t> output_size) : output_size_(std::move(output_size)) {
  if (output_size_.size() != 1 && output_size_.size() != 2)
    throw InvalidArgument(
        fmt::format("AdaptiveAvgPool2d: output_size must be one int or two, got {}", detail::py_tuple(output_size_)));
  for (int64_t d : output_size_)
    if (d <= 0)
      throw InvalidArgument(
          fmt::format("AdaptiveAvgPool2d: output_size must be positive, got {}", detail::py_tuple(output_size_)));
}

std::array<int64_t, 2> AdaptiveAvgPool2d::output_size() const { return {output_size_.front(), output_size_.back()}; }

std::vector<Var> AdaptiveAvgPool2d::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& input = detail::single_input(*this, inputs);
  detail::require_float(*this, input);
  const auto size = output_size();
  return {detail::with_batch_dim(t, input, 4, "adaptive_avg_pool2d", [&](const Var& x) {
    std::vector<int64_t> out{x.dim(0), x.dim(1), size[0], size[1]};
    if (size[0] == 1 && size[1] == 1) return t.op("GlobalAveragePool", {x}, {}, x.dtype, out);
    // As torch's exporter: an AveragePool when each spatial dim is a multiple of the output's (then
    // the adaptive windows are exactly kernel = stride = input / output).
    std::vector<int64_t> kernel;
    for (size_t i = 0; i < 2; ++i) {
      const int64_t in = x.shape[i + 2];
      if (in < 0 || in % size[i] != 0)
        throw Unsupported(
            fmt::format("AdaptiveAvgPool2d: output_size {} needs input '{}' {} to have static spatial "
                        "dims divisible by it; Kiln exports adaptive pooling only then (as AveragePool) "
                        "or for a 1x1 output (GlobalAveragePool)",
                        detail::py_tuple({size[0], size[1]}), x.name, shape_text(x.shape)));
      kernel.push_back(in / size[i]);
    }
    return t.op("AveragePool", {x},
                {{"kernel_shape", detail::ints(kernel)},
                 {"strides", detail::ints(kernel)},
                 {"pads", detail::ints({0, 0, 0, 0})}},
                x.dtype, out);
  })};
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return "output_size=" + (output_size_.size() == 1 ? std::to_string(output_size_[0]) : detail::py_tuple(output_size_));
}

}  // namespace kiln::nn
