#include "kernels/cpu/string_cast.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

namespace kiln::strings {

namespace {

// Finite, nonzero values (format_number handles the rest first): equal values, equal bits.
template <class T>
bool same_value(T a, T b) {
  return to_double(a) == to_double(b);
}

// The shortest "%.*e" form of v that reads back as v in type T: its digits (no point) and exponent.
template <class T>
void shortest_digits(T v, double d, std::string& digits, int& exponent) {
  char buf[64];
  for (int precision = 0; precision < 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision, d);
    if (same_value(from_double<T>(std::strtod(buf, nullptr)), v)) break;
  }
  const std::string s(buf);
  const size_t e = s.find('e');
  digits.clear();
  for (size_t i = 0; i < e; ++i)
    if (s[i] >= '0' && s[i] <= '9') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  exponent = std::atoi(s.c_str() + e + 1);
}

std::string positional(const std::string& digits, int exponent) {
  const auto n = static_cast<int>(digits.size());
  if (exponent < 0) return "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  std::string whole = digits.substr(0, static_cast<size_t>(std::min(n, exponent + 1)));
  if (n <= exponent) whole += std::string(static_cast<size_t>(exponent + 1 - n), '0');
  const std::string frac = n > exponent + 1 ? digits.substr(static_cast<size_t>(exponent) + 1) : "0";
  return whole + "." + frac;
}

template <class T>
T parse_float(const std::string& s, bool& ok) {
  char* end = nullptr;
  T v{};
  if constexpr (std::is_same_v<T, float>) v = std::strtof(s.c_str(), &end);  // one rounding, straight to float
  else v = from_double<T>(std::strtod(s.c_str(), &end));
  ok = !s.empty() && end == s.c_str() + s.size();
  return v;
}

template <class T>
T parse_integer(const std::string& s, bool& ok) {
  errno = 0;
  char* end = nullptr;
  T v{};
  if constexpr (std::is_signed_v<T>) {
    const long long x = std::strtoll(s.c_str(), &end, 10);
    ok = x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max();
    v = static_cast<T>(x);
  } else {
    const unsigned long long x = std::strtoull(s.c_str(), &end, 10);
    ok = s.find('-') == std::string::npos && x <= std::numeric_limits<T>::max();
    v = static_cast<T>(x);
  }
  ok = ok && errno == 0 && !s.empty() && end == s.c_str() + s.size();
  return v;
}

template <class T>
T parse(const std::string& s, bool& ok) {
  if constexpr (std::is_same_v<T, bool>) {
    ok = true;
    return !s.empty();
  } else if constexpr (std::is_integral_v<T>) {
    return parse_integer<T>(s, ok);
  } else {
    return parse_float<T>(s, ok);
  }
}

}  // namespace

template <class T>
std::string format_number(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "True" : "False";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else {
    const double d = to_double(v);
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    const std::string sign = std::signbit(d) ? "-" : "";
    if (d == 0) return sign + "0.0";
    std::string digits;
    int exponent = 0;
    shortest_digits(v, d, digits, exponent);
    const double a = std::fabs(d);
    if (a >= 1e-4 && a < 1e16) return sign + positional(digits, exponent);
    const std::string mantissa = digits.size() > 1 ? digits.substr(0, 1) + "." + digits.substr(1) : digits;
    return fmt::format("{}{}e{}{:02d}", sign, mantissa, exponent < 0 ? '-' : '+', std::abs(exponent));
  }
}

void cast(const Tensor& x_in, Tensor& y, const std::string& what) {
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  if (x.dtype() == DType::String && y.dtype() == DType::String) {
    y.copy_from(x);
    return;
  }
  if (y.dtype() == DType::String) {
    auto* out = y.data<std::string>();
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = x.data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] = format_number(in[i]);
    });
    return;
  }
  const auto* in = x.data<std::string>();
  visit_dtype(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = y.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      bool ok = false;
      out[i] = parse<T>(in[i], ok);
      if (!ok)
        throw InvalidArgument(
            fmt::format("{} element {}: \"{}\" is not a {} value", what, i, in[i], dtype_name(y.dtype())));
    }
  });
}

template std::string format_number(float);
template std::string format_number(double);
template std::string format_number(Half);
template std::string format_number(BFloat16);
template std::string format_number(int8_t);
template std::string format_number(int16_t);
template std::string format_number(int32_t);
template std::string format_number(int64_t);
template std::string format_number(uint8_t);
template std::string format_number(uint16_t);
template std::string format_number(uint32_t);
template std::string format_number(uint64_t);
template std::string format_number(bool);

}  // namespace kiln::strings
