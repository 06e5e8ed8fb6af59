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

// Numbers read from files, converted without undefined behaviour (nlohmann's get<int64_t>() of
// 2e47, or get<float>() of 1e300, is a C++ conversion out of range). An integer, or a number with
// an integral value, within the type's range is accepted; anything else is a CorruptFile saying
// that `what` (e.g. "'trainer_state.json': global_step") must be such a number.
int64_t json_int64(const nlohmann::json& v, const std::string& what);
uint64_t json_uint64(const nlohmann::json& v, const std::string& what);
// Any finite number within float's range, or a non-finite one.
float json_float(const nlohmann::json& v, const std::string& what);

}  // namespace kiln
