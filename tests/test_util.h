// What every test shares: checks that a call throws exactly the expected kiln error with a message
// that says what is wrong, and a temporary folder that cleans up after itself.
//
//   kiln::test::expect_error<kiln::ShapeError>([&] { session.run(feeds); }, "expects shape float[2, 3]");
//   const std::string m = kiln::test::error_message<kiln::IOError>([&] { load_npy(p); });
//   kiln::test::TempDir dir;  // a fresh folder under the system temp dir; dir / "a.onnx"
#pragma once

#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <typeinfo>
#include <utility>

#include "kiln/tensor.h"

namespace kiln::test {

// Where a check was called from, like SourceLocation, which clang 14 (the sanitizer presets'
// compiler) cannot build with libstdc++ 12. As a defaulted argument, current() names the caller.
class SourceLocation {
 public:
  static SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return SourceLocation(file, line);
  }
  const char* file_name() const { return file_; }
  unsigned line() const { return line_; }

 private:
  SourceLocation(const char* file, unsigned line) : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};

// The readable name of a type ("kiln::ShapeError", not "N4kiln10ShapeErrorE").
inline std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : type.name();
}

inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the error fn throws, which must be exactly an E: a subclass or a base of E is a
// test failure, as is no error. The failure names the thrown type and message, at the caller's line.
template <class E, class F>
std::string error_message(F&& fn, const SourceLocation& where = SourceLocation::current()) {
  try {
    fn();
  } catch (const std::exception& e) {
    if (typeid(e) != typeid(E))
      ADD_FAILURE_AT(where.file_name(), where.line())
          << "expected " << type_name(typeid(E)) << ", got " << type_name(typeid(e)) << ": " << e.what();
    return e.what();
  } catch (...) {
    ADD_FAILURE_AT(where.file_name(), where.line())
        << "expected " << type_name(typeid(E)) << ", got an exception that is not a std::exception";
    return "";
  }
  ADD_FAILURE_AT(where.file_name(), where.line()) << "expected " << type_name(typeid(E)) << ", nothing was thrown";
  return "";
}

// fn must throw exactly an E whose message contains every one of `fragments`. Gives the message, for
// checks of its own.
template <class E, class F>
std::string expect_error(F&& fn, std::initializer_list<std::string> fragments,
                         const SourceLocation& where = SourceLocation::current()) {
  const std::string message = error_message<E>(std::forward<F>(fn), where);
  for (const std::string& fragment : fragments)
    if (!has(message, fragment))
      ADD_FAILURE_AT(where.file_name(), where.line())
          << type_name(typeid(E)) << " message lacks \"" << fragment << "\": " << message;
  return message;
}

// fn must throw exactly an E whose message contains `fragment`.
template <class E, class F>
std::string expect_error(F&& fn, const std::string& fragment, const SourceLocation& where = SourceLocation::current()) {
  return expect_error<E>(std::forward<F>(fn), std::initializer_list<std::string>{fragment}, where);
}

// A fresh empty folder under the system temp dir (unique, so parallel test runs never share one),
// removed with everything in it when the TempDir goes.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kiln-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover temp folder is harmless
    std::filesystem::remove_all(path_, ignored);
  }

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// ||got - want|| / ||want|| over two float32 tensors of one shape (the error of a lower-precision
// computation as a whole).
inline double relative_l2(const kiln::Tensor& got, const kiln::Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = double(got.data<float>()[i]) - want.data<float>()[i];
    num += d * d;
    den += double(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(num / (den > 1e-30 ? den : 1e-30));
}

// A unique folder for this test process, removed with everything in it when the process ends:
// the root of the named folders that fixtures reuse within one test (fresh(), fresh_dir()).
inline const std::filesystem::path& process_temp_root() {
  static const TempDir root("kiln-tests");
  return root.path();
}

}  // namespace kiln::test
