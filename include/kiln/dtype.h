// Element types of Kiln tensors, with the ONNX names and sizes, and 16-bit float conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace kiln {

enum class DType : uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int64,
  Int32,
  Int16,
  Int8,
  Uint64,
  Uint32,
  Uint16,
  Uint8,
  Bool,
  // UTF-8 strings (ONNX's STRING), stored as std::string objects: only kernels that list String
  // take them (Cast, CastLike, StringNormalizer), and they are never planned in an arena.
  String,
};

// IEEE half precision, stored as bits; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
};
// bfloat16 (the top half of a float32), stored as bits.
struct BFloat16 {
  uint16_t bits = 0;
};

float half_to_float(Half h);
Half float_to_half(float f);  // round to nearest even
inline float bfloat16_to_float(BFloat16 b) {
  uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
BFloat16 float_to_bfloat16(float f);  // round to nearest even, NaN kept

size_t dtype_size(DType t);
// The ONNX name: "float", "double", "float16", "bfloat16", "int64", ..., "bool".
const char* dtype_name(DType t);
bool is_floating(DType t);  // float32, float64, float16, bfloat16
bool is_integer(DType t);   // signed and unsigned integers, not bool or string

// ONNX's TensorProto.DataType codes (FLOAT = 1, ..., BFLOAT16 = 16): the `to` of Cast, the
// element type of ONNX files. dtype_from_onnx gives nullopt for types Kiln lacks (complex, float8).
std::optional<DType> dtype_from_onnx(int64_t code);
int32_t dtype_to_onnx(DType t);

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::Int16;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::Int8;
};
template <>
struct DTypeOf<uint64_t> {
  static constexpr DType value = DType::Uint64;
};
template <>
struct DTypeOf<uint32_t> {
  static constexpr DType value = DType::Uint32;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::Uint16;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::Uint8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct DTypeOf<std::string> {
  static constexpr DType value = DType::String;
};
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Thrown by visit_dtype for a string tensor: a TypeError naming the dtype.
[[noreturn]] void throw_not_numeric(DType t);

// Calls f(T{}) with the C++ type of t: visit_dtype(t, [&](auto tag) { using T = decltype(tag); ... }).
// Numeric types and bool only: a string dtype throws TypeError.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Float16:
      return f(Half{});
    case DType::BFloat16:
      return f(BFloat16{});
    case DType::Int64:
      return f(int64_t{});
    case DType::Int32:
      return f(int32_t{});
    case DType::Int16:
      return f(int16_t{});
    case DType::Int8:
      return f(int8_t{});
    case DType::Uint64:
      return f(uint64_t{});
    case DType::Uint32:
      return f(uint32_t{});
    case DType::Uint16:
      return f(uint16_t{});
    case DType::Uint8:
      return f(uint8_t{});
    case DType::Bool:
      return f(bool{});
    case DType::String:
      throw_not_numeric(t);
  }
  return f(float{});
}

// Converts any element type to and from double (16-bit floats through float).
template <class T>
inline double to_double(T v) {
  return static_cast<double>(v);
}
template <>
inline double to_double(Half v) {
  return half_to_float(v);
}
template <>
inline double to_double(BFloat16 v) {
  return bfloat16_to_float(v);
}
template <class T>
inline T from_double(double v) {
  return static_cast<T>(v);
}
template <>
inline Half from_double(double v) {
  return float_to_half(static_cast<float>(v));
}
template <>
inline BFloat16 from_double(double v) {
  return float_to_bfloat16(static_cast<float>(v));
}
template <>
inline bool from_double(double v) {
  return v != 0.0;
}

}  // namespace kiln
