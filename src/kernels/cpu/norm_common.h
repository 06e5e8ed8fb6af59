// Per-channel passes of BatchNormalization and its gradient over X viewed as [N, C, rest]: a
// channel is N runs of `rest` contiguous elements. Sums run in double; each run's loop is an omp
// simd reduction over locals, so GCC vectorises it (the float32 loads widen to double), where the
// old loops through captured references did not. float32 runs take simd_dispatch.h's best copy
// for the CPU (8 doubles a step with AVX-512, 2 in the baseline build); the order of a sum's
// additions follows the vector width, so CPUs of different widths may differ in its last bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/simd_dispatch.h"
#include "kiln/dtype.h"

namespace kiln::norm {

struct Channel {
  int64_t n = 0, c = 0, rest = 0, ch = 0;
  int64_t offset(int64_t b) const { return (b * c + ch) * rest; }
};

// The float32 loop bodies, one run each (see simd_dispatch.h).
struct RunArgs {
  const float* x = nullptr;
  const float* g = nullptr;
  float* y = nullptr;
  double mu = 0, a = 0, b0 = 0, b1 = 0;
  double* s = nullptr;  // sums out
  double* t = nullptr;
};

[[gnu::always_inline]] inline void sum_body(const RunArgs& r, int64_t begin, int64_t end) {
  const float* x = r.x;
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = begin; i < end; ++i) s += double(x[i]);
  *r.s = s;
}

[[gnu::always_inline]] inline void centered_squares_body(const RunArgs& r, int64_t begin, int64_t end) {
  const float* x = r.x;
  const double mu = r.mu;
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = begin; i < end; ++i) s += (double(x[i]) - mu) * (double(x[i]) - mu);
  *r.s = s;
}

[[gnu::always_inline]] inline void affine_body(const RunArgs& r, int64_t begin, int64_t end) {
  const float* x = r.x;
  float* y = r.y;
  const double a = r.a, shift = r.b0;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) y[i] = float(double(x[i]) * a + shift);
}

[[gnu::always_inline]] inline void grad_sums_body(const RunArgs& r, int64_t begin, int64_t end) {
  const float* g = r.g;
  const float* x = r.x;
  const double mu = r.mu;
  double s = 0, t = 0;
#pragma omp simd reduction(+ : s, t)
  for (int64_t i = begin; i < end; ++i) {
    s += double(g[i]);
    t += double(g[i]) * (double(x[i]) - mu);
  }
  *r.s = s;
  *r.t = t;
}

[[gnu::always_inline]] inline void grad_input_body(const RunArgs& r, int64_t begin, int64_t end) {
  const float* g = r.g;
  const float* x = r.x;
  float* y = r.y;
  const double mu = r.mu, a = r.a, b0 = r.b0, b1 = r.b1;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) y[i] = float(double(g[i]) * a + b0 - (double(x[i]) - mu) * b1);
}

// sum of x over the channel.
template <class T>
double sum(const T* x, const Channel& k) {
  double s = 0;
  for (int64_t b = 0; b < k.n; ++b) {
    const T* p = x + k.offset(b);
    if constexpr (std::is_same_v<T, float>) {
      double run = 0;
      simd::run_best<sum_body>(RunArgs{p, nullptr, nullptr, 0, 0, 0, 0, &run, nullptr}, k.rest);
      s += run;
      continue;
    }
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
    if constexpr (std::is_same_v<T, float>) {
      double run = 0;
      simd::run_best<centered_squares_body>(RunArgs{p, nullptr, nullptr, mu, 0, 0, 0, &run, nullptr}, k.rest);
      s += run;
      continue;
    }
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
    if constexpr (std::is_same_v<T, float>) {
      simd::run_best<affine_body>(RunArgs{p, nullptr, q, 0, a, shift, 0, nullptr, nullptr}, k.rest);
      continue;
    }
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
    if constexpr (std::is_same_v<T, float>) {
      double rs = 0, rt = 0;
      simd::run_best<grad_sums_body>(RunArgs{px, pg, nullptr, mu, 0, 0, 0, &rs, &rt}, k.rest);
      s += rs;
      t += rt;
      continue;
    }
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
    if constexpr (std::is_same_v<T, float>) {
      simd::run_best<grad_input_body>(RunArgs{px, pg, q, mu, a, b0, b1, nullptr, nullptr}, k.rest);
      continue;
    }
#pragma omp simd
    for (int64_t i = 0; i < k.rest; ++i)
      q[i] = from_double<T>(to_double(pg[i]) * a + b0 - (to_double(px[i]) - mu) * b1);
  }
}

}  // namespace kiln::norm
