// MaxUnpool (opset 9, 11): the partial inverse of MaxPool. Y starts at zero and X[j] goes to the
// position that the flat index I[j] names in the default output shape, (in - 1) * stride -
// pad_begin - pad_end + kernel per spatial dim. With output_shape given, Y has that shape and each
// position keeps its coordinates (ONNX's test_maxunpool_export_with_output_shape: a 5 x 5 output of
// 4 x 4 indices). ONNX Runtime 1.30 instead puts X[j] at flat index I[j] of the larger output and
// fails that case; the two agree whenever output_shape is the unpooled shape.
#include <fmt/format.h>

#include <cstring>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class MaxUnpoolKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta &x = ctx.input(0), &idx = ctx.input(1);
    if (x.shape.size() < 3 || idx.shape != x.shape || idx.dtype != DType::Int64)
      throw ShapeError(fmt::format("MaxUnpool: X {} must be [N, C, D1, ...] and I {} int64 of X's shape", x.describe(),
                                   idx.describe()));
    const size_t nsp = x.shape.size() - 2;
    if (!node_.has_attr("kernel_shape")) throw InvalidModel("MaxUnpool: attribute 'kernel_shape' is required");
    const std::vector<int64_t> k = node_.attr_ints("kernel_shape");
    const std::vector<int64_t> s = node_.attr_ints("strides", std::vector<int64_t>(nsp, 1));
    const std::vector<int64_t> p = node_.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
    if (k.size() != nsp || s.size() != nsp || p.size() != 2 * nsp)
      throw InvalidModel(fmt::format("MaxUnpool: kernel_shape [{}], strides [{}] and pads [{}] do not fit X {}",
                                     fmt::join(k, ", "), fmt::join(s, ", "), fmt::join(p, ", "), x.describe()));
    Shape y{x.shape[0], x.shape[1]};
    for (size_t i = 0; i < nsp; ++i) y.push_back((x.shape[i + 2] - 1) * s[i] - p[i] - p[i + nsp] + k[i]);
    default_ = y;
    if (ctx.has_input(2)) {
      const Shape given = ctx.value(2).to_int64_vector();
      if (given.size() != y.size())
        throw ShapeError(fmt::format("MaxUnpool: output_shape {} must have X's rank {}", to_string(given), y.size()));
      for (size_t d = 0; d < y.size(); ++d)
        if (given[d] < y[d])
          throw ShapeError(fmt::format("MaxUnpool: output_shape {} is smaller than the unpooled shape {}",
                                       to_string(given), to_string(y)));
      y = given;
    }
    return {TensorMeta{x.dtype, y, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor &x = ctx.input(0), &idx = ctx.input(1);
    Tensor& y = ctx.output(0);
    const size_t es = dtype_size(x.dtype());
    std::memset(y.raw_data(), 0, y.nbytes());
    const auto* src = static_cast<const char*>(x.raw_data());
    auto* dst = static_cast<char*>(y.raw_data());
    const int64_t* pi = idx.data<int64_t>();
    const int64_t span = numel(default_);
    for (int64_t j = 0; j < x.numel(); ++j) {
      if (pi[j] < 0 || pi[j] >= span)
        throw InvalidModel(
            fmt::format("MaxUnpool: index I[{}] = {} is outside the unpooled shape {}", j, pi[j], to_string(default_)));
      // The index's coordinates in the default shape, at the same coordinates of Y.
      int64_t rest = pi[j], flat = 0, stride = 1;
      for (size_t d = default_.size(); d-- > 0;) {
        flat += (rest % default_[d]) * stride;
        rest /= default_[d];
        stride *= y.dim(int64_t(d));
      }
      std::memcpy(dst + flat * int64_t(es), src + j * int64_t(es), es);
    }
  }

 private:
  Shape default_;  // the unpooled shape the indices count in
};

const KernelRegistrar max_unpool_reg({"", "MaxUnpool", 9, kMaxOpset, {}},
                                     [](const Node& n) { return std::make_unique<MaxUnpoolKernel>(n); });

}  // namespace
}  // namespace kiln
