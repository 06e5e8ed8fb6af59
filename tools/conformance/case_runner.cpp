#include "case_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln::conformance {

namespace fs = std::filesystem;

const char* status_name(Status s) {
  switch (s) {
    case Status::Passed:
      return "passed";
    case Status::Failed:
      return "failed";
    case Status::Skipped:
      return "skipped";
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

// Strings compare exactly.
std::optional<std::string> compare_strings(const std::string& name, const Tensor& got, const Tensor& want) {
  const auto* g = got.data<std::string>();
  const auto* w = want.data<std::string>();
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (g[i] != w[i] && count++ == 0) first = i;
  if (first < 0) return std::nullopt;
  return fmt::format("output '{}' {} element {}: got \"{}\", expected \"{}\"; {} of {} elements differ", name,
                     got.describe(), index_of(got.shape(), first), g[first], w[first], count, got.numel());
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
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
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

// Runs one data set; returns the first mismatch, if any.
std::optional<std::string> run_data_set(Session& session, const fs::path& set, const Tolerance& tol) {
  const std::vector<fs::path> input_files = numbered_files(set, "input_");
  const std::vector<fs::path> output_files = numbered_files(set, "output_");
  const auto& inputs = session.inputs();
  const auto& outputs = session.outputs();
  if (input_files.size() > inputs.size())
    throw Error(
        fmt::format("{}: {} input files for a model with {} inputs", set.string(), input_files.size(), inputs.size()));
  if (output_files.size() != outputs.size())
    throw Error(fmt::format("{}: {} output files for a model with {} outputs", set.string(), output_files.size(),
                            outputs.size()));
  // The files follow the order of the graph's inputs (ONNX's runner feeds them positionally).
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < input_files.size(); ++i)
    feeds[inputs[i].name] = as_bfloat16_if(load_value_proto(input_files[i].string(), inputs[i].kind, inputs[i].dtype),
                                           inputs[i].has_type && inputs[i].dtype == DType::BFloat16);
  const std::map<std::string, Tensor> results = session.run(feeds);
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto it = results.find(outputs[i].name);
    if (it == results.end()) return fmt::format("no value for output '{}'", outputs[i].name);
    const Tensor expected =
        as_bfloat16_if(load_value_proto(output_files[i].string(), outputs[i].kind, outputs[i].dtype),
                       it->second.dtype() == DType::BFloat16);
    if (auto mismatch = compare_values(outputs[i].name, it->second, expected, tol))
      return fmt::format("{}: {}", set.filename().string(), *mismatch);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> compare_values(const std::string& name, const Tensor& got, const Tensor& expected,
                                          const Tolerance& tol) {
  if (got.kind() != expected.kind())
    return fmt::format("output '{}' is {}, expected {}", name, got.describe(), expected.describe());
  if (got.is_none()) return std::nullopt;
  if (got.is_tensor()) return compare_tensors(name, got, expected, tol);
  const std::vector<Tensor>&g = got.elements(), &w = expected.elements();
  if (g.size() != w.size()) return fmt::format("output '{}' holds {} tensors, expected {}", name, g.size(), w.size());
  for (size_t k = 0; k < g.size(); ++k)
    if (auto mismatch = compare_tensors(fmt::format("{}[{}]", name, k), g[k], w[k], tol)) return mismatch;
  return std::nullopt;
}

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
  if (got.dtype() == DType::String) return compare_strings(name, got, want);
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
  std::string detail =
      exact ? "" : fmt::format(" (|diff| {:.3g} > {:.3g})", std::fabs(g - w), tol.atol + tol.rtol * std::fabs(w));
  return fmt::format("output '{}' {} element {}: got {}, expected {}{}; {} of {} elements differ", name, got.describe(),
                     index_of(got.shape(), first), element_string(got, first), element_string(want, first), detail,
                     count, n);
}

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "[skip] REASON" or "[raises ERROR] REASON"; nullopt for any other line or an empty reason.
std::optional<KnownBad> parse_header(const std::string& line) {
  const size_t close = line.find(']');
  if (line.empty() || line[0] != '[' || close == std::string::npos) return std::nullopt;
  const std::string tag = line.substr(1, close - 1);
  KnownBad group;
  group.reason = trimmed(line.substr(close + 1));
  if (tag == "skip") group.skip = true;
  else if (tag.starts_with("raises ") && tag.size() > 7) group.raises = tag.substr(7);
  else return std::nullopt;
  if (group.reason.empty()) return std::nullopt;
  return group;
}

}  // namespace

std::map<std::string, KnownBad> load_known_bad(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read the known-bad list '{}'", path));
  std::map<std::string, KnownBad> cases;
  std::optional<KnownBad> group;
  std::string raw;
  for (int number = 1; std::getline(in, raw); ++number) {
    const std::string line = trimmed(raw);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}: ", path, number);
    if (line[0] == '[') {
      group = parse_header(line);
      if (!group)
        throw std::runtime_error(where + fmt::format("'{}' is not a [skip] or [raises ERROR] header "
                                                     "followed by a reason",
                                                     line));
    } else if (!group) {
      throw std::runtime_error(where + fmt::format("case '{}' comes before any [skip] or [raises ERROR] header", line));
    } else if (!cases.emplace(line, *group).second) {
      throw std::runtime_error(where + fmt::format("case '{}' is listed twice", line));
    }
  }
  return cases;
}

CaseResult run_case(const std::string& case_dir, const Tolerance& tol) {
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
