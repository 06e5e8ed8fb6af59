// Shape inference with Kiln's own kernels: what planning a node gives before anything runs. The
// runtime's planner builds its ExecutionPlan on infer_node(); the gradient builder and tools use
// infer_value_metas() to learn dtypes and ranks that ONNX's shape inference leaves unknown.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kernel.h"

namespace kiln {

struct NodeInference {
  enum class Outcome {
    Runtime,  // computed at run time; `outputs` hold dtypes and shapes (some may be `dynamic`)
    Folded,   // every output's contents are known now (`outputs[i].value`)
    Dynamic,  // output shapes depend on data known only at run time; `outputs` is empty
  };
  Outcome outcome = Outcome::Runtime;
  std::unique_ptr<Kernel> kernel;
  // The definition `kernel` came from. A Dynamic node's inputs may turn out to have other dtypes at
  // run time than planned (the outputs of If / Loop / Scan, whose dtypes only running tells): the
  // executor resolves again by the actual dtypes (resolve_kernel) and replaces the kernel when the
  // definition differs. Null when planning found no kernel for the guessed dtypes.
  const KernelDef* def = nullptr;
  std::vector<TensorMeta> outputs;
};

// Resolves the node's kernel for these inputs (nullopt: omitted) and infers its outputs. A node
// whose inputs are all known values and whose kernel is foldable is computed on the spot (constant
// folding). Throws the kernel's errors (InvalidModel, ShapeError, Unsupported, ...).
NodeInference infer_node(const Node& node, int64_t opset, const std::vector<std::optional<TensorMeta>>& inputs);

// Throws TypeError naming the input when a kernel that takes tensors only (Kernel::takes_non_tensors)
// is given a sequence or an optional.
void check_input_kinds(const Kernel& kernel, const Node& node, const std::vector<std::optional<TensorMeta>>& inputs);

// Throws Unsupported when a kernel whose definition does not list String (a numeric kernel given a
// string dtype attribute: EyeLike, ConstantOfShape of a string value) would compute a string output.
void check_string_outputs(const KernelDef* def, const Node& node, const std::vector<TensorMeta>& outputs);

// The kernel definition for `node` given its inputs' dtypes (nullopt: omitted), as infer_node picks it.
const KernelDef& resolve_kernel(const Node& node, int64_t opset, const std::vector<std::optional<DType>>& dtypes);

// The dtype and shape of every value that can be known from the feeds' dtypes and shapes alone
// (initializers, feeds, and node outputs in topological order); values whose shapes depend on
// run-time data are absent. Contents are dropped. Throws like infer_node, with the node named.
std::map<std::string, TensorMeta> infer_value_metas(const Model& model, const std::map<std::string, Tensor>& feeds);

}  // namespace kiln
