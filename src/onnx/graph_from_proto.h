// onnx.GraphProto -> kiln::Graph: nodes with every attribute kind (subgraphs recursively), value
// infos, initializers (external data through tensor_proto.h). Internal to src/onnx.
#pragma once

#include <onnx/onnx_pb.h>

#include "kiln/graph.h"
#include "onnx/tensor_proto.h"

namespace kiln::onnxio {

struct ReadOptions {
  TensorSource source;
  // When false, initializers stored in external files are left out of Graph::initializers and
  // described in Graph::value_info instead (dtype and shape), so a model can be inspected without
  // reading gigabytes of weights. Tensor attributes cannot be left out: one stored externally is
  // then an Unsupported error.
  bool load_external_data = true;
};

// Converts `proto`. Inline tensor bytes are released from `proto` as they are copied, so the peak
// memory of a load is about one copy of the weights, not two.
Graph graph_from_proto(onnx::GraphProto& proto, const ReadOptions& options);

// Domain as Kiln stores it: "ai.onnx" -> "".
std::string normalise_domain(const std::string& domain);

}  // namespace kiln::onnxio
