// The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header (name -> {"dtype", "shape", "data_offsets"}, plus an optional
// "__metadata__" of string -> string), then the tensor bytes. Kiln's checkpoints and weight files
// use it, so any safetensors reader can open them.
//
//   kiln::SafetensorsFile f = kiln::read_safetensors("model.safetensors");
//   for (const auto& [name, t] : f.tensors) std::cout << name << " " << t.describe() << "\n";
//   kiln::write_safetensors("out.safetensors", f.tensors, {{"format", "pt"}});   // atomic
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of their data offsets
  std::map<std::string, std::string> metadata;
};

// Throws IOError when the file cannot be read and CorruptFile naming the file and the byte offset
// (or the tensor) when the header or the data is malformed or truncated.
SafetensorsFile read_safetensors(const std::string& path);
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source);

// Writes atomically (temporary file, fsync, rename). Tensors are written packed, in the given
// order; names must be unique and not "__metadata__".
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// safetensors dtype names ("F32", "I64", "BF16", ...) and back; InvalidArgument / CorruptFile for
// names and dtypes the format does not have.
std::string safetensors_dtype_name(DType dtype);
DType dtype_from_safetensors_name(const std::string& name);

}  // namespace kiln
