// Conv (1-D, 2-D, 3-D; groups, dilations, strides, explicit or automatic padding, optional bias) on
// oneDNN's convolution_forward, built once per planned shape; float64 (which oneDNN lacks, and
// which gradient checks run in) on the direct loop of conv_common.h.
#include <fmt/format.h>

#include "kernels/cpu/conv_common.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using dnnl::memory;
using dnnl_util::to_dims;

std::string describe(const TensorMeta& m) { return fmt::format("{}{}", dtype_name(m.dtype), to_string(m.shape)); }

struct ConvShape {
  Shape x, w;
  int64_t group = 1;
  bool has_bias = false;
  dnnl_util::Window win;
  Shape y;
};

ConvShape conv_shape(const Node& node, const InferContext& ctx) {
  const TensorMeta& x = ctx.input(0);
  const TensorMeta& w = ctx.input(1);
  ConvShape s;
  s.x = x.shape;
  s.w = w.shape;
  if (w.dtype != x.dtype)
    throw TypeError(fmt::format("Conv: weight {} must have the dtype of input {}", describe(w), describe(x)));
  if (x.shape.size() < 3)
    throw ShapeError(fmt::format("Conv: input {} must be [N, C, D1, ...] with at least one spatial dim", describe(x)));
  if (w.shape.size() != x.shape.size())
    throw ShapeError(fmt::format("Conv: weight {} must have the rank of input {} ([M, C/group, k1, ...])", describe(w),
                                 describe(x)));
  const size_t nsp = x.shape.size() - 2;
  if (nsp > 3)
    throw Unsupported(fmt::format("Conv: input {} has {} spatial dims; Kiln supports 1 to 3", describe(x), nsp));
  s.group = node.attr_int("group", 1);
  if (s.group < 1) throw InvalidModel(fmt::format("Conv: group {} must be positive", s.group));
  if (x.shape[1] != w.shape[1] * s.group)
    throw ShapeError(fmt::format("Conv: input {} has {} channels but weight {} expects {} (group {})", describe(x),
                                 x.shape[1], describe(w), w.shape[1] * s.group, s.group));
  if (w.shape[0] % s.group != 0)
    throw ShapeError(fmt::format("Conv: weight {} has {} output channels, not divisible by group {}", describe(w),
                                 w.shape[0], s.group));
  const std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  if (node.has_attr("kernel_shape") && node.attr_ints("kernel_shape") != kernel)
    throw ShapeError(fmt::format("Conv: kernel_shape [{}] does not match weight {}",
                                 fmt::join(node.attr_ints("kernel_shape"), ", "), describe(w)));
  if (ctx.has_input(2)) {
    const TensorMeta& b = ctx.input(2);
    if (b.dtype != x.dtype || b.shape != Shape{w.shape[0]})
      throw ShapeError(fmt::format("Conv: bias {} must be {}[{}] (one per output channel of weight {})", describe(b),
                                   dtype_name(x.dtype), w.shape[0], describe(w)));
    s.has_bias = true;
  }
  s.win = dnnl_util::make_window(node, Shape(x.shape.begin() + 2, x.shape.end()), kernel, false);
  s.y = {x.shape[0], w.shape[0]};
  s.y.insert(s.y.end(), s.win.out.begin(), s.win.out.end());
  return s;
}

class ConvF32 final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    s_ = conv_shape(node_, ctx);
    built_ = false;
    packed_weights_ = memory();
    return {TensorMeta{ctx.dtype(0), s_.y, ctx.input(0).dynamic, Tensor()}};
  }
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>&) override {
    build();
    // Weights known at plan time (an initializer: inference graphs) are put into the primitive's
    // layout once here instead of on every call; ResNet-18's 3x3 weights took a third of its
    // forward pass in those reorders. A Session's initializers do not change while it lives.
    packed_weights_ = memory();
    if (numel(s_.y) > 0 && ctx.has_value(1) && wei_.reordered()) {
      const Tensor w = ctx.value(1).contiguous();
      packed_weights_ = memory(wei_.inner, dnnl_util::engine());
      dnnl_util::execute(wei_.to_inner,
                         {{DNNL_ARG_FROM, dnnl_util::memory_of(wei_.plain, w)}, {DNNL_ARG_TO, packed_weights_}},
                         "reorder of constant convolution weights");
    }
  }

  void compute(ComputeContext& ctx) override {
    if (!built_) build();
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    std::unordered_map<int, memory> args;
    dnnl_util::bind(DNNL_ARG_SRC, src_, ctx.input(0), args);
    if (packed_weights_) args[DNNL_ARG_WEIGHTS] = packed_weights_;
    else dnnl_util::bind(DNNL_ARG_WEIGHTS, wei_, ctx.input(1), args);
    if (s_.has_bias) args[DNNL_ARG_BIAS] = dnnl_util::memory_of(bias_, ctx.input(2));
    dnnl_util::bind_output(DNNL_ARG_DST, dst_, y, args);
    dnnl_util::execute(prim_, args, "convolution");
    dnnl_util::finish_output(dst_, y, "the convolution output");
  }

 private:
  void build() {
    built_ = true;
    if (numel(s_.y) == 0) return;
    Shape wdims = s_.w;
    if (s_.group > 1) {  // oneDNN's grouped weights [G, M/G, C/G, k...] are ONNX's [M, C/G, k...] split.
      wdims[0] = s_.w[0] / s_.group;
      wdims.insert(wdims.begin(), s_.group);
    }
    const memory::desc xp = dnnl_util::plain_desc(s_.x), wp = dnnl_util::plain_desc(wdims),
                       yp = dnnl_util::plain_desc(s_.y);
    const memory::desc bp = s_.has_bias ? dnnl_util::plain_desc({s_.w[0]}) : memory::desc();
    std::vector<int64_t> dil = s_.win.dilations;
    for (int64_t& d : dil) d -= 1;  // oneDNN counts the holes between taps
    const std::string what =
        fmt::format("build a convolution for input float{} and weight float{}", to_string(s_.x), to_string(s_.w));
    auto any = [](const Shape& s) { return memory::desc(to_dims(s), memory::data_type::f32, memory::format_tag::any); };
    dnnl::convolution_forward::primitive_desc pd = dnnl_util::checked(what, [&] {
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                        conv::blocked_input(s_.x[1]) ? any(s_.x) : xp, any(wdims), bp, any(s_.y),
                                        to_dims(s_.win.strides), to_dims(dil), to_dims(s_.win.pad_begin),
                                        to_dims(s_.win.pad_end));
      return dnnl::convolution_forward::primitive_desc(d, dnnl_util::engine());
    });
    dnnl_util::checked(what, [&] {
      src_ = dnnl_util::operand(xp, pd.src_desc(), false);
      wei_ = dnnl_util::operand(wp, pd.weights_desc(), false);
      dst_ = dnnl_util::operand(yp, pd.dst_desc(), true);
      bias_ = bp;
      prim_ = dnnl::convolution_forward(pd);
    });
  }

  ConvShape s_;
  bool built_ = false;
  dnnl_util::Operand src_, wei_, dst_;
  memory packed_weights_;  // the constant weights in wei_.inner's layout, when known at plan time
  memory::desc bias_;
  dnnl::convolution_forward prim_;
};

class ConvF64 final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const ConvShape s = conv_shape(node_, ctx);
    p_ = conv::Problem{s.x, s.w, s.y, s.group, s.win.strides, s.win.dilations, s.win.pad_begin, s.win.pad_end};
    has_bias_ = s.has_bias;
    return {TensorMeta{ctx.dtype(0), s.y, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    if (ctx.output(0).numel() == 0) return;
    conv::forward_direct<double>(p_, ctx.input(0).data<double>(), ctx.input(1).data<double>(),
                                 has_bias_ ? ctx.input(2).data<double>() : nullptr, ctx.output(0).data<double>());
  }

 private:
  conv::Problem p_;
  bool has_bias_ = false;
};

const KernelRegistrar conv_f64({"", "Conv", 1, kMaxOpset, {DType::Float64}},
                               [](const Node& n) { return std::make_unique<ConvF64>(n); });
const KernelRegistrar conv_f32({"", "Conv", 1, kMaxOpset, {DType::Float32}},
                               [](const Node& n) { return std::make_unique<ConvF32>(n); });

}  // namespace
}  // namespace kiln
