// Conv (1-D, 2-D, 3-D; groups, dilations, strides, explicit or automatic padding, optional bias) on
// oneDNN's convolution_forward, built once per planned shape; float64 (which oneDNN lacks, and
// which gradient checks run in) on the direct loop of conv_common.h.
//
// ai.kiln.ConvChannelsLast (registered in conv_fused.cpp) is the same convolution over 2-D maps
// whose output is channels last ([N, H, W, M]) and whose input is channels last too unless
// `input_channels_last` is 0, with an optional residual (input 3, ResNet's Add) and `activation`
// (Relu) applied by oneDNN as it writes the output: the layout pass (ir/fusion.h) keeps a network's
// activations that way between convolutions, so that oneDNN's channels-last kernels read and write
// them in place instead of reordering at every call.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/scratch.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/low_precision.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using dnnl::memory;
using dnnl_util::to_dims;

struct ConvShape {
  Shape x, w;
  int64_t group = 1;
  bool has_bias = false;
  dnnl_util::Window win;
  Shape y;
};

// `x` is the input as [N, C, D1, ...] (a channels-last input permuted back).
ConvShape conv_shape(const Node& node, const TensorMeta& x, const InferContext& ctx) {
  const TensorMeta& w = ctx.input(1);
  ConvShape s;
  s.x = x.shape;
  s.w = w.shape;
  if (w.dtype != x.dtype)
    throw TypeError(fmt::format("Conv: weight {} must have the dtype of input {}", w.describe(), x.describe()));
  if (x.shape.size() < 3)
    throw ShapeError(fmt::format("Conv: input {} must be [N, C, D1, ...] with at least one spatial dim", x.describe()));
  if (w.shape.size() != x.shape.size())
    throw ShapeError(fmt::format("Conv: weight {} must have the rank of input {} ([M, C/group, k1, ...])", w.describe(),
                                 x.describe()));
  const size_t nsp = x.shape.size() - 2;
  if (nsp > 3)
    throw Unsupported(fmt::format("Conv: input {} has {} spatial dims; Kiln supports 1 to 3", x.describe(), nsp));
  s.group = node.attr_int("group", 1);
  if (s.group < 1) throw InvalidModel(fmt::format("Conv: group {} must be positive", s.group));
  if (x.shape[1] != w.shape[1] * s.group)
    throw ShapeError(fmt::format("Conv: input {} has {} channels but weight {} expects {} (group {})", x.describe(),
                                 x.shape[1], w.describe(), w.shape[1] * s.group, s.group));
  if (w.shape[0] % s.group != 0)
    throw ShapeError(fmt::format("Conv: weight {} has {} output channels, not divisible by group {}", w.describe(),
                                 w.shape[0], s.group));
  const std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  if (node.has_attr("kernel_shape") && node.attr_ints("kernel_shape") != kernel)
    throw ShapeError(fmt::format("Conv: kernel_shape [{}] does not match weight {}",
                                 fmt::join(node.attr_ints("kernel_shape"), ", "), w.describe()));
  if (ctx.has_input(2)) {
    const TensorMeta& b = ctx.input(2);
    if (b.dtype != x.dtype || b.shape != Shape{w.shape[0]})
      throw ShapeError(fmt::format("Conv: bias {} must be {}[{}] (one per output channel of weight {})", b.describe(),
                                   dtype_name(x.dtype), w.shape[0], w.describe()));
    s.has_bias = true;
  }
  s.win = dnnl_util::make_window(node, Shape(x.shape.begin() + 2, x.shape.end()), kernel, false);
  s.y = {x.shape[0], w.shape[0]};
  s.y.insert(s.y.end(), s.win.out.begin(), s.win.out.end());
  return s;
}

using conv::TapCrop;

TapCrop crop_taps(const Shape& x, const dnnl_util::Window& win) {
  return conv::crop_taps(x, win.kernel, win.strides, win.dilations, win.pad_begin, win.pad_end, win.out);
}

// Whether the convolution is one matrix product y[n, m] = x'[n, :] . w'[m, :] + b[m], w' the
// cropped taps: one output position in every spatial dim, whose cropped window reads either the
// whole input (a 3x3 kernel over a 1x1 map with padding 1, or over a 2x2 map with stride 2; x' is
// x as [N, C * spatial]) or, in every dim, its first element only (a strided 1x1 kernel; x' is
// x[:, :, 0...] as [N, C], strided).
enum class Product { None, WholeInput, FirstElement };

Product one_product(const ConvShape& s, const TapCrop& c) {
  if (s.group != 1) return Product::None;
  bool whole = true, first = true;
  for (size_t i = 0; i < s.win.kernel.size(); ++i) {
    const int64_t taps = c.last[i] - c.first[i] + 1;
    if (s.win.out[i] != 1 || c.pad_begin[i] != 0 || (taps > 1 && s.win.dilations[i] != 1)) return Product::None;
    whole = whole && taps == s.x[i + 2];
    first = first && taps == 1;
  }
  return whole ? Product::WholeInput : first ? Product::FirstElement : Product::None;
}

using conv::copy_taps;

using dnnl_util::nchw_of;
using dnnl_util::nhwc_of;

// How a ConvChannelsLast node lays out its operands and what it applies to its output.
struct Layout {
  bool x_channels_last = false, y_channels_last = false;
  bool residual = false;  // input 3: added to the convolution before the activation
  bool relu = false;
};

Layout layout_of(const Node& node) {
  if (node.domain != kKilnDomain) return {};
  const std::string act = node.attr_string("activation", "");
  if (!act.empty() && act != "Relu")
    throw InvalidModel(fmt::format("{}: activation '{}' (only Relu, or none)", node.label(), act));
  const bool residual = node.inputs.size() > 3 && !node.inputs[3].empty();
  return {node.attr_int("input_channels_last", 1) != 0, true, residual, act == "Relu"};
}

// float32, or native bfloat16 (low_precision.h), on oneDNN.
class ConvDnnl final : public NativeBf16Kernel {
 public:
  ConvDnnl(const Node& node, memory::data_type dt) : NativeBf16Kernel(node), dt_(dt), layout_(layout_of(node)) {}
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    TensorMeta x = ctx.input(0);
    if ((layout_.x_channels_last || layout_.y_channels_last) && x.shape.size() != 4)
      throw ShapeError(fmt::format("{}: input {} must have rank 4 (2-D maps)", node_.op_type, x.describe()));
    if (layout_.x_channels_last) x.shape = nchw_of(x.shape);
    s_ = conv_shape(node_, x, ctx);
    built_ = false;
    packed_weights_ = memory();
    TensorMeta y{ctx.dtype(0), layout_.y_channels_last ? nhwc_of(s_.y) : s_.y, x.dynamic, Tensor()};
    conv_out_ = y.shape;
    broadcast_residual_ = false;
    if (layout_.residual) {
      if (ctx.dtype(3) != y.dtype)
        throw TypeError(fmt::format("{}: the residual {} must have the output's dtype ({})", node_.label(),
                                    ctx.input(3).describe(), y.describe()));
      // Add's broadcasting: the sum's shape; anything but two equal shapes is added by a loop.
      y.shape = broadcast_shapes(conv_out_, ctx.shape(3));
      broadcast_residual_ = y.shape != conv_out_ || ctx.shape(3) != conv_out_;
    }
    return {y};
  }
  // The residual's buffer, when no later step reads it: the convolution adds onto it in place.
  std::optional<size_t> inplace_input() const override {
    return layout_.residual ? std::optional<size_t>(3) : std::nullopt;
  }
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>&) override {
    if (!built_) build();
    // Weights known at plan time (an initializer: inference graphs) are put into the primitive's
    // layout once here instead of on every call; ResNet-18's 3x3 weights took a third of its
    // forward pass in those reorders. A Session's initializers do not change while it lives.
    packed_weights_ = memory();
    product_weights_ = Tensor();
    if (numel(s_.y) > 0 && ctx.has_value(1) && product_) {
      product_weights_ = Tensor::empty(DType::Float32, {s_.w[0], product_k_});
      copy_product_taps(ctx.value(1).contiguous().data<float>(), product_weights_.data<float>());
    } else if (numel(s_.y) > 0 && ctx.has_value(1) && wei_.reordered()) {
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
    if (residual_by_loop_) return compute_then_add(ctx, y);
    // oneDNN's sum post-op adds what the output holds: the residual, unless it already is there.
    if (layout_.residual && y.raw_data() != ctx.input(3).raw_data())
      std::memcpy(y.raw_data(), ctx.input(3).raw_data(), y.nbytes());
    compute_into(ctx, y);
  }

  // The residual added by a loop (residual_by_loop_): the convolution into a tensor of its own,
  // then out = conv + residual (and the activation), broadcast as Add does.
  void compute_then_add(ComputeContext& ctx, Tensor& y) {
    Tensor conv = Tensor::empty(DType::Float32, conv_out_);
    compute_into(ctx, conv);
    const BroadcastPlan<2> plan = make_broadcast_plan<2>({conv_out_, ctx.input(3).shape()});
    const float* pa = conv.data<float>();
    const float* pr = ctx.input(3).data<float>();
    float* py = y.data<float>();
    const bool relu = layout_.relu;
    broadcast_for_each(
        plan, [&](int64_t out, const std::array<int64_t, 2>& in, const std::array<int64_t, 2>& step, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            const float v = pa[in[0] + i * step[0]] + pr[in[1] + i * step[1]];
            py[out + i] = relu ? std::max(0.f, v) : v;
          }
        });
  }

  // The convolution (with the post-ops oneDNN applies) into y, of the convolution's output shape.
  void compute_into(ComputeContext& ctx, Tensor& y) {
    if (product_) return run_product(ctx, y);
    std::unordered_map<int, memory> args;
    dnnl_util::bind(DNNL_ARG_SRC, src_, ctx.input(0), args);
    if (packed_weights_) args[DNNL_ARG_WEIGHTS] = packed_weights_;
    else dnnl_util::bind(DNNL_ARG_WEIGHTS, wei_, ctx.input(1), args);
    if (s_.has_bias) args[DNNL_ARG_BIAS] = dnnl_util::memory_of(bias_, ctx.input(2));
    dnnl_util::bind_output(DNNL_ARG_DST, dst_, y, args);
    dnnl_util::execute(prim_, args, "convolution");
    dnnl_util::finish_output(dst_, y, "the convolution output");
  }

  // bfloat16: whether oneDNN has a bfloat16 convolution for these shapes, not its reference loops.
  bool supported() override {
    try {
      build();
    } catch (const Unsupported&) {
      return false;
    }
    return numel(s_.y) == 0 || impl_.rfind("ref", 0) != 0;
  }

 private:
  // y[N, M] = x[N, C * spatial] . w'[M, C * taps]^T (+ b): oneDNN's convolution took 0.25 ms for
  // ResNet-18's 3x3 convolutions over 1x1 maps at batch 32, the product 0.07.
  void run_product(ComputeContext& ctx, Tensor& y) {
    const float* w = product_weights_.defined() ? product_weights_.data<float>() : nullptr;
    if (w == nullptr) {
      auto* cropped = static_cast<float*>(scratch_take(static_cast<size_t>(s_.w[0] * product_k_) * sizeof(float)));
      copy_product_taps(ctx.input(1).data<float>(), cropped);
      w = cropped;
    }
    const int64_t m = s_.w[0];
    const float* x = ctx.input(0).data<float>();
    if (product_stride_ > 1) {  // x[:, :, 0...] gathered (oneDNN's strided matmul source is a slow reference loop)
      const int64_t rows = s_.x[0] * s_.x[1], c = s_.x[1];
      auto* gathered = static_cast<float*>(scratch_take(static_cast<size_t>(rows) * sizeof(float)));
      if (layout_.x_channels_last)  // x[n, 0, 0, :] is the first C elements of each image
        for (int64_t r = 0; r < rows; ++r) gathered[r] = x[(r / c) * product_stride_ * c + r % c];
      else
        for (int64_t r = 0; r < rows; ++r) gathered[r] = x[r * product_stride_];
      x = gathered;
    }
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(product_x_, dnnl_util::engine(), const_cast<float*>(x))},
        {DNNL_ARG_WEIGHTS, memory(product_w_, dnnl_util::engine(), const_cast<float*>(w))},
        {DNNL_ARG_DST, dnnl_util::memory_of(product_y_, y)}};
    if (s_.has_bias) args[DNNL_ARG_BIAS] = dnnl_util::memory_of(dnnl_util::plain_desc({1, m}), ctx.input(2));
    dnnl_util::execute(product_prim_, args, "convolution as a matrix product");
  }

  // The cropped taps as the product reads them: in the input's order of channels and taps.
  void copy_product_taps(const float* w, float* out) const {
    if (layout_.x_channels_last) conv::copy_taps_channels_last(w, s_.w, crop_, out);
    else copy_taps(w, s_.w, crop_, out);
  }

  // The fused residual and activation as oneDNN post-ops (none: default attributes).
  dnnl::primitive_attr attributes() const {
    dnnl::primitive_attr attr;
    if (residual_by_loop_) return attr;  // added, and the activation applied, by compute_then_add
    dnnl::post_ops ops;
    if (layout_.residual) ops.append_sum(1.f);
    if (layout_.relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(ops);
    return attr;
  }

  // The one-product shortcut (one_product): the convolution as one matrix product.
  void build_product(Product product) {
    const int64_t n = s_.x[0], m = s_.w[0], spatial = numel(s_.x) / (s_.x[0] * s_.x[1]);
    const int64_t k = product_k_ = product == Product::WholeInput ? s_.x[1] * spatial : s_.x[1];
    product_x_ = dnnl_util::plain_desc({n, k});
    product_stride_ = product == Product::WholeInput ? 1 : spatial;
    product_w_ = dnnl_util::strided_desc({k, m}, {1, k});  // w' [M, K] read transposed
    product_y_ = dnnl_util::plain_desc({n, m});
    const memory::desc bias = s_.has_bias ? dnnl_util::plain_desc({1, m}) : memory::desc();
    product_prim_ = dnnl_util::checked(
        fmt::format("build a matrix product for convolution input float{} and weight float{}", to_string(s_.x),
                    to_string(s_.w)),
        [&] {
          return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(product_x_, product_w_, bias, product_y_),
                                                           attributes(), dnnl_util::engine()));
        });
  }

  void build() {
    built_ = true;
    residual_by_loop_ = broadcast_residual_;
    if (numel(s_.y) == 0) return;
    crop_ = crop_taps(s_.x, s_.win);
    // The matrix-product shortcut copies float32 taps; bfloat16 takes the convolution.
    const Product product = dt_ == memory::data_type::f32 ? one_product(s_, crop_) : Product::None;
    product_ = product != Product::None;
    if (product_) return build_product(product);
    Shape wdims = s_.w;
    if (s_.group > 1) {  // oneDNN's grouped weights [G, M/G, C/G, k...] are ONNX's [M, C/G, k...] split.
      wdims[0] = s_.w[0] / s_.group;
      wdims.insert(wdims.begin(), s_.group);
    }
    // With taps cropped, the weights are read in place as a sub-tensor of the ONNX weights.
    const TapCrop& crop = crop_;
    memory::desc wp = dnnl_util::plain_desc(wdims, dt_);
    const size_t lead = wdims.size() - s_.win.kernel.size();
    if (crop.any) {
      Shape cropped = wdims, offsets(wdims.size(), 0);
      for (size_t i = 0; i < s_.win.kernel.size(); ++i) {
        cropped[lead + i] = crop.last[i] - crop.first[i] + 1;
        offsets[lead + i] = crop.first[i];
      }
      wp = wp.submemory_desc(to_dims(cropped), to_dims(offsets));
      wdims = cropped;
    }
    // Kiln's tensors: row-major, channels first or (ConvChannelsLast) last. One input channel is
    // the same bytes either way: read as channels last when the output is, oneDNN's channels-last
    // kernel takes it (else a direct kernel writes a 16-channel blocked output that is then
    // reordered: LeNet's first convolution, 0.45 -> 0.35 ms).
    const bool x_last = layout_.x_channels_last || (s_.x[1] == 1 && layout_.y_channels_last);
    const memory::desc xp = dnnl_util::tensor_desc(s_.x, dt_, x_last),
                       yp = dnnl_util::tensor_desc(s_.y, dt_, layout_.y_channels_last);
    const memory::desc bp = s_.has_bias ? dnnl_util::plain_desc({s_.w[0]}, dt_) : memory::desc();
    std::vector<int64_t> dil = s_.win.dilations;
    for (int64_t& d : dil) d -= 1;  // oneDNN counts the holes between taps
    const char* type = dt_ == memory::data_type::f32 ? "float" : "bfloat16";
    const std::string what =
        fmt::format("build a convolution for input {}{} and weight {}{}", type, to_string(s_.x), type, to_string(s_.w));
    auto any = [&](const Shape& s) { return memory::desc(to_dims(s), dt_, memory::format_tag::any); };
    // With a residual the output is written in its own layout, which the sum post-op reads.
    auto make = [&](const memory::desc& y) {
      return dnnl_util::checked(what, [&] {
        dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          conv::blocked_input(s_.x[1]) ? any(s_.x) : xp, any(wdims), bp, y,
                                          to_dims(s_.win.strides), to_dims(dil), to_dims(crop.pad_begin),
                                          to_dims(crop.pad_end));
        return dnnl::convolution_forward::primitive_desc(d, attributes(), dnnl_util::engine());
      });
    };
    const bool sum = layout_.residual && !residual_by_loop_;
    dnnl::convolution_forward::primitive_desc pd = make(sum ? yp : any(s_.y));
    if (sum && dnnl_util::is_reference(pd.impl_info_str())) {  // oneDNN wants another output layout
      residual_by_loop_ = true;
      pd = make(any(s_.y));
    }
    dnnl_util::checked(what, [&] {
      src_ = dnnl_util::operand(xp, pd.src_desc(), false);
      wei_ = dnnl_util::operand(wp, pd.weights_desc(), false);
      dst_ = dnnl_util::operand(yp, pd.dst_desc(), true);
      bias_ = bp;
      prim_ = dnnl::convolution_forward(pd);
      impl_ = pd.impl_info_str();
    });
  }

  memory::data_type dt_;
  Layout layout_;
  bool broadcast_residual_ = false;  // the residual's shape is not the convolution's
  bool residual_by_loop_ = false;    // added by compute_then_add: broadcast, or oneDNN wants another layout
  Shape conv_out_;                   // the convolution's own output shape
  std::string impl_;                 // oneDNN's implementation ("brgconv:avx512_core", "ref:any", ...)
  ConvShape s_;
  bool built_ = false;
  dnnl_util::Operand src_, wei_, dst_;
  memory packed_weights_;  // the constant weights in wei_.inner's layout, when known at plan time
  TapCrop crop_;
  bool product_ = false;        // one matrix product (is_one_product)
  int64_t product_k_ = 0;       // its inner size: C * spatial, or C
  int64_t product_stride_ = 1;  // 1: x is x'; else x' is x[:, :, 0...], elements this far apart
  Tensor product_weights_;      // the constant weights' cropped taps [M, product_k_], when known at plan time
  memory::desc product_x_, product_w_, product_y_;
  dnnl::matmul product_prim_;
  memory::desc bias_;
  dnnl::convolution_forward prim_;
};

class ConvF64 final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const ConvShape s = conv_shape(node_, ctx.input(0), ctx);
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
std::unique_ptr<Kernel> make_f32(const Node& n) { return std::make_unique<ConvDnnl>(n, memory::data_type::f32); }
const KernelRegistrar conv_f32({"", "Conv", 1, kMaxOpset, {DType::Float32}}, make_f32);
const KernelRegistrar conv_bf16(
    {"", "Conv", 1, kMaxOpset, {DType::BFloat16}},
    bf16_kernels_where_supported([](const Node& n) { return std::make_unique<ConvDnnl>(n, memory::data_type::bf16); },
                                 make_f32));
const KernelRegistrar conv_f16({"", "Conv", 1, kMaxOpset, {DType::Float16}}, via_float32(make_f32));

}  // namespace

std::unique_ptr<Kernel> conv::make_conv_f32(const Node& n) { return make_f32(n); }

}  // namespace kiln
