// Gelu's math, shared by ONNX's Gelu (activation.cpp), Kiln's fused ai.kiln.Gelu
// (activation_fused.cpp) and its gradient ai.kiln.GeluGrad (activation_grad.cpp).
//
// approximate "none": x/2 (1 + erf(x/sqrt 2)); "tanh": x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Written as x/2 erfc(-x/sqrt 2) and x sigmoid(2u), which equal them but do not cancel for x << 0.
// For x << 0 both forms are exp-like tails whose relative error is the argument's rounding times
// |x|^2, which plain float arguments would make reach 1e-5: the float32 kernels evaluate the tanh
// form in double and correct the erf form's rounded argument (vector_math.h), at vector width.
#pragma once

#include <fmt/format.h>

#include <string>

#include "kernels/cpu/elementwise_common.h"
#include "kernels/cpu/vector_math.h"

namespace kiln::gelu {

// Whether a Gelu node (either domain) asks for the tanh form; InvalidModel for an unknown one.
inline bool tanh_form(const Node& n) {
  const std::string a = n.attr_string("approximate", "none");
  if (a != "none" && a != "tanh")
    throw InvalidModel(fmt::format("attribute approximate is '{}'; it must be \"none\" or \"tanh\"", a));
  return a == "tanh";
}

struct GeluOp {
  using Types = FloatTypes;
  bool tanh;
  explicit GeluOp(const Node& n) : tanh(tanh_form(n)) {}
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(vmath::gelu_one(static_cast<double>(x), tanh));
  }
  void run_float32(const float* x, float* y, int64_t n) const { vmath::gelu(x, y, n, tanh); }
};

}  // namespace kiln::gelu
