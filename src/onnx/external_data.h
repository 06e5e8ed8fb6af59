// Tensors whose bytes live beside the model (TensorProto.data_location = EXTERNAL, with the keys
// "location", "offset" and "length"). The location comes from an untrusted file, so it is confined
// to the model's folder: absolute paths, ".." and symlinks leading out are refused (ONNX Runtime's
// path-traversal CVEs came from trusting it).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace kiln::onnxio {

struct ExternalDataRef {
  std::string location;            // as written in the model
  std::filesystem::path resolved;  // canonical path inside the model's folder
  uint64_t offset = 0;
  std::optional<uint64_t> length;  // absent: to the end of the file
};

// Parses the external_data entries and confines the location to `base_dir`. Throws InvalidModel
// (naming tensor and location) for a missing/absolute/escaping location or bad offset/length
// values, and when `base_dir` is empty (a model parsed from memory has no folder to read from);
// IOError when the file does not exist.
ExternalDataRef resolve_external_data(const onnx::TensorProto& proto, const std::string& base_dir);

// Checks, before anything is allocated, that the reference's range lies inside the file and is
// exactly `nbytes` long; InvalidModel naming the tensor and location otherwise.
void check_external_range(const ExternalDataRef& ref, const std::string& tensor_name, uint64_t nbytes);

// Reads exactly `nbytes` bytes at the reference's offset into `dst`. Throws InvalidModel when the
// range lies beyond the end of the file or its length differs from `nbytes`, IOError on read errors.
void read_external_data(const ExternalDataRef& ref, const std::string& tensor_name, void* dst, size_t nbytes);

}  // namespace kiln::onnxio
