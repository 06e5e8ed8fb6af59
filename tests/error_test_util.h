// Checks of error messages shared by the tests: run a call that must throw E and get its message.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace kiln::testing {

// The message of the E that f throws; a test failure when f throws something else or nothing.
template <class E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace kiln::testing
