#include "core/json_text.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kiln/error.h"

namespace kiln {

void check_json_limits(std::string_view text, const std::string& source) {
  if (text.size() > kMaxJsonBytes)
    throw CorruptFile(
        fmt::format("{}: the JSON text is {} bytes, more than the limit of {}", source, text.size(), kMaxJsonBytes));
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw CorruptFile(
            fmt::format("{}: the JSON nests deeper than {} levels (at byte {})", source, kMaxJsonDepth, i));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  check_json_limits(text, source);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw CorruptFile(fmt::format("{}: malformed JSON: {}", source, e.what()));
  }
}

namespace {

[[noreturn]] void not_a(const nlohmann::json& v, const std::string& what, const char* kind) {
  std::string shown = v.dump();
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  throw CorruptFile(fmt::format("{} must be {}, not {}", what, kind, shown));
}

// An integral double in [lo, hi): exact bounds, as powers of two are exact doubles.
bool integral_in(double d, double lo, double hi) { return std::isfinite(d) && d == std::trunc(d) && d >= lo && d < hi; }

}  // namespace

int64_t json_int64(const nlohmann::json& v, const std::string& what) {
  constexpr const char* kind = "an integer of 64 bits";
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) not_a(v, what, kind);
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && integral_in(v.get<double>(), -0x1p63, 0x1p63))
    return static_cast<int64_t>(v.get<double>());
  not_a(v, what, kind);
}

uint64_t json_uint64(const nlohmann::json& v, const std::string& what) {
  constexpr const char* kind = "a non-negative integer of 64 bits";
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    if (v.get<int64_t>() < 0) not_a(v, what, kind);
    return static_cast<uint64_t>(v.get<int64_t>());
  }
  if (v.is_number_float() && integral_in(v.get<double>(), 0, 0x1p64)) return static_cast<uint64_t>(v.get<double>());
  not_a(v, what, kind);
}

float json_float(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number()) not_a(v, what, "a number");
  const double d = v.get<double>();
  if (std::isfinite(d) && std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
    not_a(v, what, "a number within float's range");
  return static_cast<float>(d);
}

}  // namespace kiln
