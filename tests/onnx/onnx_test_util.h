// Helpers shared by the ONNX import/export tests: file I/O (scratch folders are kiln::test::TempDir).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::onnx_test {

namespace fs = std::filesystem;

// Writes `bytes` to `p`, creating its folders; gives the path.
inline std::string write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

inline std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace kiln::onnx_test
