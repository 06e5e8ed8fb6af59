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
struct SaveOptions {
  // Where the initializers go. Auto: inside the file, unless they would take it past protobuf's
  // 2 GiB limit; then every initializer of size_threshold bytes or more goes to a data file beside
  // it (ONNX's external data: one file, tensors 64-byte aligned), as Always does. Never: inside,
  // and a model past the limit is an Unsupported error.
  enum class ExternalData { Auto, Always, Never };
  ExternalData external_data = ExternalData::Auto;
  size_t size_threshold = 1024;  // smaller initializers stay inside the model (onnx's default)
};

// Writes the model. Atomic: a crash leaves the old model (with its data file) or the new one. With
// external data the data file is "<file name>.data", or "<file name>.1.data" when the model being
// replaced reads the first: the new data never overwrites what the old model reads, and the old
// data file is removed once the new model is in place. Throws IOError naming the path on any write
// failure.
void save_model(const Model& model, const std::string& path, const SaveOptions& options = {});
std::string serialize_model(const Model& model);

// Fills model.graph.value_info with ONNX shape inference (dtypes and, where derivable, shapes with
// symbolic dims of every intermediate value). Best effort: values it cannot infer stay unlisted.
void infer_shapes(Model& model);

// Tensor <-> serialized onnx.TensorProto (the format of ONNX's test data files input_0.pb).
Tensor load_tensor_proto(const std::string& path);
void save_tensor_proto(const Tensor& tensor, const std::string& name, const std::string& path);
// A value of declared kind `kind` from its serialized form: a TensorProto for a tensor, a
// SequenceProto of tensors for a sequence, an OptionalProto for an optional (ONNX's test data for
// sequence and optional values). `dtype` is the elements' dtype where the file does not say (an
// empty sequence or optional).
Tensor load_value_proto(const std::string& path, ValueKind kind, DType dtype = DType::Float32);

}  // namespace kiln
