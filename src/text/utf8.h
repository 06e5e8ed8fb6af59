// UTF-8 text as the tokenizers and text metrics read it: code points decoded and encoded, and the
// character classes Python's str methods use (whitespace as str.isspace / str.split, lowercase as
// str.lower for the characters glibc's C.UTF-8 locale maps), so that a metric defined by a Python
// implementation gives the same tokens here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

// The code points of `s`. Invalid UTF-8 (a stray continuation byte, a truncated sequence, an
// overlong form, a surrogate) is an InvalidArgument naming `what` and the byte offset.
std::vector<char32_t> decode_utf8(std::string_view s, const char* what = "text");
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(const std::vector<char32_t>& cps);
// `bytes` with each maximal invalid subpart replaced by one U+FFFD (Python's errors="replace",
// Rust's from_utf8_lossy).
std::string decode_utf8_lossy(std::string_view bytes);
// The byte length of the UTF-8 sequence that starts with `lead` (1 for a byte that cannot start one).
size_t utf8_length(unsigned char lead);

// Python's str.isspace(): the Unicode White_Space characters and the ASCII separators 0x1C-0x1F.
bool is_space(char32_t cp);
// Python's str.split() with no argument: runs of is_space() separate, none kept, no empty tokens.
std::vector<std::string> split_whitespace(std::string_view s);
// str.lower() per code point.
std::string to_lower(std::string_view s);

// Unicode's general categories L (letters) and N (numbers), \p{L} and \p{N} of the byte-level BPE
// pre-tokenizer's pattern (tables generated from Python's unicodedata: src/text/unicode_classes.cpp).
bool is_letter(char32_t cp);
bool is_number(char32_t cp);

}  // namespace kiln::text
