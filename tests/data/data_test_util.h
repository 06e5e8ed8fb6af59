// Helpers for the data tests: scratch files (in a kiln::test::TempDir) and Python-written inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::data::testing {

inline std::string write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs a Python snippet with Debian's python3 (which has numpy); fails the test if it fails.
inline void run_python(const std::string& code) {
  const std::string cmd = "/usr/bin/python3 -c \"" + code + "\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n(needs python3-numpy: run scripts/setup.sh)";
}

}  // namespace kiln::data::testing
