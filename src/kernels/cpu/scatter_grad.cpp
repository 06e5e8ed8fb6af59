// ai.kiln.GatherElementsGrad and GatherNDGrad, the gradients of GatherElements and GatherND
// (scatter.cpp): dY scatter-added into zeros of the data's shape.
#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/int_values.h"
#include "kernels/cpu/scatter_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using indexing::check_index_dtype;
using indexing::element_offsets;
using indexing::elements_axis;
using indexing::index_tuples;
using indexing::tuple_length;
using indexing::Tuples;

// ai.kiln.GatherElementsGrad / GatherNDGrad(dY, shape, indices): the gradient of the gathers'
// data, dY added into zeros of `shape` at the positions the gather read (repeats accumulate).
// Serial: repeated indices would make threads write the same element.
class GatherGradBase : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape data = int64_values(ctx.value(1), "shape");
    const Shape expected = gathered_shape(ctx, data);
    if (ctx.shape(0) != expected)
      throw ShapeError(fmt::format("dY {} must have the gather's output shape {} (data {}, indices {})",
                                   to_string(ctx.shape(0)), to_string(expected), to_string(data),
                                   to_string(ctx.shape(2))));
    return {{ctx.dtype(0), data, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& dx = ctx.output(0);
    visit_dtype(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* out = dx.data<T>();
        std::fill(out, out + dx.numel(), T(0));
        accumulate(ctx.input(0).data<T>(), ctx.input(2), out, dx.shape());
      } else {
        throw TypeError(fmt::format("{} supports float and double, got {}", node_.op_type, dx.describe()));
      }
    });
  }

 protected:
  virtual Shape gathered_shape(const InferContext& ctx, const Shape& data) = 0;
  virtual void accumulate(const float* dy, const Tensor& indices, float* out, const Shape& data) = 0;
  virtual void accumulate(const double* dy, const Tensor& indices, double* out, const Shape& data) = 0;
};

class GatherElementsGradKernel : public GatherGradBase {
 public:
  using GatherGradBase::GatherGradBase;

 protected:
  Shape gathered_shape(const InferContext& ctx, const Shape& data) override {
    check_index_dtype(ctx.input(2), "indices");
    axis_ = elements_axis(node_, data, ctx.shape(2), "indices");
    return ctx.shape(2);
  }
  void accumulate(const float* dy, const Tensor& indices, float* out, const Shape& data) override {
    add(dy, indices, out, data);
  }
  void accumulate(const double* dy, const Tensor& indices, double* out, const Shape& data) override {
    add(dy, indices, out, data);
  }

 private:
  template <class T>
  void add(const T* dy, const Tensor& indices, T* out, const Shape& data) const {
    const std::vector<int64_t> off =
        element_offsets(indices, data, axis_, fmt::format("axis {} of data {}", axis_, to_string(data)));
    for (size_t i = 0; i < off.size(); ++i) out[off[i]] += dy[i];
  }
  int64_t axis_ = 0;
};

class GatherNDGradKernel : public GatherGradBase {
 public:
  using GatherGradBase::GatherGradBase;

 protected:
  Shape gathered_shape(const InferContext& ctx, const Shape& data) override {
    if (ctx.dtype(2) != DType::Int64)
      throw TypeError(
          fmt::format("indices must be int64, got {}{}", dtype_name(ctx.dtype(2)), to_string(ctx.shape(2))));
    const Shape& indices = ctx.shape(2);
    batch_dims_ = node_.attr_int("batch_dims", 0);
    const int64_t k = tuple_length(data, indices, batch_dims_);
    Shape out(indices.begin(), indices.end() - 1);
    out.insert(out.end(), data.begin() + batch_dims_ + k, data.end());
    return out;
  }
  void accumulate(const float* dy, const Tensor& indices, float* out, const Shape& data) override {
    add(dy, indices, out, data);
  }
  void accumulate(const double* dy, const Tensor& indices, double* out, const Shape& data) override {
    add(dy, indices, out, data);
  }

 private:
  template <class T>
  void add(const T* dy, const Tensor& indices, T* out, const Shape& data) const {
    const Tuples t = index_tuples(indices, data, batch_dims_);
    for (size_t j = 0; j < t.offsets.size(); ++j) {
      const int64_t batch = t.per_batch > 0 ? static_cast<int64_t>(j) / t.per_batch : 0;
      T* row = out + batch * t.batch_stride + t.offsets[j];
      const T* src = dy + static_cast<int64_t>(j) * t.slice;
      for (int64_t i = 0; i < t.slice; ++i) row[i] += src[i];
    }
  }
  int64_t batch_dims_ = 0;
};

const std::vector<DType> kGradTypes{DType::Float32, DType::Float64};
const KernelRegistrar reg_gather_elements_grad({kKilnDomain, "GatherElementsGrad", 1, kMaxOpset, kGradTypes},
                                               [](const Node& n) {
                                                 return std::make_unique<GatherElementsGradKernel>(n);
                                               });
const KernelRegistrar reg_gather_nd_grad({kKilnDomain, "GatherNDGrad", 1, kMaxOpset, kGradTypes},
                                         [](const Node& n) { return std::make_unique<GatherNDGradKernel>(n); });
const OpDocRegistrar doc_gather_elements_grad(
    {kKilnDomain,
     "GatherElementsGrad",
     "The gradient of GatherElements with respect to its data.",
     {"dY: the gradient of GatherElements' output (the shape of indices)", "shape: int64 [r], the shape of data",
      "indices: GatherElements' int32/int64 indices (negative ones count from the end)"},
     {"dX: the gradient of data, of the given shape"},
     "attribute axis (default 0). dX = 0; then for every position p of indices: dX[p with p[axis] replaced by "
     "indices[p]] += dY[p] (repeated positions accumulate)"});
const OpDocRegistrar doc_gather_nd_grad(
    {kKilnDomain,
     "GatherNDGrad",
     "The gradient of GatherND with respect to its data.",
     {"dY: the gradient of GatherND's output", "shape: int64 [r], the shape of data",
      "indices: GatherND's int64 index tuples (negative entries count from the end)"},
     {"dX: the gradient of data, of the given shape"},
     "attribute batch_dims (default 0). dX = 0; then for every batch b and tuple t of indices: "
     "dX[b, t, :] += dY[b, position of t, :] (repeated tuples accumulate)"});

}  // namespace
}  // namespace kiln
