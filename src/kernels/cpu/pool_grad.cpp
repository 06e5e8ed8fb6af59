// ai.kiln.MaxPoolGrad and ai.kiln.AveragePoolGrad: the input gradients of MaxPool and AveragePool
// from the output gradient and the input, with the forward's attributes (kernel_shape, strides,
// pads, auto_pad, dilations, ceil_mode, count_include_pad). MaxPool's argmax is recomputed from X
// (the first maximum of each window, as the forward's Indices), so the graph needs no Indices
// output. Plain loops over a window table, threads split the (batch, channel) planes.
#include <fmt/format.h>

#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/pool_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

std::string describe(const TensorMeta& m) { return fmt::format("{}{}", dtype_name(m.dtype), to_string(m.shape)); }

class PoolGradKernel : public Kernel {
 public:
  PoolGradKernel(const Node& node, const char* op) : Kernel(node), op_(op) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& dy = ctx.input(0);
    const TensorMeta& x = ctx.input(1);
    if (x.shape.size() < 3 || x.shape.size() > 5)
      throw ShapeError(fmt::format("{}: X {} must be [N, C, D1..D3]", op_, describe(x)));
    if (!node_.has_attr("kernel_shape"))
      throw InvalidModel(fmt::format("{}: attribute 'kernel_shape' is required", op_));
    const Shape spatial(x.shape.begin() + 2, x.shape.end());
    const std::vector<int64_t> kernel = node_.attr_ints("kernel_shape");
    if (kernel.size() != spatial.size())
      throw ShapeError(
          fmt::format("{}: kernel_shape [{}] does not fit X {}", op_, fmt::join(kernel, ", "), describe(x)));
    const dnnl_util::Window win = dnnl_util::make_window(node_, spatial, kernel, true);
    Shape y{x.shape[0], x.shape[1]};
    y.insert(y.end(), win.out.begin(), win.out.end());
    if (dy.shape != y || dy.dtype != x.dtype)
      throw ShapeError(fmt::format("{}: dY {} must be {}{}, the pooled shape of X {}", op_, describe(dy),
                                   dtype_name(x.dtype), to_string(y), describe(x)));
    table_ = pool::make_table(spatial, win);
    planes_ = x.shape[0] * x.shape[1];
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& dx = ctx.output(0);
    visit_dtype(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const T* dy = ctx.input(0).data<T>();
        const T* x = ctx.input(1).data<T>();
        T* out = dx.data<T>();
        std::memset(out, 0, dx.nbytes());
        parallel_for(planes_, 1, [&](int64_t begin, int64_t end) {
          for (int64_t pl = begin; pl < end; ++pl)
            scatter(dy + pl * table_.out_plane, x + pl * table_.in_plane, out + pl * table_.in_plane);
        });
      } else {
        throw Unsupported(
            fmt::format("{}: {} inputs (float32 and float64 are supported)", op_, dtype_name(dx.dtype())));
      }
    });
  }

 protected:
  // One plane: adds each output's gradient to the inputs it came from.
  virtual void scatter(const float* dy, const float* x, float* dx) const = 0;
  virtual void scatter(const double* dy, const double* x, double* dx) const = 0;

  const char* op_;
  pool::WindowTable table_;
  int64_t planes_ = 0;
};

class MaxPoolGradKernel final : public PoolGradKernel {
 public:
  explicit MaxPoolGradKernel(const Node& node) : PoolGradKernel(node, "MaxPoolGrad") {}

 protected:
  void scatter(const float* dy, const float* x, float* dx) const override { run(dy, x, dx); }
  void scatter(const double* dy, const double* x, double* dx) const override { run(dy, x, dx); }

 private:
  template <class T>
  void run(const T* dy, const T* x, T* dx) const {
    for (int64_t o = 0; o < table_.out_plane; ++o) {
      const int64_t b = table_.start[size_t(o)], e = table_.start[size_t(o) + 1];
      if (b == e) continue;  // a window wholly in the padding: its output took no input
      int64_t at = table_.taps[size_t(b)];
      for (int64_t t = b + 1; t < e; ++t)
        if (x[table_.taps[size_t(t)]] > x[at]) at = table_.taps[size_t(t)];
      dx[at] += dy[o];
    }
  }
};

class AveragePoolGradKernel final : public PoolGradKernel {
 public:
  explicit AveragePoolGradKernel(const Node& node) : PoolGradKernel(node, "AveragePoolGrad") {}

 protected:
  void scatter(const float* dy, const float* x, float* dx) const override { run(dy, x, dx); }
  void scatter(const double* dy, const double* x, double* dx) const override { run(dy, x, dx); }

 private:
  template <class T>
  void run(const T* dy, const T*, T* dx) const {
    const bool include_pad = pool::count_include_pad(node_);
    for (int64_t o = 0; o < table_.out_plane; ++o) {
      const double div = pool::avg_divisor(table_, o, include_pad);
      if (div == 0) continue;
      const T g = static_cast<T>(double(dy[o]) / div);
      for (int64_t t = table_.start[size_t(o)]; t < table_.start[size_t(o) + 1]; ++t) dx[table_.taps[size_t(t)]] += g;
    }
  }
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64};
const KernelRegistrar max_reg({kKilnDomain, "MaxPoolGrad", 1, kMaxOpset, kFloats},
                              [](const Node& n) { return std::make_unique<MaxPoolGradKernel>(n); });
const KernelRegistrar avg_reg({kKilnDomain, "AveragePoolGrad", 1, kMaxOpset, kFloats},
                              [](const Node& n) { return std::make_unique<AveragePoolGradKernel>(n); });
const OpDocRegistrar max_doc(
    {kKilnDomain,
     "MaxPoolGrad",
     "Gradient of MaxPool with respect to its input; attributes are the MaxPool's (kernel_shape, strides, pads, "
     "auto_pad, dilations, ceil_mode).",
     {"dY: gradient of the MaxPool output Y", "X: the MaxPool input"},
     {"dX: gradient of X, X's shape"},
     "dX[i] = sum over windows w whose first maximum is at i of dY[w] (the argmax is recomputed from X; ties go "
     "to the first tap in row-major window order)"});
const OpDocRegistrar avg_doc(
    {kKilnDomain,
     "AveragePoolGrad",
     "Gradient of AveragePool with respect to its input; attributes are the AveragePool's (kernel_shape, "
     "strides, pads, auto_pad, dilations, ceil_mode, count_include_pad).",
     {"dY: gradient of the AveragePool output Y", "X: the AveragePool input; only its shape is read"},
     {"dX: gradient of X, X's shape"},
     "dX[i] = sum over windows w containing i of dY[w] / count(w), count(w) = taps of w inside X, or with "
     "count_include_pad taps inside the explicitly padded X (never ceil_mode's extra partial window)"});

}  // namespace
}  // namespace kiln
