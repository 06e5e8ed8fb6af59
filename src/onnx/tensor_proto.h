// onnx.TensorProto <-> kiln::Tensor, and the mapping between ONNX element types and Kiln dtypes.
// Internal to src/onnx: the public entry points are in include/kiln/onnx_io.h.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/tensor.h"

namespace kiln::onnxio {

// The dtype <-> element type mapping is kiln::dtype_from_onnx / kiln::dtype_to_onnx (kiln/dtype.h).
// "float", "string", "complex64", ... or "unknown(N)", for messages.
std::string onnx_type_name(int32_t elem_type);

// Where a tensor's external data may come from. `base_dir` is the folder of the model file; empty
// means the model came from memory and external data is refused. `label` names the model file.
struct TensorSource {
  std::string base_dir;
  std::string label;
};

// Converts one TensorProto (raw_data, the typed *_data fields, or external data) into an owning
// contiguous tensor. Throws InvalidModel for malformed tensors (sizes that do not match the shape,
// negative dims, missing data), Unsupported for string/complex/segmented tensors, IOError for
// unreadable external files; every message names the tensor.
Tensor tensor_from_proto(const onnx::TensorProto& proto, const TensorSource& source);

// Writes `tensor` (any strides) as raw little-endian bytes, the form ONNX recommends.
void tensor_to_proto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto);

// The proto of a tensor whose bytes were written to `location` (relative to the model's folder) at
// `offset`: type, dims and ONNX's external_data entries, no data.
void external_tensor_to_proto(const Tensor& tensor, const std::string& name, const std::string& location,
                              uint64_t offset, onnx::TensorProto* proto);

// True for a tensor whose data lives in another file (data_location EXTERNAL).
bool is_external(const onnx::TensorProto& proto);
// The tensor's shape from its dims; InvalidModel naming it for negative dims or an overflowing count.
Shape proto_shape(const onnx::TensorProto& proto);

}  // namespace kiln::onnxio
