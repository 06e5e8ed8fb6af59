// .npy and .npz datasets. The arrays are parsed by Kiln's .npy reader (kiln/npy.h); this file adds
// the zip container and turns a malformed array into a CorruptFile naming the file and the byte
// offset of the part (magic, header, data) that is wrong.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "core/file_io.h"
#include "core/zip.h"
#include "kiln/data.h"
#include "kiln/npy.h"

namespace kiln::data {
namespace {

// The byte offset (within the .npy bytes) of the part that made parse_npy fail: the magic at 0, a
// truncated prefix or header at the end of the bytes, the header dict after the prefix, or the data.
size_t npy_fault_offset(const std::string& bytes, const std::string& label) {
  constexpr char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 6 || std::memcmp(bytes.data(), kMagic, 6) != 0) return 0;
  const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(bytes[i])); };
  const size_t prefix = bytes.size() > 6 && byte(6) >= 2 ? 12 : 10;
  if (bytes.size() < prefix) return bytes.size();
  const size_t header_len =
      prefix == 10 ? (byte(8) | byte(9) << 8) : (byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24);
  if (bytes.size() < prefix + header_len) return bytes.size();
  // Parse the header alone: an IOError then means the header is fine and the data is short.
  try {
    parse_npy(bytes.substr(0, prefix + header_len), label);
  } catch (const IOError&) {
    return prefix + header_len;
  } catch (const Error&) {
    return prefix;
  }
  return prefix + header_len;  // a good header with data left over
}

// parse_npy, with malformed input reported as CorruptFile at a byte offset: of the file when the
// array is stored as is (`base` is where it starts), of the decompressed member when `deflated`.
// Unsupported (a dtype or layout Kiln lacks) passes through.
Tensor parse_npy_at(const std::string& bytes, const std::string& label, size_t base, bool deflated) {
  try {
    return parse_npy(bytes, label);
  } catch (const Unsupported&) {
    throw;
  } catch (const Error& e) {
    const size_t offset = npy_fault_offset(bytes, label);
    const std::string where =
        deflated
            ? fmt::format("byte offset {} of the decompressed member (compressed data at byte offset {})", offset, base)
            : fmt::format("byte offset {}", base + offset);
    // parse_npy already starts its message with the label; say it once.
    std::string what = e.what();
    if (what.rfind(label + ": ", 0) == 0) what.erase(0, label.size() + 2);
    throw CorruptFile(fmt::format("{}: bad .npy array at {}: {}", label, where, what));
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<TensorDataset> load_npz(const std::string& path, const std::map<std::string, std::string>& columns) {
  const ZipArchive zip(path);
  // np.savez names each array's member "<name>.npy".
  std::map<std::string, const ZipMember*> arrays;
  for (const ZipMember& m : zip.members())
    if (ends_with(m.name, ".npy")) arrays.emplace(m.name.substr(0, m.name.size() - 4), &m);
  std::vector<std::string> available;
  available.reserve(arrays.size());
  for (const auto& [name, member] : arrays) available.push_back(name);

  std::map<std::string, std::string> wanted = columns;  // array name -> column name
  if (wanted.empty())
    for (const std::string& name : available) wanted.emplace(name, name);
  if (wanted.empty()) throw CorruptFile(fmt::format("'{}' holds no .npy arrays", path));

  std::map<std::string, Tensor> tensors;
  for (const auto& [array, column] : wanted) {
    auto it = arrays.find(array);
    if (it == arrays.end())
      throw KeyError(fmt::format("'{}' has no array '{}' (it has: {})", path, array, fmt::join(available, ", ")));
    if (tensors.count(column))
      throw InvalidArgument(fmt::format("load_npz('{}'): two arrays map to column '{}'", path, column));
    const ZipMember& m = *it->second;
    const std::string label = fmt::format("'{}' member '{}'", path, m.name);
    tensors.emplace(column, parse_npy_at(zip.read(m), label, zip.data_offset(m), m.method != 0));
  }
  return std::make_shared<TensorDataset>(std::move(tensors));
}

std::shared_ptr<TensorDataset> load_npy(const std::map<std::string, std::string>& paths_by_column) {
  if (paths_by_column.empty()) throw InvalidArgument("load_npy: no files given");
  std::map<std::string, Tensor> tensors;
  for (const auto& [column, path] : paths_by_column)
    tensors.emplace(column, parse_npy_at(read_file_bytes(path, ".npy file"), fmt::format("'{}'", path), 0, false));
  return std::make_shared<TensorDataset>(std::move(tensors));
}

}  // namespace kiln::data
