// Shape inference for models built or rewritten in memory, through ONNX's own inference.
#include "kiln/onnx_io.h"

namespace kiln {

void infer_shapes(Model& model) {
  LoadOptions options;
  options.run_checker = false;
  options.infer_shapes = true;
  const Model inferred = load_model_from_bytes(serialize_model(model), "", options, "<in-memory model>");
  model.graph.value_info = inferred.graph.value_info;
}

}  // namespace kiln
