// ai.kiln.StopGradient, what the gradient machinery needs of the shape family (shape.cpp): an
// Identity (its output aliases its input) that autodiff/shape.cpp gives no gradient, as torch's
// detach(). The zoo's embeddings route the rows read at padding_idx through it in training mode.
#include <cstring>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class StopGradientKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& in = ctx.input(0);
    return {TensorMeta{in.dtype, in.shape, in.dynamic, in.value}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (out.raw_data() != in.raw_data() && in.nbytes() > 0) std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
  }
  bool output_aliases_input() const override { return true; }
};

const KernelRegistrar reg_stop_gradient({kKilnDomain, "StopGradient", 1, kMaxOpset, {}},
                                        [](const Node& n) { return std::make_unique<StopGradientKernel>(n); });

const OpDocRegistrar doc_stop_gradient(
    {kKilnDomain,
     "StopGradient",
     "Its input, unchanged, with no gradient flowing back through it (torch's detach).",
     {"X: a tensor of any dtype"},
     {"Y: X (the same buffer when the planner lets it alias)"},
     "Y = X; the gradient graph sends nothing to X through this node"});

}  // namespace
}  // namespace kiln
