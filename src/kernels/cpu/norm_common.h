// Per-channel passes of BatchNormalization and its gradient over X viewed as [N, C, rest]: a
// channel is N runs of `rest` contiguous elements. Sums run in double; each run's loop is an omp
// simd reduction over locals, so GCC vectorises it (the float32 loads widen to double), where the
// old loops through captured references did not. Each run takes simd_dispatch.h's best copy for
// the CPU (8 doubles a step with AVX-512, 2 in the baseline build); the order of a sum's
// additions follows the vector width, so CPUs of different widths may differ in its last bits.
#pragma once

#include <cstdint>

#include "kernels/cpu/simd_dispatch.h"
#include "kiln/dtype.h"

namespace kiln::norm {

struct Channel {
  int64_t n = 0, c = 0, rest = 0, ch = 0;
  int64_t offset(int64_t b) const { return (b * c + ch) * rest; }
};

// The loop bodies, one run each, compiled per instruction set (see simd_dispatch.h).
template <class T>
struct RunArgs {
  const T* x = nullptr;
  const T* g = nullptr;
  T* y = nullptr;
  double mu = 0, a = 0, b0 = 0, b1 = 0;
  double* s = nullptr;  // sums out
  double* t = nullptr;
};

template <class T>
[[gnu::always_inline]] inline void sum_body(const RunArgs<T>& r, int64_t begin, int64_t end) {
  const T* x = r.x;
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = begin; i < end; ++i) s += to_double(x[i]);
  *r.s = s;
}

template <class T>
[[gnu::always_inline]] inline void centered_squares_body(const RunArgs<T>& r, int64_t begin, int64_t end) {
  const T* x = r.x;
  const double mu = r.mu;
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = begin; i < end; ++i) s += (to_double(x[i]) - mu) * (to_double(x[i]) - mu);
  *r.s = s;
}

template <class T>
[[gnu::always_inline]] inline void affine_body(const RunArgs<T>& r, int64_t begin, int64_t end) {
  const T* x = r.x;
  T* y = r.y;
  const double a = r.a, shift = r.b0;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) y[i] = from_double<T>(to_double(x[i]) * a + shift);
}

template <class T>
[[gnu::always_inline]] inline void grad_sums_body(const RunArgs<T>& r, int64_t begin, int64_t end) {
  const T* g = r.g;
  const T* x = r.x;
  const double mu = r.mu;
  double s = 0, t = 0;
#pragma omp simd reduction(+ : s, t)
  for (int64_t i = begin; i < end; ++i) {
    s += to_double(g[i]);
    t += to_double(g[i]) * (to_double(x[i]) - mu);
  }
  *r.s = s;
  *r.t = t;
}

template <class T>
[[gnu::always_inline]] inline void grad_input_body(const RunArgs<T>& r, int64_t begin, int64_t end) {
  const T* g = r.g;
  const T* x = r.x;
  T* y = r.y;
  const double mu = r.mu, a = r.a, b0 = r.b0, b1 = r.b1;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) y[i] = from_double<T>(to_double(g[i]) * a + b0 - (to_double(x[i]) - mu) * b1);
}

// sum of x over the channel.
template <class T>
double sum(const T* x, const Channel& k) {
  double s = 0;
  for (int64_t b = 0; b < k.n; ++b) {
    double run = 0;
    simd::run_best<sum_body<T>>(RunArgs<T>{x + k.offset(b), nullptr, nullptr, 0, 0, 0, 0, &run, nullptr}, k.rest);
    s += run;
  }
  return s;
}

// sum of (x - mu)^2 over the channel.
template <class T>
double centered_squares(const T* x, const Channel& k, double mu) {
  double s = 0;
  for (int64_t b = 0; b < k.n; ++b) {
    double run = 0;
    simd::run_best<centered_squares_body<T>>(RunArgs<T>{x + k.offset(b), nullptr, nullptr, mu, 0, 0, 0, &run, nullptr},
                                             k.rest);
    s += run;
  }
  return s;
}

// y = x * a + shift over the channel.
template <class T>
void affine(const T* x, T* y, const Channel& k, double a, double shift) {
  for (int64_t b = 0; b < k.n; ++b)
    simd::run_best<affine_body<T>>(
        RunArgs<T>{x + k.offset(b), nullptr, y + k.offset(b), 0, a, shift, 0, nullptr, nullptr}, k.rest);
}

// The gradient's two sums over the channel: sum g and sum g * (x - mu).
template <class T>
void grad_sums(const T* g, const T* x, const Channel& k, double mu, double& sum_g, double& sum_gxc) {
  sum_g = sum_gxc = 0;
  for (int64_t b = 0; b < k.n; ++b) {
    double rs = 0, rt = 0;
    simd::run_best<grad_sums_body<T>>(RunArgs<T>{x + k.offset(b), g + k.offset(b), nullptr, mu, 0, 0, 0, &rs, &rt},
                                      k.rest);
    sum_g += rs;
    sum_gxc += rt;
  }
}

// dx = g * a + b0 - (x - mu) * b1 over the channel.
template <class T>
void grad_input(const T* g, const T* x, T* dx, const Channel& k, double mu, double a, double b0, double b1) {
  for (int64_t b = 0; b < k.n; ++b)
    simd::run_best<grad_input_body<T>>(
        RunArgs<T>{x + k.offset(b), g + k.offset(b), dx + k.offset(b), mu, a, b0, b1, nullptr, nullptr}, k.rest);
}

}  // namespace kiln::norm
