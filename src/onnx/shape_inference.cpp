// Shape inference for models built or rewritten in memory, through ONNX's own inference.
#include <set>
#include <vector>

#include "kiln/onnx_io.h"
#include "onnx/model_proto.h"

namespace kiln {

void infer_shapes(Model& model) {
  // Inference needs the initializers' types and shapes, and the values only of small ones (a
  // Reshape's shape): the large float ones go as external references it never reads, so a model
  // of any size is inferred without copying its weights.
  onnxio::ExternalLayout skeleton{"<not read>", {}};
  for (const auto& [name, t] : model.graph.initializers)
    if (t.nbytes() >= 1024 && is_floating(t.dtype())) skeleton.offsets[name] = 0;
  LoadOptions options;
  options.run_checker = false;
  options.infer_shapes = true;
  options.load_external_data = false;
  // ONNX knows none of Kiln's own ops; ai.kiln.StopGradient is an Identity to it, so the values
  // after it keep their types and shapes (autocast and the gradient rules read them).
  std::vector<Node*> stops;
  for (Node& n : model.graph.nodes)
    if (n.domain == kKilnDomain && n.op_type == "StopGradient") stops.push_back(&n);
  for (Node* n : stops) {
    n->domain.clear();
    n->op_type = "Identity";
  }
  onnx::ModelProto proto = onnxio::model_to_proto(model, &skeleton);
  for (Node* n : stops) {
    n->domain = kKilnDomain;
    n->op_type = "StopGradient";
  }
  const std::string bytes = onnxio::serialize_message(proto, "the model for shape inference");
  const Model inferred = load_model_from_bytes(bytes, "", options, "<in-memory model>");
  model.graph.value_info.clear();
  for (const ValueInfo& v : inferred.graph.value_info)  // without the skipped initializers' placeholders
    if (!skeleton.offsets.count(v.name)) model.graph.value_info.push_back(v);
}

}  // namespace kiln
