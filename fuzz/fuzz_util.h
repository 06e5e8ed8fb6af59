// Shared by the libFuzzer harnesses (fuzz/*_fuzz.cpp; docs/reliability.md lists them). A harness
// feeds bytes to one reader; the reader must either succeed or throw one of Kiln's errors
// (kiln::Error: InvalidModel, CorruptFile, ...). Anything else is a finding: another exception type
// (an internal error such as nlohmann's or std::out_of_range) aborts with its type and message, and
// crashes, sanitizer reports, leaks, timeouts and memory blow-ups are libFuzzer's own findings.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "kiln/error.h"

namespace kiln::fuzz {

// Runs `f`; a kiln::Error is an expected rejection, any other exception aborts (a finding).
template <class F>
void expect_kiln_errors_only(F&& f) {
  try {
    f();
  } catch (const kiln::Error&) {
    // rejected with a clear error: fine
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: a %s escaped (not a kiln::Error): %s\n", typeid(e).name(), e.what());
    std::abort();
  }
}

// A folder of this process's own for the files a harness writes (in /dev/shm when it exists, so
// that writing a file per input costs microseconds), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path root = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = root / ("kiln-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    static struct Remover {
      fs::path path;
      ~Remover() {
        std::error_code e;
        fs::remove_all(path, e);
      }
    } remover{d};
    return d;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch(const std::string& name, std::string_view bytes);

// The input split at the first occurrences of `sep`: "a\0b\0c" -> {"a", "b", "c"}.
std::vector<std::string> split_bytes(std::string_view bytes, char sep, size_t max_parts = 64);

// A 4-byte little-endian length prefix: the first `length % (size - 4 + 1)` bytes after it and the
// rest. Lets one input carry two files (a model and its external data).
std::pair<std::string_view, std::string_view> split_prefixed(std::string_view bytes);

}  // namespace kiln::fuzz
