// MaxPool, AveragePool (1-D to 3-D; explicit or automatic padding, ceil_mode, dilations,
// count_include_pad) on oneDNN's pooling_v2, and GlobalAveragePool / GlobalMaxPool on its
// reduction primitive. MaxPool's optional Indices output is computed by a plain loop instead, since
// oneDNN's workspace does not hold ONNX's flat indices. float64 (which oneDNN lacks, and which
// gradient checks run in) runs plain loops.
//
// ai.kiln.MaxPoolChannelsLast / AveragePoolChannelsLast (registered in pool_fused.cpp) pool 2-D
// maps held channels last ([N, H, W, C] in and out), and ai.kiln.GlobalAveragePoolChannelsLast /
// GlobalMaxPoolChannelsLast reduce such maps to [N, C, 1, 1] (channels first again, which for one
// position is the same bytes): the ops of the layout pass (ir/fusion.h). Float32.
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <unordered_map>

#include "core/parallel.h"
#include "kernels/cpu/pool_common.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using dnnl::memory;
using dnnl_util::nchw_of;
using dnnl_util::nhwc_of;
using dnnl_util::tensor_desc;
using dnnl_util::to_dims;

bool is_channels_last(const Node& node) {
  return node.domain == kKilnDomain && node.op_type.size() > 12 &&
         node.op_type.compare(node.op_type.size() - 12, 12, "ChannelsLast") == 0;
}

// The input as [N, C, D1, ...]: a channels-last one (rank 4) permuted back.
TensorMeta channels_first(const Node& node, const TensorMeta& x) {
  if (!is_channels_last(node)) return x;
  if (x.shape.size() != 4)
    throw ShapeError(fmt::format("{}: input {} must have rank 4 ([N, H, W, C])", node.op_type, x.describe()));
  TensorMeta m = x;
  m.shape = nchw_of(x.shape);
  return m;
}

void check_pool_input(const char* op, const TensorMeta& x, size_t max_spatial) {
  if (x.shape.size() < 3)
    throw ShapeError(
        fmt::format("{}: input {} must be [N, C, D1, ...] with at least one spatial dim", op, x.describe()));
  if (x.shape.size() - 2 > max_spatial)
    throw Unsupported(fmt::format("{}: input {} has {} spatial dims; Kiln supports 1 to {}", op, x.describe(),
                                  x.shape.size() - 2, max_spatial));
}

// MaxPool and AveragePool: the shared window arithmetic and oneDNN primitive.
class PoolKernel : public Kernel {
 public:
  PoolKernel(const Node& node, const char* op) : Kernel(node), op_(op), channels_last_(is_channels_last(node)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta x = channels_first(node_, ctx.input(0));
    check_pool_input(op_, x, 3);
    x_ = x.shape;
    dtype_ = x.dtype;
    const Shape spatial(x.shape.begin() + 2, x.shape.end());
    if (!node_.has_attr("kernel_shape"))
      throw InvalidModel(fmt::format("{}: attribute 'kernel_shape' is required", op_));
    const std::vector<int64_t> kernel = node_.attr_ints("kernel_shape");
    if (kernel.size() != spatial.size())
      throw ShapeError(fmt::format("{}: kernel_shape [{}] has {} dims but input {} has {} spatial dims", op_,
                                   fmt::join(kernel, ", "), kernel.size(), x.describe(), spatial.size()));
    for (int64_t k : kernel)
      if (k < 1)
        throw InvalidModel(fmt::format("{}: kernel_shape [{}] must be positive", op_, fmt::join(kernel, ", ")));
    win_ = dnnl_util::make_window(node_, spatial, kernel, true);
    y_ = {x.shape[0], x.shape[1]};
    y_.insert(y_.end(), win_.out.begin(), win_.out.end());
    built_ = false;
    return {TensorMeta{x.dtype, channels_last_ ? nhwc_of(y_) : y_, x.dynamic, Tensor()}};
  }

  void prepare(const InferContext&, const std::vector<TensorMeta>&) override {
    if (dtype_ != DType::Float64) build();
  }

  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (dtype_ == DType::Float64) return compute_f64(ctx.input(0), y);
    if (!built_) build();
    std::unordered_map<int, memory> args;
    dnnl_util::bind(DNNL_ARG_SRC, x_op_, ctx.input(0), args);
    dnnl_util::bind_output(DNNL_ARG_DST, y_op_, y, args);
    dnnl_util::execute(prim_, args, fmt::format("{} pooling", op_));
    dnnl_util::finish_output(y_op_, y, fmt::format("{} output", op_));
    after(y);
  }

 protected:
  virtual dnnl::algorithm algorithm() const = 0;
  virtual void after(Tensor& y) { (void)y; }
  virtual void compute_f64(const Tensor& x, Tensor& y) = 0;

  void build() {
    built_ = true;
    if (numel(y_) == 0) return;
    const memory::data_type dt = dnnl_util::data_type_of(dtype_, op_);
    std::vector<int64_t> dil = win_.dilations;
    for (int64_t& d : dil) d -= 1;  // oneDNN counts the holes between taps
    const std::string what = fmt::format("build {} for input {}{} (kernel [{}])", op_, dtype_name(dtype_),
                                         to_string(x_), fmt::join(win_.kernel, ", "));
    const memory::desc plain_x = tensor_desc(x_, dt, channels_last_), plain_y = tensor_desc(y_, dt, channels_last_);
    auto make = [&](const memory::desc& x, const memory::desc& y) {
      return dnnl_util::checked(what, [&] {
        dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, algorithm(), x, y, to_dims(win_.strides),
                                         to_dims(win_.kernel), to_dims(dil), to_dims(win_.pad_begin),
                                         to_dims(win_.dnnl_pad_end));
        return dnnl::pooling_v2_forward::primitive_desc(d, dnnl_util::engine());
      });
    };
    dnnl::pooling_v2_forward::primitive_desc pd = make(plain_x, plain_y);
    // On CPUs without AVX-512, oneDNN 2.6 pools a plain NCHW tensor with its reference loops
    // ("simple_nchw"), 10-20x slower than its vector code on channel-blocked or channels-last
    // layouts: there the input is reordered into the first such layout oneDNN vectorises.
    for (const memory::format_tag tag : blocked_tags(x_.size())) {
      if (!dnnl_util::is_reference(pd.impl_info_str())) break;
      auto blocked = make(memory::desc(to_dims(x_), dt, tag), memory::desc(to_dims(y_), dt, memory::format_tag::any));
      if (!dnnl_util::is_reference(blocked.impl_info_str())) pd = blocked;
    }
    x_op_ = dnnl_util::operand(plain_x, pd.src_desc(), false);
    y_op_ = dnnl_util::operand(plain_y, pd.dst_desc(), true);
    prim_ = dnnl::pooling_v2_forward(pd);
  }

  // The layouts oneDNN's vector pooling takes, for a 1-D, 2-D or 3-D input: 8 and 16 channels
  // per block (AVX2 and AVX-512 code), then channels last (its integer code).
  static std::vector<memory::format_tag> blocked_tags(size_t rank) {
    using tag = memory::format_tag;
    if (rank == 3) return {tag::nCw8c, tag::nCw16c, tag::nwc};
    if (rank == 4) return {tag::nChw8c, tag::nChw16c, tag::nhwc};
    return {tag::nCdhw8c, tag::nCdhw16c, tag::ndhwc};
  }

  const char* op_;
  bool channels_last_;
  Shape x_, y_;  // as [N, C, D1, ...]
  DType dtype_ = DType::Float32;
  dnnl_util::Window win_;
  bool built_ = false;
  dnnl::pooling_v2_forward prim_;
  dnnl_util::Operand x_op_, y_op_;  // the plain tensors and the layouts the primitive runs in
};

// ---------------------------------------------------------------------------------------------
// MaxPool

// Max and its flat index (ONNX's Indices: row-major over the whole input, or column-major over
// the spatial dims with storage_order=1) by direct loops; spatial dims padded to three.
template <class T>
void max_pool_with_indices(const Tensor& x, const dnnl_util::Window& w, bool column_major, Tensor& y, Tensor& idx) {
  const size_t nsp = w.out.size(), off = 3 - nsp;
  std::vector<int64_t> in(3, 1), out(3, 1), k(3, 1), s(3, 1), d(3, 1), p(3, 0);
  for (size_t i = 0; i < nsp; ++i) {
    in[off + i] = x.shape()[2 + i];
    out[off + i] = w.out[i];
    k[off + i] = w.kernel[i];
    s[off + i] = w.strides[i];
    d[off + i] = w.dilations[i];
    p[off + i] = w.pad_begin[i];
  }
  const int64_t planes = x.dim(0) * x.dim(1), in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
  const T* px = x.data<T>();
  T* py = y.data<T>();
  int64_t* pi = idx.data<int64_t>();
  parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* xp = px + pl * in_plane;
      int64_t o = pl * out_plane;
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2, ++o) {
            T best = std::numeric_limits<T>::lowest();
            int64_t at = -1;
            for (int64_t k0 = 0; k0 < k[0]; ++k0) {
              const int64_t i0 = o0 * s[0] - p[0] + k0 * d[0];
              if (i0 < 0 || i0 >= in[0]) continue;
              for (int64_t k1 = 0; k1 < k[1]; ++k1) {
                const int64_t i1 = o1 * s[1] - p[1] + k1 * d[1];
                if (i1 < 0 || i1 >= in[1]) continue;
                for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                  const int64_t i2 = o2 * s[2] - p[2] + k2 * d[2];
                  if (i2 < 0 || i2 >= in[2]) continue;
                  const int64_t flat = (i0 * in[1] + i1) * in[2] + i2;
                  if (at < 0 || xp[flat] > best) {
                    best = xp[flat];
                    // Column-major is only asked of 1-D and 2-D pools: (h, w) -> w * H + h.
                    at = column_major ? i2 * in[1] + i1 : flat;
                  }
                }
              }
            }
            py[o] = best;
            pi[o] = pl * in_plane + at;
          }
    }
  });
}

class MaxPoolKernel final : public PoolKernel {
 public:
  explicit MaxPoolKernel(const Node& node) : PoolKernel(node, "MaxPool") {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    std::vector<TensorMeta> out = PoolKernel::infer(ctx);
    if (node_.outputs.size() > 1 && !node_.outputs[1].empty()) {
      if (channels_last_) throw InvalidModel(fmt::format("{}: has no Indices output", node_.label()));
      column_major_ = node_.attr_int("storage_order", 0) != 0;
      if (column_major_ && x_.size() > 4)
        throw Unsupported(fmt::format("MaxPool: storage_order=1 (column-major Indices) for the 3-D input {}{}",
                                      dtype_name(dtype_), to_string(x_)));
      with_indices_ = true;
      out.push_back(TensorMeta{DType::Int64, y_, out[0].dynamic, Tensor()});
    }
    return out;
  }
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>& outs) override {
    if (!with_indices_) PoolKernel::prepare(ctx, outs);
  }
  void compute(ComputeContext& ctx) override {
    if (!with_indices_) return PoolKernel::compute(ctx);
    visit_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int8_t> ||
                    std::is_same_v<T, uint8_t>)
        max_pool_with_indices<T>(ctx.input(0), win_, column_major_, ctx.output(0), ctx.output(1));
      else throw Unsupported(fmt::format("MaxPool: {} input", dtype_name(dtype_)));
    });
  }

 protected:
  dnnl::algorithm algorithm() const override { return dnnl::algorithm::pooling_max; }
  void compute_f64(const Tensor& x, Tensor& y) override {
    Tensor scratch = Tensor::empty(DType::Int64, y.shape());  // Indices nobody asked for
    max_pool_with_indices<double>(x, win_, false, y, scratch);
  }

 private:
  bool with_indices_ = false;
  bool column_major_ = false;
};

// ---------------------------------------------------------------------------------------------
// AveragePool

class AveragePoolKernel final : public PoolKernel {
 public:
  explicit AveragePoolKernel(const Node& node) : PoolKernel(node, "AveragePool") {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    std::vector<TensorMeta> out = PoolKernel::infer(ctx);
    if (channels_last_ && include_pad() && win_.extended())
      throw Unsupported(fmt::format("{}: count_include_pad with ceil_mode's extra window", node_.label()));
    return out;
  }

 protected:
  // count_include_pad counts the explicit pads but never ceil_mode's extra partial window (ONNX
  // Runtime's rule). oneDNN's include-padding counts the whole kernel, so with that extra window
  // Kiln averages over the input only and rescales by (taps in input) / (taps in padded input).
  dnnl::algorithm algorithm() const override {
    if (include_pad() && !win_.extended()) return dnnl::algorithm::pooling_avg_include_padding;
    return dnnl::algorithm::pooling_avg_exclude_padding;
  }

  void compute_f64(const Tensor& x, Tensor& y) override {
    const pool::WindowTable t = pool::make_table(Shape(x_.begin() + 2, x_.end()), win_);
    const bool include = include_pad();
    const double* px = x.data<double>();
    double* py = y.data<double>();
    parallel_for(x_[0] * x_[1], 1, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl)
        for (int64_t o = 0; o < t.out_plane; ++o) {
          double sum = 0;
          for (int64_t k = t.start[size_t(o)]; k < t.start[size_t(o) + 1]; ++k)
            sum += px[pl * t.in_plane + t.taps[size_t(k)]];
          py[pl * t.out_plane + o] = sum / pool::avg_divisor(t, o, include);
        }
    });
  }

  void after(Tensor& y) override {
    if (!include_pad() || !win_.extended()) return;
    const std::vector<float> factor = rescale();
    const int64_t plane = static_cast<int64_t>(factor.size());
    float* py = y.data<float>();
    parallel_for(y.dim(0) * y.dim(1), 16, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl)
        for (int64_t i = 0; i < plane; ++i) py[pl * plane + i] *= factor[size_t(i)];
    });
  }

 private:
  bool include_pad() const { return node_.attr_int("count_include_pad", 0) != 0; }

  // Per output position: taps inside the input over taps inside the explicitly padded input.
  std::vector<float> rescale() const {
    std::vector<double> f{1.0};
    for (size_t i = 0; i < win_.out.size(); ++i) {
      const int64_t in = x_[2 + i];
      std::vector<double> next;
      next.reserve(f.size() * size_t(win_.out[i]));
      for (double prev : f)
        for (int64_t o = 0; o < win_.out[i]; ++o) {
          int64_t inside = 0, padded = 0;
          for (int64_t k = 0; k < win_.kernel[i]; ++k) {
            const int64_t pos = o * win_.strides[i] - win_.pad_begin[i] + k * win_.dilations[i];
            inside += pos >= 0 && pos < in;
            padded += pos >= -win_.pad_begin[i] && pos < in + win_.pad_end[i];
          }
          next.push_back(prev * double(inside) / double(padded));
        }
      f = std::move(next);
    }
    return std::vector<float>(f.begin(), f.end());
  }
};

// ---------------------------------------------------------------------------------------------
// GlobalAveragePool, GlobalMaxPool

class GlobalPoolKernel final : public Kernel {
 public:
  GlobalPoolKernel(const Node& node, dnnl::algorithm alg)
      : Kernel(node), alg_(alg), channels_last_(is_channels_last(node)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta x = channels_first(node_, ctx.input(0));
    check_pool_input(node_.op_type.c_str(), x, DNNL_MAX_NDIMS - 2);
    x_ = x.shape;
    dtype_ = x.dtype;
    y_ = x.shape;
    std::fill(y_.begin() + 2, y_.end(), 1);
    built_ = false;
    return {TensorMeta{x.dtype, y_, x.dynamic, Tensor()}};
  }
  void prepare(const InferContext&, const std::vector<TensorMeta>&) override {
    if (dtype_ != DType::Float64) build();
  }
  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (numel(x_) == 0)
      throw ShapeError(
          fmt::format("{}: input {}{} has an empty spatial extent", node_.op_type, dtype_name(dtype_), to_string(x_)));
    if (dtype_ == DType::Float64) return compute_f64(ctx.input(0), y);
    // A 1x1 (or 1-element) plane is its own mean and max; oneDNN rejects a reduction that reduces
    // nothing (src dims == dst dims), which ResNet's global pool on small images asks for.
    if (numel(x_) == numel(y_)) {
      std::memcpy(y.raw_data(), ctx.input(0).raw_data(), y.nbytes());
      return;
    }
    if (!built_) build();
    dnnl_util::execute(
        prim_,
        {{DNNL_ARG_SRC, dnnl_util::memory_of(tensor_desc(x_, memory::data_type::f32, channels_last_), ctx.input(0))},
         {DNNL_ARG_DST, dnnl_util::memory_of(tensor_desc(y_, memory::data_type::f32, channels_last_), y)}},
        node_.op_type);
  }

 private:
  void build() {
    built_ = true;
    if (numel(x_) == 0 || numel(x_) == numel(y_)) return;
    const std::string what = fmt::format("build {} for input float{}", node_.op_type, to_string(x_));
    if (channels_last_) {  // oneDNN's reduction of channels-last maps is its reference loop; its pooling is not
      const memory::desc x = tensor_desc(x_, memory::data_type::f32, true),
                         y = tensor_desc(y_, memory::data_type::f32, true);
      const bool mean = alg_ == dnnl::algorithm::reduction_mean;
      prim_ = dnnl_util::checked(what, [&] {
        dnnl::pooling_v2_forward::desc d(
            dnnl::prop_kind::forward_inference,
            mean ? dnnl::algorithm::pooling_avg_exclude_padding : dnnl::algorithm::pooling_max, x, y, {1, 1},
            {x_[2], x_[3]}, {0, 0}, {0, 0}, {0, 0});
        return dnnl::pooling_v2_forward(dnnl::pooling_v2_forward::primitive_desc(d, dnnl_util::engine()));
      });
      return;
    }
    prim_ = dnnl_util::checked(what, [&] {
      dnnl::reduction::desc d(alg_, dnnl_util::plain_desc(x_), dnnl_util::plain_desc(y_), 0.f, 0.f);
      return dnnl::reduction(dnnl::reduction::primitive_desc(d, dnnl_util::engine()));
    });
  }

  // Mean or max over each (batch, channel) plane.
  void compute_f64(const Tensor& x, Tensor& y) const {
    const int64_t planes = y.numel(), plane = x.numel() / planes;
    const bool mean = alg_ == dnnl::algorithm::reduction_mean;
    const double* px = x.data<double>();
    double* py = y.data<double>();
    parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const double* p = px + pl * plane;
        double acc = mean ? 0.0 : p[0];
        for (int64_t i = 0; i < plane; ++i) acc = mean ? acc + p[i] : std::max(acc, p[i]);
        py[pl] = mean ? acc / double(plane) : acc;
      }
    });
  }

  dnnl::algorithm alg_;
  bool channels_last_;
  DType dtype_ = DType::Float32;
  Shape x_, y_;  // as [N, C, D1, ...]
  bool built_ = false;
  dnnl::primitive prim_;  // a reduction, or (channels last) a pooling over the whole map
};

const KernelRegistrar max_pool_f32({"", "MaxPool", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                   [](const Node& n) { return std::make_unique<MaxPoolKernel>(n); });
const KernelRegistrar max_pool_i8({"", "MaxPool", 12, kMaxOpset, {DType::Int8, DType::Uint8}},
                                  [](const Node& n) { return std::make_unique<MaxPoolKernel>(n); });
const KernelRegistrar avg_pool_f32({"", "AveragePool", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                   [](const Node& n) { return std::make_unique<AveragePoolKernel>(n); });
const KernelRegistrar global_avg_f32({"", "GlobalAveragePool", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                     [](const Node& n) {
                                       return std::make_unique<GlobalPoolKernel>(n, dnnl::algorithm::reduction_mean);
                                     });
const KernelRegistrar global_max_f32({"", "GlobalMaxPool", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                     [](const Node& n) {
                                       return std::make_unique<GlobalPoolKernel>(n, dnnl::algorithm::reduction_max);
                                     });

}  // namespace

std::unique_ptr<Kernel> pool::make_max_pool(const Node& n) { return std::make_unique<MaxPoolKernel>(n); }
std::unique_ptr<Kernel> pool::make_average_pool(const Node& n) { return std::make_unique<AveragePoolKernel>(n); }
std::unique_ptr<Kernel> pool::make_global_pool(const Node& n, bool mean) {
  return std::make_unique<GlobalPoolKernel>(n, mean ? dnnl::algorithm::reduction_mean : dnnl::algorithm::reduction_max);
}

}  // namespace kiln
