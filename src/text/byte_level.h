// Byte-level BPE's two fixed pieces, as GPT-2's encoder defines them: the pre-tokenizer pattern
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (matched by hand, with
// the regex's alternation order and backtracking), and the map of each byte to a printable
// character (bytes_to_unicode) that makes a word's bytes a string of vocabulary symbols.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::text {

// The [begin, end) byte ranges of the pattern's matches in `text`, which cover it.
std::vector<std::pair<size_t, size_t>> pre_tokenize(std::string_view text);

// byte -> its symbol (UTF-8), and the symbol's code point -> byte (-1 for others).
const std::array<std::string, 256>& byte_symbols();
int symbol_byte(char32_t cp);

}  // namespace kiln::text
