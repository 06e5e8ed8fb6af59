// Gradients inside subgraphs, for the rules of the control-flow ops (autodiff/control_flow.cpp): the
// builder run over a branch or body on its own, seeded with given gradients of its outputs and
// differentiating with respect to values it reads from outside.
#pragma once

#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

struct SubgraphGradientRequest {
  const Graph* graph = nullptr;  // the forward subgraph; it reads outer values by name
  int64_t opset = 17;            // of the default domain
  std::vector<ValueInfo> outer;  // the outer values it reads (as the subgraph names them), typed as known outside
  std::vector<std::string> wrt;  // subgraph inputs or outer values to differentiate
  // Per subgraph output: the name of a value holding its gradient ("" when none flows), and its type.
  std::vector<std::string> seeds;
  std::vector<ValueInfo> seed_info;
  std::string prefix;  // put before every name the backward creates (no clash with outer values)
};

// The subgraph's forward nodes and their backward, as a graph with the subgraph's own inputs, that
// reads the outer values and the seeds by name, and whose outputs are the gradients of `wrt` in
// order (zeros where no gradient reaches one). Unsupported when a node on the way has no rule.
Graph build_subgraph_gradient(const SubgraphGradientRequest& request);

}  // namespace kiln
