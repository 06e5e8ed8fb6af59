// Conv1d, Conv2d and ConvTranspose2d: torch.nn's validation, parameters and initialisation, and
// the ONNX Conv / ConvTranspose torch.onnx.export writes for them.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "kiln/nn/layers.h"
#include "models/nn/layer_util.h"

namespace kiln::nn {

using detail::py_tuple;
using detail::shape_text;

namespace {

// torch's _ConvNd checks, in its order and words.
void check_channels(const std::string& module, int64_t in_channels, int64_t out_channels, int64_t groups) {
  if (in_channels < 0 || out_channels < 0)
    throw InvalidArgument(fmt::format("{}: in_channels and out_channels must be non-negative, got {} and {}", module,
                                      in_channels, out_channels));
  if (groups <= 0) throw InvalidArgument(fmt::format("{}: groups must be a positive integer (got {})", module, groups));
  if (in_channels % groups != 0)
    throw InvalidArgument(fmt::format("{}: in_channels must be divisible by groups (in_channels={}, groups={})", module,
                                      in_channels, groups));
  if (out_channels % groups != 0)
    throw InvalidArgument(fmt::format("{}: out_channels must be divisible by groups (out_channels={}, groups={})",
                                      module, out_channels, groups));
}

template <size_t D>
void check_window(const std::string& module, const ExpandingArray<D>& kernel, const ExpandingArray<D>& stride,
                  const ExpandingArray<D>& padding, const ExpandingArray<D>& dilation) {
  for (size_t i = 0; i < D; ++i) {
    if (kernel[i] <= 0)
      throw InvalidArgument(fmt::format("{}: kernel_size must be positive, got {}", module, kernel.repr()));
    if (stride[i] <= 0)
      throw InvalidArgument(fmt::format("{}: non-positive stride is not supported (stride={})", module, stride.repr()));
    if (dilation[i] <= 0)
      throw InvalidArgument(
          fmt::format("{}: dilation should be greater than zero (dilation={})", module, dilation.repr()));
    if (padding[i] < 0)
      throw InvalidArgument(fmt::format("{}: negative padding is not supported (padding={})", module, padding.repr()));
  }
}

void check_padding_mode(const std::string& module, const std::string& mode) {
  if (mode != "zeros" && mode != "reflect" && mode != "replicate" && mode != "circular")
    throw InvalidArgument(
        fmt::format("{}: padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], "
                    "but got padding_mode='{}'",
                    module, mode));
  if (mode != "zeros")
    throw Unsupported(
        fmt::format("{}: padding_mode='{}' is not supported by Kiln's builder yet; use 'zeros' (or pad "
                    "the input explicitly)",
                    module, mode));
}

// torch's uniform bias bound from the weight's fan_in.
void init_conv(Module& m, bool bias) {
  Tensor& w = m.get_parameter("weight");
  if (w.numel() > 0) kaiming_uniform_(w, std::sqrt(5.0));  // torch: a no-op on zero elements
  if (!bias) return;
  const int64_t fan_in = fan_in_and_fan_out(w).first;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
  uniform_(m.get_parameter("bias"), -bound, bound);
}

// Checks x's channel count against the weight's, in torch's words.
void check_input_channels(const std::string& module, const Var& x, int64_t groups, const Shape& weight_shape,
                          int64_t expected) {
  const int64_t c = x.dim(1);
  if (c >= 0 && c != expected)
    throw ShapeError(
        fmt::format("{}: Given groups={}, weight of size {}, expected input '{}' {} to have {} channels, "
                    "but got {} channels instead",
                    module, groups, to_string(weight_shape), x.name, shape_text(x.shape), expected, c));
}

void check_output(const std::string& module, const Var& x, const std::vector<int64_t>& out,
                  const std::vector<int64_t>& kernel) {
  for (int64_t d : out)
    if (d == 0)
      throw ShapeError(
          fmt::format("{}: input '{}' {} is too small for kernel size {} (after padding and dilation): "
                      "the output would be empty",
                      module, x.name, shape_text(x.shape), py_tuple(kernel)));
}

}  // namespace

// ---- Conv1d / Conv2d -------------------------------------------------------------------------------

template <size_t D>
ConvNd<D>::ConvNd(ConvOptions<D> options) : options_(std::move(options)) {
  const std::string name = type_name();
  const auto& o = options_;
  check_channels(name, o.in_channels(), o.out_channels(), o.groups());
  if (o.padding_same().value_or(false) && !o.stride().all_equal(1))
    throw InvalidArgument(fmt::format("{}: padding='same' is not supported for strided convolutions", name));
  check_padding_mode(name, o.padding_mode());
  check_window<D>(name, o.kernel_size(), o.stride(), o.padding(), o.dilation());
  Shape w{o.out_channels(), o.in_channels() / o.groups()};
  for (size_t i = 0; i < D; ++i) w.push_back(o.kernel_size()[i]);
  register_parameter("weight", Tensor::zeros(DType::Float32, w));
  if (o.bias()) register_parameter("bias", Tensor::zeros(DType::Float32, {o.out_channels()}));
  reset_parameters();
}

template <size_t D>
void ConvNd<D>::reset_parameters() {
  init_conv(*this, options_.bias());
}

template <size_t D>
std::vector<Var> ConvNd<D>::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& input = detail::single_input(*this, inputs);
  const Var w = t.parameter(*this, "weight");
  detail::require_dtype(*this, input, w);
  const auto& o = options_;
  const std::string op_name = D == 1 ? "conv1d" : "conv2d";
  return {detail::with_batch_dim(t, input, int64_t(D) + 2, op_name, [&](const Var& x) {
    check_input_channels(type_name(), x, o.groups(), w.shape, o.in_channels());
    std::vector<int64_t> begin(D), end(D), kernel = o.kernel_size().vec();
    for (size_t i = 0; i < D; ++i) {
      if (!o.padding_same()) {
        begin[i] = end[i] = o.padding()[i];
      } else if (*o.padding_same()) {
        // torch: total = dilation * (kernel - 1), the odd extra on the right
        const int64_t total = o.dilation()[i] * (kernel[i] - 1);
        begin[i] = total / 2;
        end[i] = total - begin[i];
      }  // 'valid': no padding
    }
    std::vector<int64_t> out_shape{x.dim(0), o.out_channels()}, spatial;
    for (size_t i = 0; i < D; ++i)
      spatial.push_back(
          detail::window_out_dim(x.shape[i + 2], kernel[i], o.stride()[i], begin[i], end[i], o.dilation()[i]));
    check_output(type_name(), x, spatial, kernel);
    out_shape.insert(out_shape.end(), spatial.begin(), spatial.end());
    std::vector<int64_t> pads = begin;
    pads.insert(pads.end(), end.begin(), end.end());
    std::vector<Var> in{x, w};
    if (o.bias()) in.push_back(t.parameter(*this, "bias"));
    return t.op("Conv", in,
                {{"kernel_shape", detail::ints(kernel)},
                 {"strides", detail::ints(o.stride().vec())},
                 {"pads", detail::ints(pads)},
                 {"dilations", detail::ints(o.dilation().vec())},
                 {"group", Attribute::of_int(o.groups())}},
                x.dtype, out_shape);
  })};
}

template <size_t D>
std::string ConvNd<D>::extra_repr() const {
  const auto& o = options_;
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", o.in_channels(), o.out_channels(),
                              o.kernel_size().repr(), o.stride().repr());
  if (o.padding_same()) s += *o.padding_same() ? ", padding=same" : ", padding=valid";
  else if (!o.padding().all_equal(0)) s += ", padding=" + o.padding().repr();
  if (!o.dilation().all_equal(1)) s += ", dilation=" + o.dilation().repr();
  if (o.groups() != 1) s += fmt::format(", groups={}", o.groups());
  if (!o.bias()) s += ", bias=False";
  if (o.padding_mode() != "zeros") s += ", padding_mode=" + o.padding_mode();
  return s;
}

template class ConvNd<1>;
template class ConvNd<2>;

// ---- ConvTranspose2d ---------------------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(ConvTranspose2dOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  check_channels("ConvTranspose2d", o.in_channels(), o.out_channels(), o.groups());
  if (o.padding_mode() != "zeros")
    throw InvalidArgument(
        fmt::format("ConvTranspose2d: Only \"zeros\" padding mode is supported for ConvTranspose2d "
                    "(got padding_mode='{}')",
                    o.padding_mode()));
  check_window<2>("ConvTranspose2d", o.kernel_size(), o.stride(), o.padding(), o.dilation());
  for (size_t i = 0; i < 2; ++i)
    if (o.output_padding()[i] < 0 ||
        (o.output_padding()[i] >= o.stride()[i] && o.output_padding()[i] >= o.dilation()[i]))
      throw InvalidArgument(
          fmt::format("ConvTranspose2d: output padding must be smaller than either stride or "
                      "dilation, but got output_padding={}, stride={}, dilation={}",
                      o.output_padding().repr(), o.stride().repr(), o.dilation().repr()));
  register_parameter("weight", Tensor::zeros(DType::Float32, {o.in_channels(), o.out_channels() / o.groups(),
                                                              o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) register_parameter("bias", Tensor::zeros(DType::Float32, {o.out_channels()}));
  reset_parameters();
}

// torch computes fan_in from the weight's dim 1 (out_channels / groups) here too.
void ConvTranspose2d::reset_parameters() { init_conv(*this, options_.bias()); }

std::vector<Var> ConvTranspose2d::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& input = detail::single_input(*this, inputs);
  const Var w = t.parameter(*this, "weight");
  detail::require_dtype(*this, input, w);
  const auto& o = options_;
  return {detail::with_batch_dim(t, input, 4, "conv_transpose2d", [&](const Var& x) {
    check_input_channels("ConvTranspose2d", x, o.groups(), w.shape, o.in_channels());
    std::vector<int64_t> out_shape{x.dim(0), o.out_channels()};
    for (size_t i = 0; i < 2; ++i) {
      const int64_t in = x.shape[i + 2];
      out_shape.push_back(in < 0 ? -1
                                 : (in - 1) * o.stride()[i] - 2 * o.padding()[i] +
                                       o.dilation()[i] * (o.kernel_size()[i] - 1) + o.output_padding()[i] + 1);
      if (out_shape.back() == 0 || out_shape.back() < -1)
        throw ShapeError(fmt::format("ConvTranspose2d: input '{}' {} gives a non-positive output size {}", x.name,
                                     shape_text(x.shape), out_shape.back()));
    }
    std::vector<Var> in{x, w};
    if (o.bias()) in.push_back(t.parameter(*this, "bias"));
    return t.op("ConvTranspose", in,
                {{"kernel_shape", detail::ints(o.kernel_size().vec())},
                 {"strides", detail::ints(o.stride().vec())},
                 {"pads", detail::ints(detail::symmetric_pads(o.padding().vec()))},
                 {"dilations", detail::ints(o.dilation().vec())},
                 {"group", Attribute::of_int(o.groups())},
                 {"output_padding", detail::ints(o.output_padding().vec())}},
                x.dtype, out_shape);
  })};
}

std::string ConvTranspose2d::extra_repr() const {
  const auto& o = options_;
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", o.in_channels(), o.out_channels(),
                              o.kernel_size().repr(), o.stride().repr());
  if (!o.padding().all_equal(0)) s += ", padding=" + o.padding().repr();
  if (!o.dilation().all_equal(1)) s += ", dilation=" + o.dilation().repr();
  if (!o.output_padding().all_equal(0)) s += ", output_padding=" + o.output_padding().repr();
  if (o.groups() != 1) s += fmt::format(", groups={}", o.groups());
  if (!o.bias()) s += ", bias=False";
  return s;
}

}  // namespace kiln::nn
