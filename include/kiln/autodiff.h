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
#include <utility>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

// Gradient checkpointing (HF's gradient_checkpointing, ONNX Runtime's recompute): the backward
// keeps only the activations at segment boundaries and recomputes each segment's forward
// (autodiff/recompute.h).
struct RecomputeOptions {
  bool enabled = false;
  std::vector<std::string> boundaries;  // forward values to keep between segments; empty: found from the graph
};
struct GradientOptions {
  std::string loss;                        // a scalar value of the graph
  std::vector<std::string> requires_grad;  // initializers to differentiate; empty: every float one
  std::vector<std::string> frozen_params;  // excluded from the default set
  std::string grad_suffix = "_grad";       // the gradient of "w" is the graph output "w_grad"
  RecomputeOptions recompute;
  // Mixed precision: BFloat16 runs the products (MatMul, Gemm, Conv, attention) and their gradients
  // in bfloat16 with float32 accumulation, everything else and the parameters in float32 (torch.autocast's
  // split; the pass is in src/ir/autocast.h). Float32: none.
  DType mixed_precision = DType::Float32;
  // Loss scaling (fp16 training): the name of a float32 scalar graph input, added by the builder,
  // that seeds the backward pass instead of 1, so every gradient comes out multiplied by it. Empty:
  // none.
  std::string loss_scale_input;
};

struct GradientGraph {
  Model model;                               // forward + backward; outputs: loss, the forward
                                             // outputs, then one gradient per parameter
  std::map<std::string, std::string> grads;  // parameter -> gradient output name
  std::vector<std::string> parameters;       // trainable parameters, in graph output order
  // With options.recompute: the values kept between recomputed segments, and the forward nodes copied.
  std::vector<std::string> recompute_boundaries;
  size_t recomputed_nodes = 0;
};

GradientGraph build_gradient_graph(const Model& forward, const GradientOptions& options);

// Whether an op, at an opset of its domain, has a gradient rule, a "no gradient" marker (its outputs
// are constants for differentiation), or neither. Rules are registered for opset ranges, as
// kernels are. Used by the gradient builder, the coverage test and training's gradient reach.
enum class GradientKind { Rule, NoGradient, None };
GradientKind gradient_kind(const std::string& domain, const std::string& op_type, int64_t opset);
// The same at the newest opset (the op as ONNX defines it today).
GradientKind gradient_kind(const std::string& domain, const std::string& op_type);

// The parameters of a model, as PyTorch sees them: every floating-point initializer through which a
// gradient can reach `loss` is trainable unless frozen; BatchNormalization's running statistics are
// buffers (a training-mode node updates them), never trained. A non-empty `requires_grad` is the
// trainable set as given, checked. Throws InvalidArgument / TypeError naming the parameter for a
// name that is not an initializer, not floating-point, or both requested and frozen, and when
// nothing is left to train. A requested running statistic is refused for training (Purpose::Train:
// generate_artifacts) and allowed when only gradients are asked for (Purpose::Differentiate: the
// gradient builder, `kiln grad`), as torch.autograd.grad differentiates with respect to buffers.
struct ParameterSelection {
  std::vector<std::string> trainable;  // requires_grad as given, else in the order the forward reads them
  std::vector<std::string> frozen;     // frozen_params that are not buffers
  std::vector<std::string> buffers;    // running statistics of training-mode BatchNormalization
  std::vector<std::pair<std::string, std::string>> updates;  // buffer -> the output with its new value
};
enum class Purpose { Train, Differentiate };
ParameterSelection select_parameters(const Model& model, const std::string& loss,
                                     const std::vector<std::string>& requires_grad,
                                     const std::vector<std::string>& frozen_params, Purpose purpose = Purpose::Train);
// Whether input `input` of `node` is a BatchNormalization running statistic (mean, variance).
bool is_running_statistic_input(const Node& node, size_t input);

}  // namespace kiln
