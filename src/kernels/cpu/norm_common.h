// Per-channel passes of BatchNormalization and its gradient over X viewed as [N, C, rest]: a
// channel is N runs of `rest` contiguous elements. Sums run in double; each run's loop is an omp
// simd reduction over locals, so GCC vectorises it (the float32 loads widen to double), where the
// old loops through captured references did not.
#pragma once

#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::norm {

struct Channel {
  int64_t n = 0, c = 0, rest = 0, ch = 0;
  int64_t offset(int64_t b) const { return (b * c + ch) * rest; }
};

// sum of x over the channel.
template <class T>
double sum(const T* x, const Channel& k) {
  double s = 0;
  for (int64_t b = 0; b < k.n; ++b) {
    const T* p = x + k.offset(b);
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < k.rest; ++i) s += to_double(p[i]);
  }
  return s;
}

// sum of (x - mu)^2 over the channel.
template <class T>
double centered_squares(const T* x, const Channel& k, double mu) {
  double s = 0;
  for (int64_t b = 0; b < k.n; ++b) {
    const T* p = x + k.offset(b);
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < k.rest; ++i) {
      const double d = to_double(p[i]) - mu;
      s += d * d;
    }
  }
  return s;
}

// y = x * a + shift over the channel.
template <class T>
void affine(const T* x, T* y, const Channel& k, double a, double shift) {
  for (int64_t b = 0; b < k.n; ++b) {
    const T* p = x + k.offset(b);
    T* q = y + k.offset(b);
#pragma omp simd
    for (int64_t i = 0; i < k.rest; ++i) q[i] = from_double<T>(to_double(p[i]) * a + shift);
  }
}

// The gradient's two sums over the channel: sum g and sum g * (x - mu).
template <class T>
void grad_sums(const T* g, const T* x, const Channel& k, double mu, double& sum_g, double& sum_gxc) {
  double s = 0, t = 0;
  for (int64_t b = 0; b < k.n; ++b) {
    const T* pg = g + k.offset(b);
    const T* px = x + k.offset(b);
#pragma omp simd reduction(+ : s, t)
    for (int64_t i = 0; i < k.rest; ++i) {
      const double gi = to_double(pg[i]);
      s += gi;
      t += gi * (to_double(px[i]) - mu);
    }
  }
  sum_g = s;
  sum_gxc = t;
}

// dx = g * a + b0 - (x - mu) * b1 over the channel.
template <class T>
void grad_input(const T* g, const T* x, T* dx, const Channel& k, double mu, double a, double b0, double b1) {
  for (int64_t b = 0; b < k.n; ++b) {
    const T* pg = g + k.offset(b);
    const T* px = x + k.offset(b);
    T* q = dx + k.offset(b);
#pragma omp simd
    for (int64_t i = 0; i < k.rest; ++i)
      q[i] = from_double<T>(to_double(pg[i]) * a + b0 - (to_double(px[i]) - mu) * b1);
  }
}

}  // namespace kiln::norm
