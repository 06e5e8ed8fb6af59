// Parsing protobuf messages of any size (internal to src/onnx).
#pragma once

#include <google/protobuf/message_lite.h>

#include <string>

namespace kiln::onnxio {

// Messages nested deeper than this (graphs in If/Loop attributes in graphs...) are refused.
inline constexpr int kMaxProtoDepth = 100;

// Parses `bytes` into `message` with the total-size limit raised to protobuf's 2 GiB maximum (the
// default 64 MiB rejects ordinary large models). Returns false for malformed or truncated bytes,
// trailing garbage after the message, or nesting deeper than kMaxProtoDepth.
bool parse_message(const std::string& bytes, google::protobuf::MessageLite* message);

// The folder of a file path, for resolving external data: "dir/model.onnx" -> "dir", "model.onnx" -> ".".
std::string folder_of(const std::string& path);

// Collapses a multi-line message (the ONNX checker adds "\n\n==> Context: ...") into one line.
std::string one_line(const std::string& text);

}  // namespace kiln::onnxio
