// Gather: picks slices of `data` along `axis` by int32/int64 indices (negative ones count from the
// end). Moves whole inner rows of bytes, so every data dtype is served by one loop.
// Its gradient, ai.kiln.GatherGrad, is in gather_grad.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/int_values.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class GatherKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& data = ctx.input(0);
    const TensorMeta& indices = ctx.input(1);
    if (indices.dtype != DType::Int64 && indices.dtype != DType::Int32)
      throw TypeError(
          fmt::format("indices must be int32 or int64, got {}{}", dtype_name(indices.dtype), to_string(indices.shape)));
    const int64_t rank = static_cast<int64_t>(data.shape.size());
    if (rank == 0) throw ShapeError("cannot gather from a scalar (data has rank 0)");
    axis_ = normalize_axis(node_.attr_int("axis", 0), rank);
    Shape out(data.shape.begin(), data.shape.begin() + axis_);
    out.insert(out.end(), indices.shape.begin(), indices.shape.end());
    out.insert(out.end(), data.shape.begin() + axis_ + 1, data.shape.end());
    return {{data.dtype, out, data.dynamic || indices.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Shape& s = data.shape();
    const int64_t dim = s[axis_];
    // Checked up front, serially: an exception must not escape a parallel region.
    const std::vector<int64_t> idx = normalized(indices, data, dim);
    const int64_t n = static_cast<int64_t>(idx.size());
    const int64_t outer = numel(Shape(s.begin(), s.begin() + axis_));
    const int64_t inner = numel(Shape(s.begin() + axis_ + 1, s.end())) * static_cast<int64_t>(dtype_size(data.dtype()));
    if (inner == 0 || n == 0 || outer == 0) return;
    const char* src = static_cast<const char*>(data.raw_data());
    char* dst = static_cast<char*>(ctx.output(0).raw_data());
    const int64_t grain = std::max<int64_t>(1, 64 * 1024 / inner);
    parallel_for(outer * n, grain, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t o = k / n, j = k % n;
        std::memcpy(dst + k * inner, src + (o * dim + idx[j]) * inner, static_cast<size_t>(inner));
      }
    });
  }

 private:
  std::vector<int64_t> normalized(const Tensor& indices, const Tensor& data, int64_t dim) const {
    std::vector<int64_t> idx = int_values(indices, "indices");
    for (size_t j = 0; j < idx.size(); ++j) {
      const int64_t v = idx[j];
      if (v < -dim || v >= dim)
        throw InvalidArgument(fmt::format(
            "index {} (at {} of indices {}) is out of range for axis {} of data {}, whose size is {} (valid: {}..{})",
            v, index_position(static_cast<int64_t>(j), indices.shape()), indices.describe(), axis_, data.describe(),
            dim, -dim, dim - 1));
      if (v < 0) idx[j] = v + dim;
    }
    return idx;
  }

  int64_t axis_ = 0;
};

const KernelRegistrar reg_gather({"", "Gather", 1, kMaxOpset, {}},
                                 [](const Node& n) { return std::make_unique<GatherKernel>(n); });

}  // namespace
}  // namespace kiln
