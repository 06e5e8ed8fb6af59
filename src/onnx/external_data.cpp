#include "onnx/external_data.h"

#include <fcntl.h>
#include <fmt/format.h>

#include "core/file_io.h"
#include "kiln/error.h"

namespace kiln::onnxio {

namespace fs = std::filesystem;

namespace {

uint64_t parse_unsigned(const std::string& tensor, const std::string& key, const std::string& value) {
  // std::stoull accepts "-1" (wrapping it) and leading blanks; external data offsets must be plain digits.
  bool ok = !value.empty() && value.size() <= 20;
  for (char c : value) ok = ok && c >= '0' && c <= '9';
  uint64_t v = 0;
  if (ok) {
    try {
      v = std::stoull(value);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok)
    throw InvalidModel(
        fmt::format("tensor '{}': external data {} '{}' is not a non-negative integer", tensor, key, value));
  return v;
}

[[noreturn]] void outside(const std::string& tensor, const std::string& location, const std::string& base_dir,
                          const std::string& why) {
  throw InvalidModel(
      fmt::format("tensor '{}': external data location '{}' is outside the model's folder '{}' ({}); "
                  "external data must be a relative path inside the model's folder",
                  tensor, location, base_dir, why));
}

void check_range(const ExternalDataRef& ref, const std::string& tensor_name, uint64_t nbytes, uint64_t file_size) {
  if (ref.offset > file_size)
    throw InvalidModel(fmt::format("tensor '{}': external data offset {} lies beyond the end of '{}' ({} bytes)",
                                   tensor_name, ref.offset, ref.location, file_size));
  const uint64_t length = ref.length.value_or(file_size - ref.offset);
  if (length > file_size - ref.offset)
    throw InvalidModel(fmt::format("tensor '{}': external data range [{}, {}) lies beyond the end of '{}' ({} bytes)",
                                   tensor_name, ref.offset, ref.offset + length, ref.location, file_size));
  if (length != nbytes)
    throw InvalidModel(fmt::format("tensor '{}' needs {} bytes but its external data in '{}' is {} bytes long",
                                   tensor_name, nbytes, ref.location, length));
}

}  // namespace

ExternalDataRef resolve_external_data(const onnx::TensorProto& proto, const std::string& base_dir) {
  const std::string& name = proto.name();
  ExternalDataRef ref;
  bool has_location = false;
  for (const auto& entry : proto.external_data()) {
    if (entry.key() == "location") {
      ref.location = entry.value();
      has_location = true;
    } else if (entry.key() == "offset") {
      ref.offset = parse_unsigned(name, "offset", entry.value());
    } else if (entry.key() == "length") {
      ref.length = parse_unsigned(name, "length", entry.value());
    }
    // "checksum" and unknown keys carry nothing Kiln needs.
  }
  if (!has_location || ref.location.empty())
    throw InvalidModel(fmt::format("tensor '{}' is stored externally but has no 'location' entry", name));
  if (base_dir.empty())
    throw InvalidModel(
        fmt::format("tensor '{}' is stored in external data file '{}', but the model was parsed from "
                    "memory without a base folder; load it with load_model(path) or pass base_dir",
                    name, ref.location));
  // A NUL would silently cut the path at the system-call boundary.
  if (ref.location.find('\0') != std::string::npos)
    throw InvalidModel(fmt::format("tensor '{}': external data location contains a NUL byte", name));

  const fs::path loc(ref.location);
  if (loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())
    outside(name, ref.location, base_dir, "an absolute path");
  for (const auto& part : loc)
    if (part == "..") outside(name, ref.location, base_dir, "it contains '..'");

  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::absolute(base_dir), ec);
  if (ec)
    throw IOError(fmt::format("tensor '{}': cannot resolve the model's folder '{}': {}", name, base_dir, ec.message()));
  ref.resolved = fs::weakly_canonical(root / loc, ec);
  if (ec)
    throw IOError(fmt::format("tensor '{}': cannot resolve external data location '{}' in '{}': {}", name, ref.location,
                              base_dir, ec.message()));
  // Symlinks are resolved above, so this catches links inside the folder that point out of it.
  const fs::path rel = ref.resolved.lexically_relative(root);
  if (rel.empty() || *rel.begin() == ".." || rel == ".")
    outside(name, ref.location, base_dir, fmt::format("it resolves to '{}'", ref.resolved.string()));

  const fs::file_status st = fs::status(ref.resolved, ec);
  if (!fs::exists(st))
    throw IOError(
        fmt::format("external data file '{}' for tensor '{}' not found in '{}'", ref.location, name, base_dir));
  if (!fs::is_regular_file(st))
    throw InvalidModel(fmt::format("tensor '{}': external data location '{}' in '{}' is not a regular file", name,
                                   ref.location, base_dir));
  return ref;
}

void check_external_range(const ExternalDataRef& ref, const std::string& tensor_name, uint64_t nbytes) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(ref.resolved, ec);
  if (ec)
    throw IOError(fmt::format("cannot read the size of external data file '{}' for tensor '{}': {}",
                              ref.resolved.string(), tensor_name, ec.message()));
  check_range(ref, tensor_name, nbytes, static_cast<uint64_t>(size));
}

void read_external_data(const ExternalDataRef& ref, const std::string& tensor_name, void* dst, size_t nbytes) {
  // O_NOFOLLOW: `resolved` is canonical, so a symlink here means the folder changed after the check.
  const ReadOnlyFile file(ref.resolved.string(), fmt::format("external data file for tensor '{}'", tensor_name),
                          O_NOFOLLOW);
  check_range(ref, tensor_name, nbytes, file.size());
  file.read_at(dst, nbytes, ref.offset);
}

}  // namespace kiln::onnxio
