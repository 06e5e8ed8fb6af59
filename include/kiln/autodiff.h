// Symbolic differentiation of ONNX graphs: the GradientBuilder adds backward nodes to a forward
// graph so that it also computes d(loss)/d(parameter) for every trainable parameter.
//
//   kiln::Model fwd = kiln::load_model("net.onnx");              // graph with a scalar loss value
//   kiln::GradientGraph g = kiln::build_gradient_graph(fwd, {.loss = "loss",
//                                                            .requires_grad = {"fc.weight", "fc.bias"}});
//   kiln::Session s(g.model);                                     // outputs: loss, fc.weight_grad, ...
//
// Gradients of values used several times are summed and broadcast gradients are reduced by the
// builder, not by each rule. Values that cannot carry a gradient (integer and boolean tensors,
// shapes, indices) are constants for differentiation. A node on the path from a trainable
// parameter to the loss whose op has no gradient rule is an Unsupported error naming the node,
// the op and the parameter.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

inline const std::string kKilnDomain = "ai.kiln";

struct GradientOptions {
  std::string loss;                        // a scalar value of the graph
  std::vector<std::string> requires_grad;  // initializers to differentiate; empty: every float one
  std::vector<std::string> frozen_params;  // excluded from the default set
  std::string grad_suffix = "_grad";       // the gradient of "w" is the graph output "w_grad"
};

struct GradientGraph {
  Model model;                                // forward + backward; outputs: loss, the forward
                                              // outputs, then one gradient per parameter
  std::map<std::string, std::string> grads;   // parameter -> gradient output name
  std::vector<std::string> parameters;        // trainable parameters, in graph output order
};

GradientGraph build_gradient_graph(const Model& forward, const GradientOptions& options);

// Whether an op has a gradient rule, a "no gradient" marker (its outputs are constants for
// differentiation), or neither. Used by the coverage test and `kiln ops`.
enum class GradientKind { Rule, NoGradient, None };
GradientKind gradient_kind(const std::string& domain, const std::string& op_type);

}  // namespace kiln
