#include <fmt/format.h>

#include "core/scratch.h"
#include "kernels/node_inference.h"
#include "kiln/kernel.h"

namespace kiln {

std::vector<Tensor> run_node(const Node& node, const std::vector<Tensor>& inputs, int64_t opset) {
  std::vector<std::optional<DType>> dtypes;
  dtypes.reserve(inputs.size());
  for (const Tensor& t : inputs) dtypes.push_back(t.defined() ? std::optional<DType>(t.dtype()) : std::nullopt);
  try {
    const KernelDef& def = KernelRegistry::global().resolve_node(node, opset, dtypes);
    std::unique_ptr<Kernel> kernel = def.create(node);
    InferContext ictx{node, opset, {}};
    std::vector<Tensor> packed;
    packed.reserve(inputs.size());
    for (const Tensor& t : inputs) {
      packed.push_back(t.defined() ? t.contiguous() : Tensor());
      if (!t.defined()) {
        ictx.inputs.push_back(std::nullopt);
      } else {
        TensorMeta m = TensorMeta::of(t);
        m.value = packed.back();
        ictx.inputs.push_back(std::move(m));
      }
    }
    check_input_kinds(*kernel, node, ictx.inputs);
    std::vector<TensorMeta> metas = kernel->infer(ictx);
    check_string_outputs(&def, node, metas);
    kernel->prepare(ictx, metas);
    std::vector<Tensor> outs;
    outs.reserve(metas.size());
    for (const TensorMeta& m : metas)  // a sequence or optional output is assigned by the kernel
      outs.push_back(m.kind == ValueKind::Tensor ? Tensor::empty(m.dtype, m.shape) : Tensor());
    ComputeContext cctx{node, {}, {}};
    for (const Tensor& t : packed) cctx.inputs.push_back(t.defined() ? &t : nullptr);
    for (Tensor& t : outs) cctx.outputs.push_back(&t);
    ScratchScope scratch;
    kernel->compute(cctx);
    return outs;
  } catch (Error& e) {
    e.add_context(node.label() + ": ");
    throw;
  }
}

}  // namespace kiln
