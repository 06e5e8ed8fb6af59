// LU factorisation with partial pivoting of one n x n matrix (row-major, in double), shared by Det
// (det.cpp) and its gradient (det_grad.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::det {

// Factors `a` in place into L (unit diagonal, below) and U (on and above), pivots in `perm`;
// returns the determinant (0 when a pivot is exactly zero).
inline double lu(std::vector<double>& a, int64_t n, std::vector<int64_t>& perm) {
  perm.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[size_t(i)] = i;
  double det = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::abs(a[size_t(r * n + c)]) > std::abs(a[size_t(p * n + c)])) p = r;
    if (a[size_t(p * n + c)] == 0) return 0;
    if (p != c) {
      for (int64_t k = 0; k < n; ++k) std::swap(a[size_t(p * n + k)], a[size_t(c * n + k)]);
      std::swap(perm[size_t(p)], perm[size_t(c)]);
      det = -det;
    }
    const double piv = a[size_t(c * n + c)];
    det *= piv;
    for (int64_t r = c + 1; r < n; ++r) {
      const double f = a[size_t(r * n + c)] /= piv;
      for (int64_t k = c + 1; k < n; ++k) a[size_t(r * n + k)] -= f * a[size_t(c * n + k)];
    }
  }
  return det;
}

}  // namespace kiln::det
