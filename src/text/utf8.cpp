// UTF-8 decoding and Python's character classes (text/utf8.h).
#include "text/utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <clocale>
#include <cwctype>

#include "kiln/error.h"
#include "text/unicode_classes.h"

namespace kiln::text {

namespace {

// glibc's C.UTF-8 locale maps every Unicode character's case (Debian 12 ships it with libc6).
locale_t utf8_locale() {
  static const locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    if (l == static_cast<locale_t>(nullptr)) throw Error("the C.UTF-8 locale is not available to classify characters");
    return l;
  }();
  return loc;
}

bool in_ranges(std::span<const CodeRange> ranges, char32_t cp) {
  auto it =
      std::upper_bound(ranges.begin(), ranges.end(), cp, [](char32_t c, const CodeRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

}  // namespace

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

std::vector<char32_t> decode_utf8(std::string_view s, const char* what) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t len = utf8_length(lead);
    auto bad = [&] { return InvalidArgument(fmt::format("{}: invalid UTF-8 at byte {}", what, i)); };
    if (len == 1 && lead >= 0x80) throw bad();
    if (i + len > s.size()) throw bad();
    char32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) throw bad();
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) throw bad();
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

namespace {

// For a lead byte: how many continuation bytes follow it, and the range the first of them must
// lie in (the rest lie in 0x80..0xBF); {0, ..} for a byte that cannot lead.
struct Lead {
  size_t continuations;
  unsigned char lo, hi;
};

Lead lead_of(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b >= 0xE0 && b <= 0xEF)
    return {2, static_cast<unsigned char>(b == 0xE0 ? 0xA0 : 0x80),
            static_cast<unsigned char>(b == 0xED ? 0x9F : 0xBF)};
  if (b >= 0xF0 && b <= 0xF4)
    return {3, static_cast<unsigned char>(b == 0xF0 ? 0x90 : 0x80),
            static_cast<unsigned char>(b == 0xF4 ? 0x8F : 0xBF)};
  return {0, 0, 0};
}

}  // namespace

std::string decode_utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    if (lead < 0x80) {
      out += static_cast<char>(lead);
      ++i;
      continue;
    }
    const Lead l = lead_of(lead);
    size_t k = 1;  // bytes of the sequence that are valid so far
    while (k <= l.continuations && i + k < bytes.size()) {
      const auto c = static_cast<unsigned char>(bytes[i + k]);
      if (k == 1 ? (c < l.lo || c > l.hi) : (c & 0xC0) != 0x80) break;
      ++k;
    }
    if (l.continuations > 0 && k == l.continuations + 1) out.append(bytes.substr(i, k));
    else append_utf8(out, 0xFFFD);
    i += k;
  }
  return out;
}

bool is_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::vector<std::string> split_whitespace(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char32_t cp : decode_utf8(s)) {
    if (is_space(cp)) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      append_utf8(cur, cp);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : decode_utf8(s)) {
    if (cp < 0x80) out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    else append_utf8(out, static_cast<char32_t>(towlower_l(static_cast<wint_t>(cp), utf8_locale())));
  }
  return out;
}

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return in_ranges(letter_ranges(), cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(number_ranges(), cp);
}

}  // namespace kiln::text
