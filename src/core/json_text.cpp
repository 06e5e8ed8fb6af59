#include "core/json_text.h"

#include <fmt/format.h>

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

}  // namespace kiln
