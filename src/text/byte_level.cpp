// GPT-2's pre-tokenizer pattern and byte-to-symbol map (text/byte_level.h).
#include "text/byte_level.h"

#include <unordered_map>

#include "text/utf8.h"

namespace kiln::text {

namespace {

struct Char {
  char32_t cp;
  size_t begin, end;  // bytes
};

std::vector<Char> chars_of(std::string_view text) {
  std::vector<Char> out;
  const std::vector<char32_t> cps = decode_utf8(text, "pre-tokenizer input");
  out.reserve(cps.size());
  size_t at = 0;
  for (char32_t cp : cps) {
    const size_t len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    out.push_back({cp, at, at + len});
    at += len;
  }
  return out;
}

bool is_other(char32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }

// The end (in characters) of the pattern's match at i. Alternatives in the pattern's order.
size_t match_at(const std::vector<Char>& c, size_t i) {
  const size_t n = c.size();
  if (c[i].cp == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
    const char32_t a = c[i + 1].cp, b = i + 2 < n ? c[i + 2].cp : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  for (bool (*cls)(char32_t) : {&is_letter, &is_number, &is_other}) {  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
    size_t j = i;
    if (c[j].cp == ' ' && j + 1 < n && cls(c[j + 1].cp)) ++j;
    if (!cls(c[j].cp)) continue;
    while (j < n && cls(c[j].cp)) ++j;
    return j;
  }
  size_t j = i;  // \s+(?!\S), else \s+
  while (j < n && is_space(c[j].cp)) ++j;
  if (j == i) return i + 1;               // unreachable: every character is in one of the classes
  if (j < n && j - i >= 2) return j - 1;  // give the last space to the word that follows
  return j;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> pre_tokenize(std::string_view text) {
  const std::vector<Char> c = chars_of(text);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < c.size();) {
    const size_t j = match_at(c, i);
    out.emplace_back(c[i].begin, c[j - 1].end);
    i = j;
  }
  return out;
}

const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[static_cast<size_t>(b)], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

int symbol_byte(char32_t cp) {
  static const std::unordered_map<char32_t, int> inverse = [] {
    std::unordered_map<char32_t, int> m;
    const auto& t = byte_symbols();
    for (int b = 0; b < 256; ++b) m[decode_utf8(t[static_cast<size_t>(b)])[0]] = b;
    return m;
  }();
  auto it = inverse.find(cp);
  return it == inverse.end() ? -1 : it->second;
}

}  // namespace kiln::text
