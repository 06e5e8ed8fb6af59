// SequenceMap (opset 17): runs its body once per element of input_sequence. A body input fed by a
// sequence gets that sequence's element at the same position (every sequence input has the same
// length); one fed by a tensor gets the tensor every time. Each body output is gathered into an
// output sequence. The body runs as its own Session (control_flow_common.h), planned once per
// element signature.
#include <fmt/format.h>

#include "kernels/cpu/control_flow_common.h"

namespace kiln {
namespace {

using control::ControlFlowKernel;
using control::Subgraph;

class SequenceMapKernel final : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  bool takes_non_tensors() const override { return true; }
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const size_t n = explicit_inputs(ctx);
    Subgraph& body = subgraph(body_, "body", ctx.opset, "SequenceMap's body");
    if (n == 0) throw InvalidModel("SequenceMap needs input_sequence");
    if (body.num_inputs() != n || body.num_outputs() != node_.outputs.size())
      throw InvalidModel(
          fmt::format("SequenceMap: the body takes {} inputs and gives {} outputs, but the node has {} "
                      "inputs and {} outputs",
                      body.num_inputs(), body.num_outputs(), n, node_.outputs.size()));
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < n; ++i) inputs.push_back(ctx.value(i));
    if (!inputs[0].is_sequence())
      throw TypeError(fmt::format("SequenceMap: input_sequence '{}' is {}", node_.inputs[0], inputs[0].describe()));
    const size_t length = inputs[0].elements().size();
    for (size_t i = 1; i < n; ++i) {
      if (inputs[i].is_none())
        throw TypeError(fmt::format("SequenceMap: input {} ('{}') is an empty optional", i, node_.inputs[i]));
      if (inputs[i].is_sequence() && inputs[i].elements().size() != length)
        throw ShapeError(fmt::format("SequenceMap: input {} ('{}') holds {} tensors, input_sequence {}", i,
                                     node_.inputs[i], inputs[i].elements().size(), length));
    }
    const std::vector<Tensor> caps = capture_values(ctx);
    std::vector<std::vector<Tensor>> gathered(body.num_outputs());
    for (size_t k = 0; k < length; ++k) {
      std::vector<Tensor> step;
      step.reserve(inputs.size());
      for (const Tensor& in : inputs) step.push_back(in.is_sequence() ? in.elements()[k] : in);
      std::vector<Tensor> out = body.run(step, caps);
      for (size_t j = 0; j < out.size(); ++j) gathered[j].push_back(std::move(out[j]));
    }
    results_.clear();
    for (size_t j = 0; j < gathered.size(); ++j) {
      const DType dtype = gathered[j].empty() ? body.output_dtype(j) : gathered[j][0].dtype();
      results_.push_back(Tensor::sequence(dtype, std::move(gathered[j])));
    }
    return metas();
  }

 private:
  std::unique_ptr<Subgraph> body_;
};

const KernelRegistrar reg_map({"", "SequenceMap", 17, kMaxOpset, {}},
                              [](const Node& n) { return std::make_unique<SequenceMapKernel>(n); });

}  // namespace
}  // namespace kiln
