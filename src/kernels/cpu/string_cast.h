// Cast between string tensors and numbers (kernels/cpu/cast.cpp calls it when either side is a
// string), as numpy's astype does it, which ONNX's test data is made with:
//   number -> string  the shortest digits that read back as the same value in the source type,
//                     positional for 1e-4 <= |x| < 1e16 ("0.039187793", "3.0"), else scientific
//                     ("1e-05", "1.5e+20"); "nan", "inf", "-inf"; integers in decimal; bools
//                     "True" / "False"
//   string -> float   strtod's reading (so "NaN", "INF", "+INF", "-inf" too), the whole string
//   string -> integer decimal, the whole string; out of the type's range is an error
//   string -> bool    true for a non-empty string
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::strings {

// y = x converted, elementwise; x or y (or both) is a string tensor of x's shape. `what` names x in
// errors (an unparsable string names its index).
void cast(const Tensor& x, Tensor& y, const std::string& what);

// One number as numpy's str() writes it for its type (the rules above).
template <class T>
std::string format_number(T v);

}  // namespace kiln::strings
