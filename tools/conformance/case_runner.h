// One ONNX backend conformance case: a folder with model.onnx and test_data_set_*/ holding
// input_<i>.pb and output_<i>.pb (serialized TensorProtos, or Sequence- / OptionalProtos for those types), run with a
// kiln::Session and compared with ONNX's own tolerances.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "kiln/tensor.h"

namespace kiln::conformance {

enum class Status { Passed, Failed, Skipped };
const char* status_name(Status s);

struct CaseResult {
  Status status = Status::Failed;
  std::string reason;  // empty when passed
};

// ONNX's backend test uses np.testing.assert_allclose(expected, got, rtol=1e-3, atol=1e-7).
struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-7;
};

// Never throws: kiln::Unsupported makes the case skipped, any other failure makes it failed.
CaseResult run_case(const std::string& case_dir, const Tolerance& tol = {});

// One entry of the known-bad list, tools/conformance/known_bad.txt (the format is described at its
// top; tests/python/backend_expectations.py reads the same file).
struct KnownBad {
  bool skip = false;   // [skip]: not run; the case is reported as skipped with `reason`
  std::string raises;  // [raises ERROR]: the kiln error the Python backend test expects; run as any case
  std::string reason;
};

// Case name -> entry. Throws std::runtime_error naming the file and line of a malformed entry.
std::map<std::string, KnownBad> load_known_bad(const std::string& path);

// nullopt when `got` matches `expected`: same dtype and shape; floats within
// |got - expected| <= atol + rtol * |expected| with NaN equal to NaN; integers and bools exact.
// Otherwise the first mismatch (index, both values) and how many elements differ.
std::optional<std::string> compare_tensors(const std::string& name, const Tensor& got, const Tensor& expected,
                                           const Tolerance& tol);
// The same for any value: sequences element by element (equal lengths), optionals both empty or
// both holding matching values.
std::optional<std::string> compare_values(const std::string& name, const Tensor& got, const Tensor& expected,
                                          const Tolerance& tol);

}  // namespace kiln::conformance
