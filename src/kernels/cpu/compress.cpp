// Compress: the slices of the input along `axis` (the flattened input without one) whose entry of
// the 1-D boolean condition is true. A condition shorter than the axis leaves the rest out; one
// longer is allowed where its extra entries are false (numpy.compress raises otherwise, and so does
// Kiln). The output's length comes from the condition's values, so a fed condition plans at run
// time. Gradient: autodiff/compress.cpp.
#include <fmt/format.h>

#include <cstring>

#include "kiln/kernel.h"

namespace kiln {
namespace {

class CompressKernel : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const Tensor& cond = ctx.value(1);
    if (ctx.dtype(1) != DType::Bool || cond.rank() != 1)
      throw TypeError(fmt::format("condition must be a 1-D bool tensor, got {}", cond.describe()));
    has_axis_ = node_.has_attr("axis");
    axis_ = has_axis_ ? normalize_axis(node_.attr_int("axis"), static_cast<int64_t>(in.size())) : 0;
    const int64_t dim = has_axis_ ? in[static_cast<size_t>(axis_)] : numel(in);
    selected_.clear();
    const Tensor c = cond.contiguous();
    for (int64_t i = 0; i < c.numel(); ++i) {
      if (!c.data<bool>()[i]) continue;
      if (i >= dim)
        throw InvalidArgument(fmt::format("condition {} selects index {}, beyond the {} entries of {} {}", c.describe(),
                                          i, dim, has_axis_ ? "axis" : "the flattened input",
                                          has_axis_ ? std::to_string(axis_) : to_string(in)));
      selected_.push_back(i);
    }
    Shape out = has_axis_ ? in : Shape{};
    if (has_axis_) out[static_cast<size_t>(axis_)] = static_cast<int64_t>(selected_.size());
    else out.push_back(static_cast<int64_t>(selected_.size()));
    return {{ctx.dtype(0), out, ctx.input(0).dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor in = ctx.input(0).contiguous();
    Tensor& out = ctx.output(0);
    const Shape& s = in.shape();
    const int64_t outer = has_axis_ ? numel(Shape(s.begin(), s.begin() + axis_)) : 1;
    const int64_t dim = has_axis_ ? s[static_cast<size_t>(axis_)] : in.numel();
    const int64_t inner = has_axis_ ? numel(Shape(s.begin() + axis_ + 1, s.end())) : 1;
    const size_t row = static_cast<size_t>(inner) * dtype_size(in.dtype());
    const auto* src = static_cast<const char*>(in.raw_data());
    auto* dst = static_cast<char*>(out.raw_data());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j : selected_) {
        std::memcpy(dst, src + static_cast<size_t>(o * dim + j) * row, row);
        dst += row;
      }
  }

 private:
  bool has_axis_ = false;
  int64_t axis_ = 0;
  std::vector<int64_t> selected_;
};

const KernelRegistrar reg_compress({"", "Compress", 9, kMaxOpset},
                                   [](const Node& n) { return std::make_unique<CompressKernel>(n); });

}  // namespace
}  // namespace kiln
