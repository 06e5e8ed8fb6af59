// ReverseSequence (opset 10): for each batch entry b, the first sequence_lens[b] slices along
// time_axis are reversed and the rest copied, batch_axis and time_axis being 0 and 1 in either
// order. Its own inverse: the gradient rule (autodiff/reverse_sequence.cpp) applies it to dY.
#include <fmt/format.h>

#include <cstring>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class ReverseSequenceKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta &x = ctx.input(0), &lens = ctx.input(1);
    time_ = node_.attr_int("time_axis", 0);
    batch_ = node_.attr_int("batch_axis", 1);
    if (!((time_ == 0 && batch_ == 1) || (time_ == 1 && batch_ == 0)))
      throw InvalidModel(
          fmt::format("ReverseSequence: time_axis {} and batch_axis {} must be 0 and 1 in some order", time_, batch_));
    if (x.shape.size() < 2 || lens.shape != Shape{x.shape[size_t(batch_)]} || lens.dtype != DType::Int64)
      throw ShapeError(
          fmt::format("ReverseSequence: input {} must have rank >= 2 and sequence_lens {} be int64 "
                      "[batch] (batch_axis {})",
                      x.describe(), lens.describe(), batch_));
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor &x = ctx.input(0), &lens = ctx.input(1);
    const int64_t steps = x.dim(time_), batch = x.dim(batch_), inner = x.numel() / std::max<int64_t>(1, steps * batch);
    const size_t bytes = size_t(inner) * dtype_size(x.dtype());
    const auto* src = static_cast<const char*>(x.raw_data());
    auto* dst = static_cast<char*>(ctx.output(0).raw_data());
    const int64_t* pl = lens.data<int64_t>();
    // Offset of slice (t, b) in units of `inner` elements.
    const auto at = [&](int64_t t, int64_t b) { return time_ == 0 ? t * batch + b : b * steps + t; };
    for (int64_t b = 0; b < batch; ++b) {
      if (pl[b] < 0 || pl[b] > steps)
        throw InvalidModel(fmt::format("ReverseSequence: sequence_lens[{}] = {} is outside [0, {}]", b, pl[b], steps));
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t from = t < pl[b] ? pl[b] - 1 - t : t;
        std::memcpy(dst + at(t, b) * int64_t(bytes), src + at(from, b) * int64_t(bytes), bytes);
      }
    }
  }

 private:
  int64_t time_ = 0, batch_ = 1;
};

const KernelRegistrar reverse_sequence_reg({"", "ReverseSequence", 10, kMaxOpset, {}},
                                           [](const Node& n) { return std::make_unique<ReverseSequenceKernel>(n); });

}  // namespace
}  // namespace kiln
