#include "onnx/proto_file.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>

#include <climits>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::onnxio {

bool parse_message(const std::string& bytes, google::protobuf::MessageLite* message) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) return false;
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(bytes.size()));
  stream.SetTotalBytesLimit(INT_MAX);
  stream.SetRecursionLimit(kMaxProtoDepth);  // subgraphs in subgraphs: bounded, never a stack overflow
  return message->ParseFromCodedStream(&stream) && stream.ConsumedEntireMessage();
}

std::string folder_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

std::string one_line(const std::string& text) {
  std::string out;
  bool blank = false;
  for (char c : text) {
    const bool space = c == '\n' || c == '\r' || c == '\t' || c == ' ';
    if (space) {
      blank = !out.empty();
      continue;
    }
    if (blank) out += ' ';
    blank = false;
    out += c;
  }
  return out;
}

}  // namespace kiln::onnxio
