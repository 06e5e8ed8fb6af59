// Helpers for the data tests: scratch files and error-message checks.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>

#include "kiln/error.h"

namespace kiln::data::testing {

// A fresh folder per test under the system temp dir (tests never read /work/shared).
inline std::filesystem::path scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto dir = std::filesystem::temp_directory_path() /
                   (std::string("kiln_data_") + info->test_suite_name() + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

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

// Runs f, which must throw exactly E (or a subclass) whose message contains every fragment.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing '" << *fragments.begin() << "'";
  } catch (const E& e) {
    for (const std::string& s : fragments)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << "missing '" << s << "' in: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace kiln::data::testing
