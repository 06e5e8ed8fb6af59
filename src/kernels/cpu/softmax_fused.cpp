// ai.kiln.MaskedSoftmax, what the masked-softmax fusion (ir/fusion.h) writes for attention's
// Softmax(Where(cond, fill, scale * S)): the masked, scaled scores written in one pass, then
// oneDNN's softmax in place over them (float32), instead of a Mul, a Where and a Softmax each
// reading and writing the whole tensor; float64 rows are done whole, one row at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/masked_softmax_common.h"

namespace kiln {
namespace {

using masked_softmax::Attrs;
using masked_softmax::Rows;

class MaskedSoftmax final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta &x = ctx.input(0), &cond = ctx.input(1);
    const Shape out = masked_softmax::output_shape("MaskedSoftmax", x, cond);
    rows_ = Rows(out, x.shape, cond.shape);
    attrs_ = masked_softmax::attrs_of(node_);
    return {{x.dtype, out, x.dynamic || cond.dynamic, Tensor()}};
  }

  void prepare(const InferContext&, const std::vector<TensorMeta>& outputs) override {
    const Shape& out = outputs[0].shape;
    prim_ = {};
    if (outputs[0].dtype != DType::Float32 || numel(out) == 0) return;
    view_ = out.empty() ? Shape{1} : out;
    if (view_.size() > DNNL_MAX_NDIMS) return;  // the row loop then
    prim_ = dnnl_util::checked(fmt::format("build MaskedSoftmax over float{}", to_string(view_)), [&] {
      const dnnl::memory::desc md = dnnl_util::plain_desc(view_);
      dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate, md, md,
                                       static_cast<int>(view_.size()) - 1);
      return dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(d, dnnl_util::engine()));
    });
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.output(0).numel() == 0) return;
    if (ctx.input(0).dtype() == DType::Float32) return run<float>(ctx);
    run<double>(ctx);
  }

 private:
  // float32: Z written over Y in one parallel pass, then oneDNN's softmax over Y in place (its
  // vector exp takes a fill of -inf as 0). float64 (gradient checks): each row whole on one thread.
  template <class T>
  void run(ComputeContext& ctx) {
    const T* x = ctx.input(0).data<T>();
    const bool* cond = ctx.input(1).data<bool>();
    Tensor& out = ctx.output(0);
    T* y = out.data<T>();
    const int64_t len = rows_.len();
    const bool fused_rows = !std::is_same_v<T, float> || !prim_;
    parallel_for(rows_.rows(), std::max<int64_t>(1, 16384 / std::max<int64_t>(1, len)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* row_y = y + r * len;
        fill_row(x + rows_.x_offset(r), cond + rows_.cond_offset(r), row_y);
        if (fused_rows) softmax_row(row_y);
      }
    });
    if (fused_rows) return;
    const dnnl::memory::desc d = dnnl_util::plain_desc(view_);
    dnnl_util::execute(prim_,
                       {{DNNL_ARG_SRC, dnnl_util::memory_of(d, out)}, {DNNL_ARG_DST, dnnl_util::memory_of(d, out)}},
                       "MaskedSoftmax");
  }

  // y = fill where the mask selects it, scale * x elsewhere.
  template <class T>
  void fill_row(const T* x, const bool* c, T* y) const {
    const int64_t len = rows_.len(), xs = rows_.x_step(), cs = rows_.cond_step();
    const T scale = static_cast<T>(attrs_.scale), fill = static_cast<T>(attrs_.fill);
    const bool where = attrs_.fill_where;
    if (xs == 1 && cs == 1) {  // the usual attention row: its own mask row, its own scores
#pragma omp simd
      for (int64_t k = 0; k < len; ++k) y[k] = c[k] == where ? fill : scale * x[k];
      return;
    }
    for (int64_t k = 0; k < len; ++k) y[k] = c[k * cs] == where ? fill : scale * x[k * xs];
  }

  // softmax of one row in place, in double.
  template <class T>
  void softmax_row(T* y) const {
    const int64_t len = rows_.len();
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t k = 0; k < len; ++k) max = std::max(max, static_cast<double>(y[k]));
    std::vector<double> e(static_cast<size_t>(len));
    for (int64_t k = 0; k < len; ++k) sum += e[size_t(k)] = std::exp(static_cast<double>(y[k]) - max);
    for (int64_t k = 0; k < len; ++k) y[k] = static_cast<T>(e[size_t(k)] / sum);
  }

  Rows rows_;
  Attrs attrs_;
  Shape view_;
  dnnl::softmax_v2_forward prim_;
};

const KernelRegistrar reg({kKilnDomain, "MaskedSoftmax", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                          [](const Node& n) { return std::make_unique<MaskedSoftmax>(n); });
const OpDocRegistrar doc({kKilnDomain,
                          "MaskedSoftmax",
                          "Attention's masked softmax as one pass: what the masked-softmax fusion writes for "
                          "Softmax(Where(cond, fill, X * scale)) (or with X and fill swapped, fill_where 0).",
                          {"X: the scores, float32 or float64", "cond: bool, broadcast with X"},
                          {"Y: softmax along the last axis, the broadcast shape of X and cond, X's dtype"},
                          "attributes scale (default 1), fill, fill_where (1: fill where cond is true; 0: where "
                          "false). Z = fill where cond == fill_where, else scale * X; Y = softmax(Z) along the last "
                          "axis (exponentials in double)"});

}  // namespace
}  // namespace kiln
