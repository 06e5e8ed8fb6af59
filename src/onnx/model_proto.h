// Kiln's IR -> onnx.ModelProto (saver.cpp), for save_model and shape inference (internal to src/onnx).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>

#include "kiln/graph.h"

namespace kiln::onnxio {

// Initializers written as references to bytes in `location` (ONNX's external data) instead of with
// their bytes: name -> offset in the file.
struct ExternalLayout {
  std::string location;
  std::map<std::string, uint64_t> offsets;
};

// The model as a proto, every tensor inline except the top-level initializers `external` names.
onnx::ModelProto model_to_proto(const Model& model, const ExternalLayout* external = nullptr);

// The message's bytes; Unsupported naming `what` past protobuf's 2 GiB limit.
std::string serialize_message(const google::protobuf::MessageLite& message, const std::string& what);

}  // namespace kiln::onnxio
