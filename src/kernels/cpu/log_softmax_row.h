// log(sum_c exp(x_c)) over one row of a softmax, the shift that turns scores into
// log-probabilities: shared by SoftmaxCrossEntropyLoss and its gradient, which must agree on it.
// Computed stably in double (the row's maximum subtracted first); float32 rows of contiguous classes
// take vector_math.h's exponentials, the rest a scalar loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/vector_math.h"

namespace kiln::loss {

// `row` holds C values at `stride`; `load` widens one element to a float type.
template <class T, class Load>
double log_sum_exp(const T* row, int64_t classes, int64_t stride, Load load) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 1) {
      const float m = vmath::max(row, classes);  // NaN scores are skipped, as below
      return double(m) + std::log(vmath::sum_exp(row, classes, double(m)));
    }
  }
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < classes; ++c) m = std::max(m, static_cast<double>(load(row[c * stride])));
  double s = 0.0;
  for (int64_t c = 0; c < classes; ++c) s += std::exp(static_cast<double>(load(row[c * stride])) - m);
  return m + std::log(s);
}

}  // namespace kiln::loss
