// load_value_proto: ONNX's serialized sequence and optional values (onnx.SequenceProto,
// onnx.OptionalProto: the test data of ONNX's sequence and optional cases) as Kiln values.
#include <fmt/format.h>
#include <onnx/onnx-data_pb.h>

#include "core/file_io.h"
#include "kiln/onnx_io.h"
#include "onnx/proto_file.h"
#include "onnx/tensor_proto.h"

namespace kiln {

using namespace onnxio;

namespace {

Tensor sequence_from_proto(const onnx::SequenceProto& proto, DType dtype, const TensorSource& source) {
  if (proto.elem_type() != onnx::SequenceProto::TENSOR && proto.elem_type() != onnx::SequenceProto::UNDEFINED)
    throw Unsupported(fmt::format("a sequence of element type {}: Kiln's sequences hold tensors", proto.elem_type()));
  std::vector<Tensor> elements;
  for (const auto& t : proto.tensor_values()) elements.push_back(tensor_from_proto(t, source));
  return Tensor::sequence(elements.empty() ? dtype : elements[0].dtype(), std::move(elements));
}

Tensor optional_from_proto(const onnx::OptionalProto& proto, ValueKind kind, DType dtype, const TensorSource& source) {
  if (proto.has_tensor_value()) return tensor_from_proto(proto.tensor_value(), source);
  if (proto.has_sequence_value()) return sequence_from_proto(proto.sequence_value(), dtype, source);
  if (proto.elem_type() != onnx::OptionalProto::UNDEFINED && proto.elem_type() != onnx::OptionalProto::TENSOR &&
      proto.elem_type() != onnx::OptionalProto::SEQUENCE)
    throw Unsupported(
        fmt::format("an optional of element type {}: Kiln's optionals hold tensors or sequences", proto.elem_type()));
  const bool sequence = proto.elem_type() == onnx::OptionalProto::SEQUENCE || kind == ValueKind::OptionalSequence;
  return Tensor::none(dtype, sequence ? ValueKind::OptionalSequence : ValueKind::OptionalTensor);
}

}  // namespace

Tensor load_value_proto(const std::string& path, ValueKind kind, DType dtype) {
  if (kind == ValueKind::Tensor) return load_tensor_proto(path);
  const std::string bytes = read_file_bytes(path, "value file");
  const TensorSource source{folder_of(path), path};
  try {
    if (kind == ValueKind::Sequence) {
      onnx::SequenceProto proto;
      if (!parse_message(bytes, &proto))
        throw InvalidModel(fmt::format("not a valid onnx.SequenceProto file: its {} bytes do not parse", bytes.size()));
      return sequence_from_proto(proto, dtype, source);
    }
    onnx::OptionalProto proto;
    if (!parse_message(bytes, &proto))
      throw InvalidModel(fmt::format("not a valid onnx.OptionalProto file: its {} bytes do not parse", bytes.size()));
    return optional_from_proto(proto, kind, dtype, source);
  } catch (Error& e) {
    e.add_context(fmt::format("'{}': ", path));
    throw;
  }
}

}  // namespace kiln
