#include "case_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <new>
#include <type_traits>
#include <vector>

#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln::conformance {

namespace fs = std::filesystem;

const char* status_name(Status s) {
  switch (s) {
    case Status::Passed: return "passed";
    case Status::Failed: return "failed";
    case Status::Skipped: return "skipped";
  }
  return "failed";
}

namespace {

// "[1, 0, 2]": the multi-index of flat element i, for mismatch messages.
std::string index_of(const Shape& shape, int64_t flat) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return to_string(idx);
}

// Element i exactly: integers as integers (int64 beyond 2^53 would round as a double).
std::string element_string(const Tensor& t, int64_t i) {
  return visit_dtype(t.dtype(), [&](auto tag) -> std::string {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) return fmt::format("{}", static_cast<const T*>(t.raw_data())[i]);
    else return fmt::format("{}", t.item_as_double(i));
  });
}

bool close_enough(double got, double want, const Tolerance& tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
}

// Files named <prefix><i>.pb in index order (input_10 after input_9).
std::vector<fs::path> numbered_files(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || entry.path().extension() != ".pb") continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 3);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    found.emplace_back(std::stoi(digits), entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i].first != static_cast<int>(i))
      throw Error(fmt::format("{}: {}{}.pb is missing", dir.string(), prefix, i));
    out.push_back(found[i].second);
  }
  return out;
}

std::vector<fs::path> data_sets(const fs::path& case_dir) {
  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(case_dir))
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(entry.path());
  std::sort(sets.begin(), sets.end());
  return sets;
}

// NumPy has no bfloat16, so ONNX's generator stores bfloat16 data as uint16 bit patterns; read them
// back as bfloat16 wherever the model or Kiln's result says bfloat16 (same bits, same size).
Tensor as_bfloat16_if(const Tensor& t, bool want_bfloat16) {
  if (!want_bfloat16 || t.dtype() != DType::Uint16) return t;
  return Tensor::view_of(t.storage(), t.byte_offset(), DType::BFloat16, t.shape());
}

// Cases Kiln does not compare, each with its reason: data that is wrong in ONNX 1.12's generator
// (checked by hand), outputs drawn from numpy's random generator, and deliberate differences.
const std::map<std::string, std::string>& known_bad_cases() {
  static const std::map<std::string, std::string> cases = [] {
    const std::string like = "ONNX 1.12's test data feeds 'like' with shape [1] but the model declares [3, 4]";
    const std::string bn = "deliberate difference: Kiln updates running_var with the unbiased batch variance, as "
                           "PyTorch (and cuDNN) do, where ONNX's reference uses the population variance "
                           "(Y and running_mean match; see src/kernels/cpu/norm.cpp)";
    const std::string dropout = "the expected mask comes from numpy's random generator, which Kiln does not "
                                "reproduce (Kiln's masks come from its own seeded generator)";
    return std::map<std::string, std::string>{{"test_castlike_FLOAT_to_BFLOAT16", like},
                                              {"test_castlike_FLOAT_to_BFLOAT16_expanded", like},
                                              {"test_castlike_BFLOAT16_to_FLOAT", like},
                                              {"test_castlike_BFLOAT16_to_FLOAT_expanded", like},
                                              {"test_cast_FLOAT_to_BFLOAT16",
                                               "ONNX 1.12's expected data truncates float to bfloat16; Kiln rounds to "
                                               "nearest even, as onnx.helper.float32_to_bfloat16 and ONNX Runtime do "
                                               "(onnx/onnx#3876)"},
                                              {"test_batchnorm_example_training_mode", bn},
                                              {"test_batchnorm_epsilon_training_mode", bn},
                                              {"test_training_dropout", dropout},
                                              {"test_training_dropout_default", dropout},
                                              {"test_training_dropout_default_mask", dropout},
                                              {"test_training_dropout_mask", dropout},
                                              {"test_adam_multiple",
                                               "ONNX 1.12's generator computes the expected outputs with epsilon = "
                                               "1e-2 but the Adam node omits the attribute, so the schema default "
                                               "applies (onnx/onnx#7749); with epsilon = 1e-2 added the case passes"}};
  }();
  return cases;
}

// Runs one data set; returns the first mismatch, if any.
std::optional<std::string> run_data_set(Session& session, const fs::path& set, const Tolerance& tol) {
  const std::vector<fs::path> input_files = numbered_files(set, "input_");
  const std::vector<fs::path> output_files = numbered_files(set, "output_");
  const auto& inputs = session.inputs();
  const auto& outputs = session.outputs();
  if (input_files.size() > inputs.size())
    throw Error(fmt::format("{}: {} input files for a model with {} inputs", set.string(), input_files.size(),
                            inputs.size()));
  if (output_files.size() != outputs.size())
    throw Error(fmt::format("{}: {} output files for a model with {} outputs", set.string(), output_files.size(),
                            outputs.size()));
  // The files follow the order of the graph's inputs (ONNX's runner feeds them positionally).
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < input_files.size(); ++i)
    feeds[inputs[i].name] = as_bfloat16_if(load_tensor_proto(input_files[i].string()),
                                           inputs[i].has_type && inputs[i].dtype == DType::BFloat16);
  const std::map<std::string, Tensor> results = session.run(feeds);
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto it = results.find(outputs[i].name);
    if (it == results.end()) return fmt::format("no value for output '{}'", outputs[i].name);
    const Tensor expected =
        as_bfloat16_if(load_tensor_proto(output_files[i].string()), it->second.dtype() == DType::BFloat16);
    if (auto mismatch = compare_tensors(outputs[i].name, it->second, expected, tol))
      return fmt::format("{}: {}", set.filename().string(), *mismatch);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> compare_tensors(const std::string& name, const Tensor& got_in, const Tensor& want_in,
                                           const Tolerance& tol) {
  if (got_in.dtype() != want_in.dtype())
    return fmt::format("output '{}' is {}, expected {}", name, got_in.describe(), want_in.describe());
  if (got_in.shape() != want_in.shape())
    return fmt::format("output '{}' has shape {}, expected {}", name, to_string(got_in.shape()),
                       to_string(want_in.shape()));
  const Tensor got = got_in.contiguous();
  const Tensor want = want_in.contiguous();
  const int64_t n = got.numel();
  const bool exact = !is_floating(got.dtype());
  const size_t esize = dtype_size(got.dtype());
  const auto* gb = static_cast<const unsigned char*>(got.raw_data());
  const auto* wb = static_cast<const unsigned char*>(want.raw_data());
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    // Integers compare as bytes: int64 values beyond 2^53 would collide as doubles.
    const bool ok = exact ? std::memcmp(gb + i * esize, wb + i * esize, esize) == 0
                          : close_enough(got.item_as_double(i), want.item_as_double(i), tol);
    if (ok) continue;
    if (first < 0) first = i;
    ++count;
  }
  if (first < 0) return std::nullopt;
  const double g = got.item_as_double(first), w = want.item_as_double(first);
  std::string detail = exact ? "" : fmt::format(" (|diff| {:.3g} > {:.3g})", std::fabs(g - w),
                                                tol.atol + tol.rtol * std::fabs(w));
  return fmt::format("output '{}' {} element {}: got {}, expected {}{}; {} of {} elements differ", name,
                     got.describe(), index_of(got.shape(), first), element_string(got, first),
                     element_string(want, first), detail, count, n);
}

CaseResult run_case(const std::string& case_dir, const Tolerance& tol) {
  const std::string name = fs::path(case_dir).filename().string();
  if (auto it = known_bad_cases().find(name); it != known_bad_cases().end()) return {Status::Skipped, it->second};
  try {
    Session session(load_model((fs::path(case_dir) / "model.onnx").string()));
    const std::vector<fs::path> sets = data_sets(case_dir);
    if (sets.empty()) return {Status::Failed, "no test_data_set_* folder"};
    for (const fs::path& set : sets)
      if (auto mismatch = run_data_set(session, set, tol)) return {Status::Failed, *mismatch};
    return {Status::Passed, ""};
  } catch (const Unsupported& e) {
    return {Status::Skipped, e.what()};
  } catch (const Error& e) {
    return {Status::Failed, e.what()};
  } catch (const std::bad_alloc&) {
    return {Status::Failed, "out of memory"};
  } catch (const std::exception& e) {
    return {Status::Failed, fmt::format("internal error: {}", e.what())};
  } catch (...) {
    return {Status::Failed, "internal error: unknown exception"};
  }
}

}  // namespace kiln::conformance
