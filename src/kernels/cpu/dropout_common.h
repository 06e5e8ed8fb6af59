// What Dropout and its gradient (dropout.cpp, dropout_grad.cpp) share: reading and checking the
// ratio and training_mode inputs, and the float dtypes they compute in.
#pragma once

#include <fmt/format.h>

#include <type_traits>

#include "kiln/error.h"
#include "kiln/kernel.h"
#include "kiln/tensor.h"

namespace kiln::dropout {

// InvalidModel unless 0 <= ratio < 1.
void check_ratio(double ratio);

// Opset 12 on: ratio (default 0.5) and training_mode (default false) are optional inputs. Returns
// the ratio to drop with: 0 means the identity (inference, or a zero ratio).
double drop_ratio(const Tensor* ratio, const Tensor* training_mode);

// ratio and training_mode are inputs r and r + 1 (Dropout: 1 and 2; DropoutGrad: 2 and 3).
void check_mode_inputs(const InferContext& ctx, size_t r);

// Calls f(T{}) for a float32, float64 or float16 `dt`; a TypeError naming `what` otherwise.
template <class F>
void visit_float(DType dt, const char* what, F&& f) {
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>) f(tag);
    else throw TypeError(fmt::format("{} in training mode needs a float input, got {}", what, dtype_name(dt)));
  });
}

}  // namespace kiln::dropout
