// Parsing JSON that comes from files and flags with limits: nesting depth and size are checked on
// the text before nlohmann's parser sees it, so a crafted file (100 000 nested arrays in a
// safetensors header, scheduler.json or trainer_state.json) is a clear error, not a stack overflow.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kiln {

inline constexpr size_t kMaxJsonDepth = 200;              // arrays and objects inside one another
inline constexpr size_t kMaxJsonBytes = size_t{1} << 30;  // 1 GiB of text

// Throws CorruptFile "<source>: JSON nests deeper than 200 levels (at byte N)" or "...is N bytes,
// more than the limit of ..." when `text` breaks a limit. Brackets inside strings do not count.
void check_json_limits(std::string_view text, const std::string& source);

// check_json_limits, then nlohmann::json::parse; a syntax error is CorruptFile naming `source`.
nlohmann::json parse_json(std::string_view text, const std::string& source);

}  // namespace kiln
