#include "onnx/model_key.h"

#include <fmt/format.h>

#include "core/compression.h"
#include "core/content_hash.h"
#include "kiln/onnx_io.h"

namespace kiln {

std::string model_content_key(const Model& model) {
  Model structure = model;
  structure.graph.initializers.clear();
  std::string text = serialize_model(structure);
  uint64_t bytes = text.size();
  for (const auto& [name, t] : model.graph.initializers) {
    const Tensor packed = t.contiguous();
    const std::string_view data(static_cast<const char*>(packed.raw_data()), packed.nbytes());
    text += fmt::format("|{}:{}:{}:{:08x}", name, dtype_name(t.dtype()), to_string(t.shape()), crc32_of(data));
    bytes += data.size();
  }
  return fmt::format("{:016x}{:08x}{:012x}", fnv1a(text), crc32_of(text), bytes & 0xffffffffffffull);
}

}  // namespace kiln
