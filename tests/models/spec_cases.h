// Export harnesses driven by the Python parity tests: a JSON spec file (named by an environment
// variable the Python test sets) lists cases, each exported by the test's own function.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln::testing {

// Calls `export_case` for every entry of the spec's "cases", each traced with its "onnx" path.
// Skips the test when `variable` is unset (`driver` names the Python test that sets it).
inline void run_spec_cases(const char* variable, const char* driver,
                           const std::function<void(const nlohmann::json&)>& export_case) {
  const char* spec_path = std::getenv(variable);
  if (spec_path == nullptr) GTEST_SKIP() << variable << " is not set (" << driver << " sets it)";
  std::ifstream f(spec_path);
  ASSERT_TRUE(f) << spec_path;
  const nlohmann::json spec = nlohmann::json::parse(f);
  for (const nlohmann::json& c : spec.at("cases")) {
    SCOPED_TRACE(c.at("onnx").get<std::string>());
    export_case(c);
  }
}

}  // namespace kiln::testing
