// safetensors reading and writing. Format (https://github.com/huggingface/safetensors, "Format"):
// an 8-byte little-endian u64 N, N bytes of UTF-8 JSON (starting with '{', possibly padded with
// spaces), then the data buffer. The JSON maps each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} with offsets relative to the data buffer, plus an optional
// "__metadata__" of string -> string. The tensors must cover the buffer exactly: no holes, no
// overlaps, no trailing bytes. Duplicate keys are forbidden and the header is at most 100 MB.
#include "kiln/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "core/json_text.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "Kiln's safetensors I/O copies little-endian bytes straight into tensors");

namespace {

// ordered_json keeps the header's key order, which decides the order of zero-size tensors (they
// share their offsets with a neighbour) and makes written headers list tensors in buffer order.
using Json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr size_t kLengthBytes = 8;
constexpr size_t kDataAlign = 8;  // the reference writer pads the header so the data is 8-aligned
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr std::array<DTypeName, 13> kDTypeNames = {{
    {"BOOL", DType::Bool},
    {"U8", DType::Uint8},
    {"I8", DType::Int8},
    {"I16", DType::Int16},
    {"U16", DType::Uint16},
    {"F16", DType::Float16},
    {"BF16", DType::BFloat16},
    {"I32", DType::Int32},
    {"U32", DType::Uint32},
    {"F32", DType::Float32},
    {"F64", DType::Float64},
    {"I64", DType::Int64},
    {"U64", DType::Uint64},
}};
// In the format but without a Kiln dtype: reading them is Unsupported rather than corrupt.
constexpr std::array<const char*, 8> kForeignDTypes = {"F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3",
                                                       "F6_E3M2", "F4",      "C64",     "I4"};

[[noreturn]] void corrupt(const std::string& source, const std::string& what) {
  throw CorruptFile(fmt::format("'{}' is not a valid safetensors file: {}", source, what));
}

// One tensor entry of the header, validated against the data buffer.
struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A non-negative JSON integer; nlohmann parses those as number_unsigned.
uint64_t get_unsigned(const Json& v, const std::string& source, const std::string& what) {
  if (!v.is_number_unsigned())
    corrupt(source, fmt::format("{} must be a non-negative integer, not {}", what, v.dump()));
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const Json& info, uint64_t data_size, uint64_t data_start,
                  const std::string& source) {
  const std::string label = fmt::format("tensor '{}'", name);
  if (!info.is_object()) corrupt(source, fmt::format("{}: the header entry is {}, not an object", label, info.dump()));
  for (const auto& [key, value] : info.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      corrupt(source, fmt::format("{}: unexpected key '{}' in the header entry", label, key));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) corrupt(source, fmt::format("{}: the header entry has no \"{}\"", label, key));

  Entry e;
  e.name = name;
  const Json& dtype = info["dtype"];
  if (!dtype.is_string()) corrupt(source, fmt::format("{}: \"dtype\" must be a string, not {}", label, dtype.dump()));
  try {
    e.dtype = dtype_from_safetensors_name(dtype.get<std::string>());
  } catch (Error& err) {
    err.add_context(fmt::format("'{}': {}: ", source, label));
    throw;
  }

  const Json& shape = info["shape"];
  if (!shape.is_array()) corrupt(source, fmt::format("{}: \"shape\" must be an array, not {}", label, shape.dump()));
  uint64_t nbytes = dtype_size(e.dtype);
  for (const Json& d : shape) {
    const uint64_t dim = get_unsigned(d, source, label + ": a shape dimension");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(nbytes, dim, &nbytes))
      corrupt(source, fmt::format("{}: shape {} is too large", label, shape.dump()));
    e.shape.push_back(static_cast<int64_t>(dim));
  }

  const Json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    corrupt(source, fmt::format("{}: \"data_offsets\" must be [begin, end], not {}", label, offsets.dump()));
  e.begin = get_unsigned(offsets[0], source, label + ": data_offsets[0]");
  e.end = get_unsigned(offsets[1], source, label + ": data_offsets[1]");
  if (e.end < e.begin) corrupt(source, fmt::format("{}: data_offsets {} end before they begin", label, offsets.dump()));
  if (e.end - e.begin != nbytes)
    corrupt(source, fmt::format("{}: data_offsets {} hold {} bytes but {} {} needs {}", label, offsets.dump(),
                                e.end - e.begin, dtype.get<std::string>(), shape.dump(), nbytes));
  if (e.end > data_size)
    corrupt(source, fmt::format("{}: its data ends at file offset {} but the file has only {} bytes (truncated?)",
                                label, data_start + e.end, data_start + data_size));
  return e;
}

// The header JSON, rejecting duplicate keys at any depth (nlohmann would keep the last silently).
Json parse_header_json(std::string_view text, const std::string& source) {
  std::vector<std::set<std::string>> open_objects;
  auto check_keys = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == Json::parse_event_t::key && !open_objects.back().insert(parsed.get<std::string>()).second) {
      corrupt(source, fmt::format("duplicate key '{}' in the header (file offsets {}..{})", parsed.get<std::string>(),
                                  kLengthBytes, kLengthBytes + text.size()));
    }
    return true;
  };
  check_json_limits(text, source);
  try {
    return Json::parse(text.begin(), text.end(), check_keys);
  } catch (const Json::exception& e) {
    const auto* pe = dynamic_cast<const Json::parse_error*>(&e);
    const size_t at = kLengthBytes + (pe != nullptr && pe->byte > 0 ? pe->byte - 1 : 0);
    corrupt(source, fmt::format("malformed JSON header near file offset {}: {}", at, e.what()));
  }
}

std::map<std::string, std::string> parse_metadata(const Json& meta, const std::string& source) {
  if (!meta.is_object()) corrupt(source, fmt::format("\"__metadata__\" must be an object, not {}", meta.dump()));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      corrupt(source, fmt::format("\"__metadata__\" value of '{}' must be a string, not {}", key, value.dump()));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Validates bytes[0..] and builds the tensors. With `storage` (whose memory is `bytes`), tensors
// are views of it; without, the data buffer is copied once into a new storage they share.
SafetensorsFile parse(std::string_view bytes, const std::string& source, std::shared_ptr<Storage> storage) {
  if (bytes.size() < kLengthBytes)
    corrupt(source,
            fmt::format("{} bytes is too short for the 8-byte header length at offset 0 (truncated?)", bytes.size()));
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), kLengthBytes);
  if (header_size > kMaxHeaderBytes)
    corrupt(source, fmt::format("the header length at offset 0 is {} bytes, more than the format's limit of {}",
                                header_size, kMaxHeaderBytes));
  if (header_size > bytes.size() - kLengthBytes)
    corrupt(source, fmt::format("the header length at offset 0 is {} bytes but only {} bytes follow (truncated?)",
                                header_size, bytes.size() - kLengthBytes));
  const std::string_view text = bytes.substr(kLengthBytes, header_size);
  if (text.empty() || text.front() != '{')
    corrupt(source, fmt::format("the header at file offset {} does not start with '{{'", kLengthBytes));
  const Json header = parse_header_json(text, source);
  if (!header.is_object()) corrupt(source, "the header is not a JSON object");

  const uint64_t data_start = kLengthBytes + header_size;
  const uint64_t data_size = bytes.size() - data_start;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) out.metadata = parse_metadata(info, source);
    else entries.push_back(parse_entry(name, info, data_size, data_start, source));
  }

  // Stable: zero-size tensors sharing an offset keep the header's order.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin > covered)
      corrupt(source, fmt::format("file offsets {}..{} belong to no tensor (a hole before tensor '{}')",
                                  data_start + covered, data_start + e.begin, e.name));
    if (e.begin < covered)
      corrupt(source, fmt::format("tensor '{}' at file offset {} overlaps tensor '{}', which ends at {}", e.name,
                                  data_start + e.begin, previous->name, data_start + covered));
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size)
    corrupt(source, fmt::format("{} trailing bytes after the last tensor, from file offset {}", data_size - covered,
                                data_start + covered));

  size_t base = data_start;  // where the data buffer sits in `storage`
  if (storage == nullptr) {
    storage = Storage::allocate(data_size);
    if (data_size > 0) std::memcpy(storage->data(), bytes.data() + data_start, data_size);
    base = 0;
  }
  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    const size_t at = base + e.begin;
    Tensor t = Tensor::view_of(storage, at, e.dtype, e.shape);
    // Offsets need not be multiples of the element size (packed files); such tensors get their
    // own aligned copy, because kernels read elements through typed pointers.
    if (at % dtype_size(e.dtype) != 0) t = t.clone();
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

// The length prefix and the padded JSON header; `tensors` are validated here, before any write.
std::string build_header(const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey)
      throw InvalidArgument("safetensors: a tensor cannot be named \"__metadata__\" (the format reserves it)");
    if (!seen.insert(name).second)
      throw InvalidArgument(fmt::format("safetensors: tensor name '{}' is used twice", name));
    if (!tensor.defined()) throw InvalidArgument(fmt::format("safetensors: tensor '{}' is undefined", name));
    const uint64_t end = offset + tensor.nbytes();
    header[name] = {
        {"dtype", safetensors_dtype_name(tensor.dtype())}, {"shape", tensor.shape()}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {  // invalid UTF-8 in a name or a metadata string
    throw InvalidArgument(fmt::format("safetensors: the header cannot be written as JSON: {}", e.what()));
  }
  text.append((kDataAlign - (kLengthBytes + text.size()) % kDataAlign) % kDataAlign, ' ');
  const uint64_t size = text.size();
  std::string out(kLengthBytes, '\0');
  std::memcpy(out.data(), &size, kLengthBytes);
  return out + text;
}

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  throw InvalidArgument(fmt::format("safetensors has no dtype for Kiln dtype code {}", static_cast<int>(dtype)));
}

DType dtype_from_safetensors_name(const std::string& name) {
  for (const DTypeName& d : kDTypeNames)
    if (name == d.name) return d.dtype;
  for (const char* foreign : kForeignDTypes)
    if (name == foreign) throw Unsupported(fmt::format("safetensors dtype {} has no Kiln equivalent", name));
  throw CorruptFile(fmt::format("unknown safetensors dtype '{}'", name));
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source) {
  return parse(bytes, source, nullptr);
}

SafetensorsFile read_safetensors(const std::string& path) {
  // The file is read whole into one storage that the tensors then view (no second copy).
  const ReadOnlyFile file(path, "safetensors file");
  const size_t size = static_cast<size_t>(file.size());
  std::shared_ptr<Storage> storage = Storage::allocate(size);
  char* p = static_cast<char*>(storage->data());
  file.read_at(p, size, 0);
  return parse(std::string_view(p, size), path, std::move(storage));
}

std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string out = build_header(tensors, metadata);
  size_t total = out.size();
  for (const auto& entry : tensors) total += entry.second.nbytes();
  out.reserve(total);
  for (const auto& entry : tensors) {
    const Tensor t = entry.second.contiguous();
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(tensors, metadata);
  AtomicFile file(path);
  file.write(header);
  for (const auto& entry : tensors) {
    const Tensor t = entry.second.contiguous();  // a copy only for a strided tensor, one at a time
    file.write(t.raw_data(), t.nbytes());
  }
  file.commit();
}

}  // namespace kiln
