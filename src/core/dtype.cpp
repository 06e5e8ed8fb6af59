#include "kiln/dtype.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "kiln/error.h"

namespace kiln {

float half_to_float(Half h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1f;
  uint32_t mant = h.bits & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Half float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return Half{static_cast<uint16_t>(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0))};
  }
  if (absx >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00)};  // overflow -> inf
  if (absx < 0x38800000u) {                                                    // subnormal or zero in half
    if (absx < 0x33000000u) return Half{sign};
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 - (e - 112)
    uint32_t half_m = m >> shift;    // shift is 14..24 here
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1))) ++half_m;
    return Half{static_cast<uint16_t>(sign | half_m)};
  }
  uint32_t e = (absx >> 23) - 127 + 15;
  uint32_t m = absx & 0x7fffff;
  uint32_t h = (e << 10) | (m >> 13);
  const uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // carries into exponent correctly
  return Half{static_cast<uint16_t>(sign | h)};
}

BFloat16 float_to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40)};
  const uint32_t lsb = (u >> 16) & 1;
  u += 0x7fff + lsb;
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

namespace {
constexpr std::pair<DType, int32_t> kOnnxCodes[] = {
    {DType::Float32, 1}, {DType::Uint8, 2},   {DType::Int8, 3},      {DType::Uint16, 4},   {DType::Int16, 5},
    {DType::Int32, 6},   {DType::Int64, 7},   {DType::Bool, 9},      {DType::Float16, 10}, {DType::Float64, 11},
    {DType::Uint32, 12}, {DType::Uint64, 13}, {DType::BFloat16, 16}, {DType::String, 8}};
}  // namespace

std::optional<DType> dtype_from_onnx(int64_t code) {
  for (const auto& [t, c] : kOnnxCodes)
    if (c == code) return t;
  return std::nullopt;
}

int32_t dtype_to_onnx(DType t) {
  for (const auto& [d, c] : kOnnxCodes)
    if (d == t) return c;
  return 0;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64:
    case DType::Uint64:
      return 8;
    case DType::Float32:
    case DType::Int32:
    case DType::Uint32:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int16:
    case DType::Uint16:
      return 2;
    case DType::Int8:
    case DType::Uint8:
    case DType::Bool:
      return 1;
    case DType::String:
      return sizeof(std::string);
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::Int16:
      return "int16";
    case DType::Int8:
      return "int8";
    case DType::Uint64:
      return "uint64";
    case DType::Uint32:
      return "uint32";
    case DType::Uint16:
      return "uint16";
    case DType::Uint8:
      return "uint8";
    case DType::Bool:
      return "bool";
    case DType::String:
      return "string";
  }
  return "?";
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool is_integer(DType t) { return !is_floating(t) && t != DType::Bool && t != DType::String; }

void throw_not_numeric(DType t) {
  throw TypeError(fmt::format("{} tensors have no numeric elements; this operation takes numbers", dtype_name(t)));
}

}  // namespace kiln
