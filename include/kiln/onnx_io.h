// Reading and writing ONNX files.
//
//   kiln::Model m = kiln::load_model("model.onnx");   // checks, infers shapes, loads external data
//   kiln::save_model(m, "copy.onnx");                 // atomic: temp file, fsync, rename
#pragma once

#include <string>

#include "kiln/graph.h"

namespace kiln {

struct LoadOptions {
  bool run_checker = true;         // onnx::checker on the parsed model
  bool infer_shapes = true;        // onnx shape inference to fill value_info
  bool load_external_data = true;  // read tensors stored beside the model
};

// Loads an ONNX model (default domain, opsets 13..17 supported for running). Throws IOError for
// unreadable files, InvalidModel for malformed ones, both naming the file.
Model load_model(const std::string& path, const LoadOptions& options = {});
// Parses a serialized ModelProto held in memory. `base_dir` resolves external data ("" forbids it).
Model load_model_from_bytes(const std::string& bytes, const std::string& base_dir = "", const LoadOptions& options = {},
                            const std::string& label = "<memory>");
// Writes the model as one ONNX file, all tensors inline. Atomic: a crash leaves the old file or the
// new one. Throws IOError naming the path on any write failure.
void save_model(const Model& model, const std::string& path);
std::string serialize_model(const Model& model);

// Fills model.graph.value_info with ONNX shape inference (dtypes and, where derivable, shapes with
// symbolic dims of every intermediate value). Best effort: values it cannot infer stay unlisted.
void infer_shapes(Model& model);

// Tensor <-> serialized onnx.TensorProto (the format of ONNX's test data files input_0.pb).
Tensor load_tensor_proto(const std::string& path);
void save_tensor_proto(const Tensor& tensor, const std::string& name, const std::string& path);

}  // namespace kiln
