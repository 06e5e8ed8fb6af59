// What the kernels that run subgraphs (control_flow.cpp: If, Loop, Scan; sequence_map.cpp) share: a subgraph run as its
// own Session (through kernels/subgraph_runner.h) (planned once per input signature, reused by every iteration and
// call), and the slicing and stacking of scan axes.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/subgraph_runner.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::control {

// A subgraph with the outer values it reads (the node's kiln.captures, ir/subgraph.h) as extra
// graph inputs. run() feeds the subgraph's own inputs by position and the captures, and returns
// its outputs by position, each an owning copy (the Session reuses its arena on the next run).
class Subgraph {
 public:
  Subgraph(const Graph& g, const std::vector<std::string>& captures, int64_t opset, std::string what);
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& captures);
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // The declared dtype of output i (float32 when undeclared): the dtype of an empty scan output.
  DType output_dtype(size_t i) const { return i < output_dtypes_.size() ? output_dtypes_[i] : DType::Float32; }

 private:
  std::string what_;  // "If's then_branch", for messages
  std::vector<std::string> inputs_, outputs_, captures_;
  std::vector<DType> output_dtypes_;
  std::unique_ptr<SubgraphRunner> session_;
};

// The names in the node's kiln.captures attribute (none when absent).
std::vector<std::string> captures_of(const Node& node);
// The node's graph attribute `key`; InvalidModel naming `op` when it is missing.
const Graph& graph_attr(const Node& node, const char* key, const char* op);

// The kernels' common frame: explicit inputs, then the captures; results computed in infer().
class ControlFlowKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void compute(ComputeContext& ctx) override {
    if (ctx.outputs.size() < results_.size())
      throw Error(
          fmt::format("{}: {} outputs planned for {} results", node_.op_type, ctx.outputs.size(), results_.size()));
    for (size_t i = 0; i < results_.size(); ++i) {
      Tensor* out = ctx.outputs[i];
      if (out != nullptr && !results_[i].is_tensor()) *out = results_[i];  // a sequence or optional: its handle
      else if (out != nullptr && out->defined()) out->copy_from(results_[i]);
    }
    results_.clear();
  }
  // Subgraphs may draw random numbers or be large: never run at plan time.
  bool foldable() const override { return false; }

 protected:
  size_t explicit_inputs(const InferContext& ctx) const { return ctx.num_inputs() - captures_.size(); }
  std::vector<Tensor> capture_values(const InferContext& ctx) const {
    std::vector<Tensor> v;
    for (size_t i = explicit_inputs(ctx); i < ctx.num_inputs(); ++i) v.push_back(ctx.value(i));
    return v;
  }
  // The subgraph in attribute `key`, made on first use (`what` names it in errors).
  Subgraph& subgraph(std::unique_ptr<Subgraph>& slot, const char* key, int64_t opset, const char* what) {
    if (!slot) slot = std::make_unique<Subgraph>(graph_attr(node_, key, node_.op_type.c_str()), captures_, opset, what);
    return *slot;
  }
  std::vector<TensorMeta> metas() const {
    std::vector<TensorMeta> m;
    for (const Tensor& t : results_) m.push_back(TensorMeta::of(t));
    return m;
  }
  std::vector<std::string> captures_ = control::captures_of(node_);
  std::vector<Tensor> results_;
};

// Slice `index` of `t` along `axis` (a copy without that axis).
Tensor slice(const Tensor& t, int64_t axis, int64_t index);
// The slices stacked along a new axis `axis` (all of one dtype and shape); `empty_shape` is the
// result when there are none.
Tensor stack(const std::vector<Tensor>& slices, int64_t axis, const Shape& empty_shape, DType empty_dtype);

}  // namespace kiln::control
