// ai.kiln.ConvGrad: the gradients of Conv (dX, dW, dB) from the output gradient dY, the input X and
// the weight W. float32 runs oneDNN's convolution_backward_data / _weights (built once per planned
// shape); float64 runs the direct loops of conv_common.h. Also the oneDNN backward runner that
// ConvTransposeGrad shares.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/scratch.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/low_precision.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace conv {

using dnnl::memory;
using dnnl_util::to_dims;

std::array<bool, 3> output_mask(const Node& node) {
  const std::vector<int64_t> mask = node.attr_ints("output_mask", {1, 1, 1});
  if (mask.size() != 3)
    throw InvalidModel(
        fmt::format("attribute 'output_mask' = [{}] must have 3 values (dX, dW, dB)", fmt::join(mask, ", ")));
  std::array<bool, 3> out{};
  for (size_t i = 0; i < 3; ++i) out[i] = mask[i] != 0 && i < node.outputs.size() && !node.outputs[i].empty();
  return out;
}

bool DnnlConv::build(const Problem& pr, bool forward, bool data, bool weights, bool bias, memory::data_type dt,
                     bool native_only, ChannelsLast layout) {
  has_bias_ = weights && bias;
  Shape wdims = pr.w;
  if (pr.group > 1) {  // oneDNN's grouped weights [G, M/G, C/G, k...] are ONNX's [M, C/G, k...] split.
    wdims[0] = pr.w[0] / pr.group;
    wdims.insert(wdims.begin(), pr.group);
  }
  // Taps that read only padding are left out (conv_common.h): the primitives read a contiguous
  // copy of the weights' remaining taps and write those of dW, which expand_taps puts in place.
  const std::vector<int64_t> kernel(pr.w.begin() + 2, pr.w.end()), out(pr.y.begin() + 2, pr.y.end());
  crop_ = crop_taps(pr.x, kernel, pr.strides, pr.dilations, pr.pad_begin, pr.pad_end, out);
  w_shape_ = cropped_w_shape_ = pr.w;
  if (crop_.any) {
    const size_t lead = wdims.size() - kernel.size();
    for (size_t i = 0; i < kernel.size(); ++i) {
      wdims[lead + i] = crop_.last[i] - crop_.first[i] + 1;
      cropped_w_shape_[2 + i] = wdims[lead + i];
    }
  }
  dtype_ = dt == memory::data_type::bf16 ? DType::BFloat16 : DType::Float32;
  wp_ = dnnl_util::plain_desc(wdims, dt);
  xp_ = dnnl_util::tensor_desc(pr.x, dt, layout.x);
  yp_ = dnnl_util::tensor_desc(pr.y, dt, layout.y);
  bias_ = dnnl_util::plain_desc({pr.w[0]}, dt);
  auto any = [&](const Shape& s) { return memory::desc(to_dims(s), dt, memory::format_tag::any); };
  // Channels-last activations: oneDNN's kernels for that layout read and write them in place (on
  // ResNet-18 its backward-data and backward-weights JIT kernels take nhwc as they are); where it
  // has only reference loops for the combination, it picks its layouts and Kiln's are reordered.
  if (layout.any()) {
    try {
      make(pr, forward, data, weights, dt, xp_, yp_);
      if (!any_reference()) return true;
    } catch (const dnnl::error&) {
      // no kernel for these layouts: oneDNN's own below
    }
  }
  try {
    make(pr, forward, data, weights, dt, blocked_input(pr.x[1]) ? any(pr.x) : xp_, any(pr.y));
  } catch (const dnnl::error&) {
    return false;  // no oneDNN implementation for this geometry: the direct loops run it
  }
  return !(native_only && any_reference());
}

bool DnnlConv::any_reference() const {
  return std::any_of(impls_.begin(), impls_.end(),
                     [](const std::string& i) { return dnnl_util::is_reference(i.c_str()); });
}

void DnnlConv::make(const Problem& pr, bool forward, bool data, bool weights, memory::data_type dt,
                    const memory::desc& xa, const memory::desc& ya) {
  impls_.clear();
  const memory::desc wa(wp_.dims(), dt, memory::format_tag::any);
  std::vector<int64_t> dil = pr.dilations;
  for (int64_t& d : dil) d -= 1;  // oneDNN counts the holes between taps
  const auto strides = to_dims(pr.strides), dilations = to_dims(dil), pl = to_dims(crop_.pad_begin),
             pr_ = to_dims(crop_.pad_end);
  const dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, xa,
                                           wa, has_bias_ ? bias_ : memory::desc(), ya, strides, dilations, pl, pr_);
  const dnnl::convolution_forward::primitive_desc hint(fd, dnnl_util::engine());
  if (forward) {
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, xa,
                                            wa, ya, strides, dilations, pl, pr_);
    const dnnl::convolution_forward::primitive_desc pd(d, dnnl_util::engine());
    impls_.emplace_back(pd.impl_info_str());
    fw_x_ = dnnl_util::operand(xp_, pd.src_desc(), false);
    fw_w_ = dnnl_util::operand(wp_, pd.weights_desc(), false);
    fw_y_ = dnnl_util::operand(yp_, pd.dst_desc(), true);
    forward_prim_ = dnnl::convolution_forward(pd);
  }
  if (data) {
    const dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, xa, wa, ya, strides, dilations,
                                                  pl, pr_);
    const dnnl::convolution_backward_data::primitive_desc pd(d, dnnl_util::engine(), hint);
    impls_.emplace_back(pd.impl_info_str());
    bd_dy_ = dnnl_util::operand(yp_, pd.diff_dst_desc(), false);
    bd_w_ = dnnl_util::operand(wp_, pd.weights_desc(), false);
    bd_dx_ = dnnl_util::operand(xp_, pd.diff_src_desc(), true);
    data_prim_ = dnnl::convolution_backward_data(pd);
  }
  if (weights) {
    const dnnl::convolution_backward_weights::desc d =
        has_bias_ ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, xa, wa, bias_, ya,
                                                             strides, dilations, pl, pr_)
                  : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, xa, wa, ya, strides,
                                                             dilations, pl, pr_);
    const dnnl::convolution_backward_weights::primitive_desc pd(d, dnnl_util::engine(), hint);
    impls_.emplace_back(pd.impl_info_str());
    bw_x_ = dnnl_util::operand(xp_, pd.src_desc(), false);
    bw_dy_ = dnnl_util::operand(yp_, pd.diff_dst_desc(), false);
    bw_dw_ = dnnl_util::operand(wp_, pd.diff_weights_desc(), true);
    weights_prim_ = dnnl::convolution_backward_weights(pd);
  }
}

// A tensor of `shape` in per-call scratch memory (core/scratch.h).
Tensor scratch_tensor(DType dtype, const Shape& shape) {
  return Tensor::wrap(scratch_take(std::max<size_t>(1, static_cast<size_t>(numel(shape)) * dtype_size(dtype))), dtype,
                      shape);
}

Tensor DnnlConv::kept_taps(const Tensor& w) const {
  if (!crop_.any) return w;
  Tensor out = scratch_tensor(dtype_, cropped_w_shape_);
  if (dtype_ == DType::Float32) copy_taps(w.data<float>(), w_shape_, crop_, out.data<float>());
  else copy_taps(static_cast<const uint16_t*>(w.raw_data()), w_shape_, crop_, static_cast<uint16_t*>(out.raw_data()));
  return out;
}

void DnnlConv::forward(const Tensor& x, const Tensor& w, Tensor& y) {
  std::unordered_map<int, memory> args;
  dnnl_util::bind(DNNL_ARG_SRC, fw_x_, x, args);
  dnnl_util::bind(DNNL_ARG_WEIGHTS, fw_w_, kept_taps(w), args);
  dnnl_util::bind_output(DNNL_ARG_DST, fw_y_, y, args);
  dnnl_util::execute(forward_prim_, args, "convolution");
  dnnl_util::finish_output(fw_y_, y, "the convolution output");
}

void DnnlConv::data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  std::unordered_map<int, memory> args;
  dnnl_util::bind(DNNL_ARG_DIFF_DST, bd_dy_, dy, args);
  dnnl_util::bind(DNNL_ARG_WEIGHTS, bd_w_, kept_taps(w), args);
  dnnl_util::bind_output(DNNL_ARG_DIFF_SRC, bd_dx_, dx, args);
  dnnl_util::execute(data_prim_, args, "convolution backward data");
  dnnl_util::finish_output(bd_dx_, dx, "the input gradient");
}

void DnnlConv::weights(const Tensor& x, const Tensor& dy, Tensor& dw_out, Tensor* db, bool dy_from_data) {
  Tensor dw = crop_.any ? scratch_tensor(dtype_, cropped_w_shape_) : dw_out;
  std::unordered_map<int, memory> args;
  dnnl_util::bind(DNNL_ARG_SRC, bw_x_, x, args);
  if (dy_from_data && bd_dy_.reordered() && bw_dy_.reordered() && bd_dy_.inner == bw_dy_.inner)
    args[DNNL_ARG_DIFF_DST] = bd_dy_.buffer;
  else dnnl_util::bind(DNNL_ARG_DIFF_DST, bw_dy_, dy, args);
  dnnl_util::bind_output(DNNL_ARG_DIFF_WEIGHTS, bw_dw_, dw, args);
  if (has_bias_ && db) args[DNNL_ARG_DIFF_BIAS] = dnnl_util::memory_of(bias_, *db);
  dnnl_util::execute(weights_prim_, args, "convolution backward weights");
  dnnl_util::finish_output(bw_dw_, dw, "the weight gradient");
  if (!crop_.any) return;
  if (dtype_ == DType::Float32) expand_taps(dw.data<float>(), w_shape_, crop_, dw_out.data<float>());
  else
    expand_taps(static_cast<const uint16_t*>(dw.raw_data()), w_shape_, crop_,
                static_cast<uint16_t*>(dw_out.raw_data()));
}

}  // namespace conv

namespace {

// Whether Conv is one matrix product over its whole input (conv.cpp's one_product): one output
// position in every spatial dim whose cropped window covers the input exactly (a 3x3 kernel over a
// 1x1 map with padding 1, or over a 2x2 map with stride 2), group 1.
bool whole_input_product(const conv::Problem& p, const conv::TapCrop& c) {
  if (p.group != 1) return false;
  for (size_t i = 0; i + 2 < p.x.size(); ++i) {
    const int64_t taps = c.last[i] - c.first[i] + 1;
    if (p.y[i + 2] != 1 || c.pad_begin[i] != 0 || taps != p.x[i + 2] || (taps > 1 && p.dilations[i] != 1)) return false;
  }
  return true;
}

// db[m] = sum of dy over its rows, dy channels last ([rows, M]).
void channel_sum_rows(const Shape& nhwc, const float* dy, float* db) {
  const int64_t m = nhwc[3], rows = m == 0 ? 0 : numel(nhwc) / m;
  std::vector<double> acc(size_t(m), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < m; ++k) acc[size_t(k)] += double(dy[r * m + k]);
  for (int64_t k = 0; k < m; ++k) db[k] = static_cast<float>(acc[size_t(k)]);
}

// (dY, X, W) -> (dX, dW, dB) of Y = Conv(X, W, B) with Conv's attributes; auto_pad is resolved
// here, against X's shape, exactly as the forward kernel does. bfloat16 (low_precision.h) runs
// oneDNN's bfloat16 backward passes where it has them. ai.kiln.ConvGradChannelsLast: the same
// with dY (and, input_channels_last 1, X and dX) held channels last, float32 2-D maps.
class ConvGradKernel final : public NativeBf16Kernel {
 public:
  explicit ConvGradKernel(const Node& node)
      : NativeBf16Kernel(node),
        layout_{node.op_type == "ConvGradChannelsLast" && node.attr_int("input_channels_last", 1) != 0,
                node.op_type == "ConvGradChannelsLast"} {}

  // bfloat16: oneDNN has bfloat16 backward passes (not its reference loops) for these shapes, and
  // dW is asked for whenever dB is (dB alone is summed by a float loop).
  bool supported() override {
    build();
    return use_dnnl_ && (mask_[1] || !mask_[2]);
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    TensorMeta dy = ctx.input(0), x = ctx.input(1);
    const TensorMeta& w = ctx.input(2);
    const Shape x_shape = x.shape;
    if (layout_.any()) {  // the problem in ONNX's layout
      if (dy.shape.size() != 4 || x.shape.size() != 4 || dy.dtype != DType::Float32)
        throw ShapeError(fmt::format("{}: dY {} and X {} must be float32 2-D maps (rank 4)", node_.label(),
                                     dy.describe(), x.describe()));
      dy.shape = dnnl_util::nchw_of(dy.shape);
      if (layout_.x) x.shape = dnnl_util::nchw_of(x.shape);
    }
    if (dy.dtype != x.dtype || w.dtype != x.dtype)
      throw TypeError(
          fmt::format("ConvGrad: dY {}, X {} and W {} must share a dtype", dy.describe(), x.describe(), w.describe()));
    if (x.shape.size() < 3 || x.shape.size() > 5 || w.shape.size() != x.shape.size())
      throw ShapeError(fmt::format("ConvGrad: X {} must be [N, C, D1..D3] and W {} [M, C/group, k...] of the same rank",
                                   x.describe(), w.describe()));
    p_ = conv::Problem{};
    p_.x = x.shape;
    p_.w = w.shape;
    p_.group = node_.attr_int("group", 1);
    if (p_.group < 1 || x.shape[1] != w.shape[1] * p_.group || w.shape[0] % p_.group != 0)
      throw ShapeError(
          fmt::format("ConvGrad: X {} and W {} do not fit group {}", x.describe(), w.describe(), p_.group));
    const std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
    const dnnl_util::Window win =
        dnnl_util::make_window(node_, Shape(x.shape.begin() + 2, x.shape.end()), kernel, false);
    p_.y = {x.shape[0], w.shape[0]};
    p_.y.insert(p_.y.end(), win.out.begin(), win.out.end());
    if (dy.shape != p_.y)
      throw ShapeError(fmt::format("ConvGrad: dY {} must have the shape {} of Conv(X {}, W {})", dy.describe(),
                                   to_string(p_.y), x.describe(), w.describe()));
    p_.strides = win.strides;
    p_.dilations = win.dilations;
    p_.pad_begin = win.pad_begin;
    p_.pad_end = win.pad_end;
    mask_ = conv::output_mask(node_);
    dtype_ = x.dtype;
    built_ = false;
    // Outputs not asked for are empty, so the planner reserves nothing for them.
    const auto meta = [&](size_t i, const Shape& s) {
      return TensorMeta{x.dtype, mask_[i] ? s : Shape{0}, dy.dynamic, Tensor()};
    };
    return {meta(0, x_shape), meta(1, w.shape), meta(2, {w.shape[0]})};
  }

  void prepare(const InferContext&, const std::vector<TensorMeta>&) override {
    if (!built_) build();
  }

  void compute(ComputeContext& ctx) override {
    if (!built_) build();
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    const bool empty = numel(p_.y) == 0 || numel(p_.x) == 0;
    if (empty) {  // nothing flows: zero gradients
      for (size_t i = 0; i < 3; ++i)
        if (mask_[i]) std::memset(ctx.output(i).raw_data(), 0, ctx.output(i).nbytes());
      return;
    }
    if (product_) return product_grad(dy.data<float>(), x.data<float>(), w.data<float>(), ctx);
    if (use_dnnl_) {
      if (mask_[0]) dnnl_.data(dy, w, ctx.output(0));
      if (mask_[1]) dnnl_.weights(x, dy, ctx.output(1), mask_[2] ? &ctx.output(2) : nullptr, mask_[0]);
      if (mask_[2] && !mask_[1]) {
        if (layout_.y) channel_sum_rows(dy.shape(), dy.data<float>(), ctx.output(2).data<float>());
        else conv::channel_sum(p_.y, dy.data<float>(), ctx.output(2).data<float>());
      }
      return;
    }
    if (layout_.any())
      throw Unsupported(fmt::format("{}: oneDNN has no convolution for dY {} and X {}", node_.label(), to_string(p_.y),
                                    to_string(p_.x)));
    visit_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (mask_[0]) conv::backward_data_direct<T>(p_, dy.data<T>(), w.data<T>(), ctx.output(0).data<T>());
        if (mask_[1]) conv::backward_weights_direct<T>(p_, x.data<T>(), dy.data<T>(), ctx.output(1).data<T>());
        if (mask_[2]) conv::channel_sum<T>(p_.y, dy.data<T>(), ctx.output(2).data<T>());
      } else {
        throw Unsupported(fmt::format("ConvGrad: {} inputs (float32 and float64 are supported)", dtype_name(dtype_)));
      }
    });
  }

 private:
  // The whole-input product (whole_input_product), y[N, M] = x'[N, K] w'[M, K]^T with x' = x as
  // [N, K] in its own element order and w' the cropped taps in that order: dX' = dY w',
  // dW' = dY^T x', dB = dY summed over N. oneDNN's convolution kernels took 3 ms for ResNet-18's
  // 3x3 convolutions over 1x1 maps at batch 32 (both passes); the products take a few tenths.
  void product_grad(const float* dy, const float* x, const float* w, ComputeContext& ctx) {
    const int64_t n = p_.x[0], m = p_.w[0], k = numel(p_.x) / n;
    const auto take = [](int64_t count) {
      return static_cast<float*>(scratch_take(static_cast<size_t>(count) * sizeof(float)));
    };
    if (mask_[0]) {
      float* wc = take(m * k);
      if (layout_.x) conv::copy_taps_channels_last(w, p_.w, crop_, wc);
      else conv::copy_taps(w, p_.w, crop_, wc);
      blas::sgemm({false, false, n, k, m, m, k, k}, 1.f, dy, wc, 0.f, ctx.output(0).data<float>());
    }
    if (mask_[1]) {
      float* dwc = take(m * k);
      blas::sgemm({true, false, m, k, n, m, k, k}, 1.f, dy, x, 0.f, dwc);
      if (layout_.x) conv::expand_taps_channels_last(dwc, p_.w, crop_, ctx.output(1).data<float>());
      else conv::expand_taps(dwc, p_.w, crop_, ctx.output(1).data<float>());
    }
    if (mask_[2]) channel_sum_rows({n, 1, 1, m}, dy, ctx.output(2).data<float>());
  }

  void build() {
    built_ = true;
    const std::vector<int64_t> kernel(p_.w.begin() + 2, p_.w.end()), out(p_.y.begin() + 2, p_.y.end());
    crop_ = conv::crop_taps(p_.x, kernel, p_.strides, p_.dilations, p_.pad_begin, p_.pad_end, out);
    product_ = dtype_ == DType::Float32 && numel(p_.y) > 0 && whole_input_product(p_, crop_);
    if (product_) return;
    const bool low = dtype_ == DType::BFloat16;
    use_dnnl_ = (dtype_ == DType::Float32 || low) && numel(p_.y) > 0 && numel(p_.x) > 0 &&
                dnnl_.build(p_, false, mask_[0], mask_[1], mask_[1] && mask_[2],
                            low ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32, low, layout_);
  }

  const conv::ChannelsLast layout_;
  conv::Problem p_;
  std::array<bool, 3> mask_{};
  DType dtype_ = DType::Float32;
  bool built_ = false, use_dnnl_ = false;
  bool product_ = false;  // product_grad runs it
  conv::TapCrop crop_;
  conv::DnnlConv dnnl_;
};

std::unique_ptr<Kernel> make(const Node& n) { return std::make_unique<ConvGradKernel>(n); }
const KernelRegistrar reg({kKilnDomain, "ConvGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}}, make);
const KernelRegistrar reg_bf16(
    {kKilnDomain, "ConvGrad", 1, kMaxOpset, {DType::BFloat16}},
    bf16_kernels_where_supported([](const Node& n) { return std::make_unique<ConvGradKernel>(n); }, make));
const KernelRegistrar reg_f16({kKilnDomain, "ConvGrad", 1, kMaxOpset, {DType::Float16}}, via_float32(make));
const KernelRegistrar reg_channels_last({kKilnDomain, "ConvGradChannelsLast", 1, kMaxOpset, {DType::Float32}}, make);
const OpDocRegistrar doc(
    {kKilnDomain,
     "ConvGrad",
     "Gradients of Conv with respect to its input, weight and bias. Attributes: those of the Conv "
     "(group, strides, dilations, pads, auto_pad, kernel_shape) and output_mask (3 ints, default "
     "[1, 1, 1]); an output masked off or left unnamed is not computed and has shape [0].",
     {"dY: gradient of the Conv output Y, [N, M, out...]", "X: the Conv input, [N, C, in...]",
      "W: the Conv weight, [M, C/group, k...]"},
     {"dX: gradient of X, X's shape", "dW: gradient of W, W's shape", "dB: gradient of the bias, [M]"},
     "with Y[n, m, o] = B[m] + sum_{c in group(m), k} X[n, c, o * s - p + k * d] W[m, c, k]: "
     "dX[n, c, i] = sum_{m, k, o : o*s - p + k*d = i} dY[n, m, o] W[m, c, k]; "
     "dW[m, c, k] = sum_{n, o} dY[n, m, o] X[n, c, o*s - p + k*d]; dB[m] = sum_{n, o} dY[n, m, o]"});

const OpDocRegistrar doc_channels_last(
    {kKilnDomain,
     "ConvGradChannelsLast",
     "ConvGrad over 2-D maps held channels last (the Session's layout pass, ir/fusion.h).",
     {"dY: [N, H', W', M]", "X: [N, H, W, C] (input_channels_last 1, the default) or [N, C, H, W] (0)",
      "W: [M, C/group, kH, kW]"},
     {"dX: X's shape and layout", "dW: W's shape", "dB: [M]"},
     "ConvGrad's attributes and formulas, plus input_channels_last. Float32."});

}  // namespace
}  // namespace kiln
