// What the tokenizer folders share: reading a JSON file with clear errors, and the special-token
// maps of tokenizer_config.json / special_tokens_map.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kiln/tokenizers.h"

namespace kiln::text {

// The JSON of a file; IOError when it cannot be read, CorruptFile naming it when it does not parse.
nlohmann::json parse_json_file(const std::string& path, const char* what);
// {"bos_token": ..., ...} for the roles that are set.
nlohmann::json special_tokens_json(const SpecialTokens& s);
// Roles named in `j` (a string or an {"content": ...} object each) override those of `s`.
void read_special_tokens(const nlohmann::json& j, SpecialTokens& s);

}  // namespace kiln::text
