// Dispatch over the float dtypes the pooling and normalization kernels compute in.
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <type_traits>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {

// Calls f(T{}) for a float32, float64 or float16 `dt`; Unsupported "OP: DTYPE input" otherwise.
template <class F>
void visit_float(DType dt, std::string_view op, F&& f) {
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>) f(tag);
    else throw Unsupported(fmt::format("{}: {} input", op, dtype_name(dt)));
  });
}

// Calls f(T{}) for a float32 or float64 `dt` (the gradient kernels that accumulate in double);
// Unsupported "OP: DTYPE inputs (float32 and float64 are supported)" otherwise.
template <class F>
void visit_float32_64(DType dt, std::string_view op, F&& f) {
  if (dt == DType::Float32) f(float{});
  else if (dt == DType::Float64) f(double{});
  else throw Unsupported(fmt::format("{}: {} inputs (float32 and float64 are supported)", op, dtype_name(dt)));
}

}  // namespace kiln
