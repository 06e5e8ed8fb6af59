// What the control-flow kernels (control_flow.cpp: If, Loop, Scan) share: a subgraph run as its
// own Session (through kernels/subgraph_runner.h) (planned once per input signature, reused by every iteration and
// call), and the slicing and stacking of scan axes.
#pragma once

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

// Slice `index` of `t` along `axis` (a copy without that axis).
Tensor slice(const Tensor& t, int64_t axis, int64_t index);
// The slices stacked along a new axis `axis` (all of one dtype and shape); `empty_shape` is the
// result when there are none.
Tensor stack(const std::vector<Tensor>& slices, int64_t axis, const Shape& empty_shape, DType empty_dtype);

}  // namespace kiln::control
