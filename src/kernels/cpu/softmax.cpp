// Softmax and LogSoftmax on oneDNN's softmax_v2 (accurate: max-subtracted), and Hardmax (a one-hot
// of the first maximum) by a plain loop. Opset 13 normalises along one axis (default -1); opsets
// 1-12 flatten the input to 2-D at `axis` (default 1) and normalise each row, so they are
// registered separately.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_common.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class SoftmaxF32 final : public Kernel {
 public:
  SoftmaxF32(const Node& node, dnnl::algorithm alg, bool flatten) : Kernel(node), alg_(alg), flatten_(flatten) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const int64_t attr = node_.attr_int("axis", flatten_ ? 1 : -1);
    // Opsets 1-12 also accept axis == rank: the flattening then makes every element its own row.
    const int64_t axis = attr < 0 ? attr + rank : attr;
    if (rank > 0 && (axis < 0 || axis > (flatten_ ? rank : rank - 1)))
      throw ShapeError(fmt::format("{}: axis {} is out of range for input float{} (rank {})", node_.op_type, attr,
                                   to_string(x.shape), rank));
    // A scalar is a one-element vector: softmax 1, log-softmax 0.
    if (rank == 0) {
      view_ = {1};
      axis_ = 0;
    } else if (flatten_) {
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= x.shape[size_t(i)];
      view_ = {outer, inner};
      axis_ = 1;
    } else {
      view_ = x.shape;
      axis_ = axis;
    }
    if (view_.size() > DNNL_MAX_NDIMS)
      throw Unsupported(
          fmt::format("{}: input float{} has more than {} dims", node_.op_type, to_string(x.shape), DNNL_MAX_NDIMS));
    built_ = false;
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void prepare(const InferContext&, const std::vector<TensorMeta>&) override { build(); }

  void compute(ComputeContext& ctx) override {
    if (!built_) build();
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    const dnnl::memory::desc d = dnnl_util::plain_desc(view_);
    dnnl_util::execute(
        prim_, {{DNNL_ARG_SRC, dnnl_util::memory_of(d, ctx.input(0))}, {DNNL_ARG_DST, dnnl_util::memory_of(d, y)}},
        node_.op_type);
  }

 private:
  void build() {
    built_ = true;
    if (numel(view_) == 0) return;
    prim_ = dnnl_util::checked(
        fmt::format("build {} over axis {} of float{}", node_.op_type, axis_, to_string(view_)), [&] {
          const dnnl::memory::desc md = dnnl_util::plain_desc(view_);
          dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg_, md, md, static_cast<int>(axis_));
          return dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(d, dnnl_util::engine()));
        });
  }

  dnnl::algorithm alg_;
  bool flatten_;
  Shape view_;
  int64_t axis_ = 0;
  bool built_ = false;
  dnnl::softmax_v2_forward prim_;
};

KernelRegistrar reg(const char* op, int64_t since, int64_t end, dnnl::algorithm alg) {
  const bool flatten = since < 13;
  return KernelRegistrar({"", op, since, end, {DType::Float32}},
                         [alg, flatten](const Node& n) { return std::make_unique<SoftmaxF32>(n, alg, flatten); });
}

// Hardmax: 1 at the first maximum of each [outer, axis, inner] line, 0 elsewhere.
// A tensor seen as outer x len x inner lines along the normalised axis (opsets 1-12: the whole
// flattened row from `axis` on is one line).
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
};

Lines lines_of(const TensorMeta& x, int64_t attr, bool flatten, const char* op) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = attr < 0 ? attr + rank : attr;
  if (axis < 0 || axis > (flatten ? rank : rank - 1) || rank == 0)
    throw ShapeError(fmt::format("{}: axis {} is out of range for input {}{} (rank {})", op, attr, dtype_name(x.dtype),
                                 to_string(x.shape), rank));
  Lines l;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t d = x.shape[size_t(i)];
    if (i < axis) l.outer *= d;
    else if (i == axis || flatten) l.len *= d;
    else l.inner *= d;
  }
  return l;
}

class HardmaxKernel final : public Kernel {
 public:
  HardmaxKernel(const Node& node, bool flatten) : Kernel(node), flatten_(flatten) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    lines_ = lines_of(x, node_.attr_int("axis", flatten_ ? 1 : -1), flatten_, "Hardmax");
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>)
        run<T>(ctx.input(0).data<T>(), y.data<T>());
      else throw Unsupported(fmt::format("Hardmax: {} input", dtype_name(y.dtype())));
    });
  }

 private:
  template <class T>
  void run(const T* x, T* y) const {
    const int64_t len = lines_.len, inner = lines_.inner;
    parallel_for(lines_.outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, len)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t line = b; line < e; ++line) {
                     const int64_t base = (line / inner) * len * inner + line % inner;
                     int64_t best = 0;
                     for (int64_t i = 1; i < len; ++i)
                       if (to_double(x[base + i * inner]) > to_double(x[base + best * inner])) best = i;
                     for (int64_t i = 0; i < len; ++i) y[base + i * inner] = from_double<T>(i == best ? 1.0 : 0.0);
                   }
                 });
  }

  bool flatten_;
  Lines lines_;
};

// Softmax / LogSoftmax in double for float64 inputs (oneDNN has no f64 softmax).
class SoftmaxF64 final : public Kernel {
 public:
  SoftmaxF64(const Node& node, bool log, bool flatten) : Kernel(node), log_(log), flatten_(flatten) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    lines_ = lines_of(x, node_.attr_int("axis", flatten_ ? 1 : -1), flatten_, node_.op_type.c_str());
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const double* x = ctx.input(0).data<double>();
    double* y = ctx.output(0).data<double>();
    const int64_t len = lines_.len, inner = lines_.inner;
    parallel_for(lines_.outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, len)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t line = b; line < e; ++line) {
                     const int64_t base = (line / inner) * len * inner + line % inner;
                     double m = -std::numeric_limits<double>::infinity();
                     for (int64_t i = 0; i < len; ++i) m = std::max(m, x[base + i * inner]);
                     double sum = 0;
                     for (int64_t i = 0; i < len; ++i) sum += std::exp(x[base + i * inner] - m);
                     const double log_sum = std::log(sum);
                     for (int64_t i = 0; i < len; ++i) {
                       const double z = x[base + i * inner] - m;
                       y[base + i * inner] = log_ ? z - log_sum : std::exp(z) / sum;
                     }
                   }
                 });
  }

 private:
  bool log_, flatten_;
  Lines lines_;
};

const KernelRegistrar softmax64_1({"", "Softmax", 1, 12, {DType::Float64}},
                                  [](const Node& n) { return std::make_unique<SoftmaxF64>(n, false, true); });
const KernelRegistrar softmax64_13({"", "Softmax", 13, kMaxOpset, {DType::Float64}},
                                   [](const Node& n) { return std::make_unique<SoftmaxF64>(n, false, false); });
const KernelRegistrar log_softmax64_1({"", "LogSoftmax", 1, 12, {DType::Float64}},
                                      [](const Node& n) { return std::make_unique<SoftmaxF64>(n, true, true); });
const KernelRegistrar log_softmax64_13({"", "LogSoftmax", 13, kMaxOpset, {DType::Float64}},
                                       [](const Node& n) { return std::make_unique<SoftmaxF64>(n, true, false); });

const KernelRegistrar hardmax_1({"", "Hardmax", 1, 12, {DType::Float32, DType::Float64, DType::Float16}},
                                [](const Node& n) { return std::make_unique<HardmaxKernel>(n, true); });
const KernelRegistrar hardmax_13({"", "Hardmax", 13, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
                                 [](const Node& n) { return std::make_unique<HardmaxKernel>(n, false); });

const KernelRegistrar softmax_1 = reg("Softmax", 1, 12, dnnl::algorithm::softmax_accurate);
const KernelRegistrar softmax_13 = reg("Softmax", 13, kMaxOpset, dnnl::algorithm::softmax_accurate);
const KernelRegistrar log_softmax_1 = reg("LogSoftmax", 1, 12, dnnl::algorithm::softmax_log);
const KernelRegistrar log_softmax_13 = reg("LogSoftmax", 13, kMaxOpset, dnnl::algorithm::softmax_log);

}  // namespace
}  // namespace kiln
