#include "fuzz_util.h"

#include <fstream>

namespace kiln::fuzz {

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<std::string> split_bytes(std::string_view bytes, char sep, size_t max_parts) {
  std::vector<std::string> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = bytes.find(sep);
    if (at == std::string_view::npos) break;
    parts.emplace_back(bytes.substr(0, at));
    bytes.remove_prefix(at + 1);
  }
  parts.emplace_back(bytes);
  return parts;
}

std::pair<std::string_view, std::string_view> split_prefixed(std::string_view bytes) {
  if (bytes.size() < 4) return {bytes, {}};
  uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  bytes.remove_prefix(4);
  const size_t first = n % (bytes.size() + 1);
  return {bytes.substr(0, first), bytes.substr(first)};
}

}  // namespace kiln::fuzz
