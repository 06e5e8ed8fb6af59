// BatchNormalization's per-channel passes (and its gradient's) over X in either layout: channels
// first, X as [N, C, rest] (a channel is N runs of `rest` elements: one channel per thread, the
// loops of norm_common.h), or channels last, X as [N * rest, C] (the layout pass's maps, ir/fusion.h):
// there each row's C values are one vector pass over the channels, the rows split into blocks whose
// size depends only on the row count, each block's per-channel sums kept apart and added in block
// order, so the sums do not depend on the thread count. Sums run in double in both layouts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/norm_common.h"
#include "kiln/kernel.h"

namespace kiln::norm {

struct Layout {
  bool channels_last = false;
  int64_t n = 0, c = 0, rest = 0;  // channels first: X is [n, c, rest]; channels last: [n * rest, c]
  int64_t rows() const { return n * rest; }
  Channel channel(int64_t ch) const { return Channel{n, c, rest, ch}; }
};

// One block of channels-last rows; the bodies loop over the rows and vectorise over channels
// [begin, end).
template <class T>
struct RowArgs {
  const T* x = nullptr;
  const T* g = nullptr;
  T* y = nullptr;
  const double* mu = nullptr;
  const double* a = nullptr;
  const double* b0 = nullptr;
  const double* b1 = nullptr;
  double* s = nullptr;
  double* t = nullptr;
  int64_t rows = 0, c = 0;
};

template <class T>
[[gnu::always_inline]] inline void rows_sum_body(const RowArgs<T>& r, int64_t begin, int64_t end) {
  double* __restrict s = r.s;
  for (int64_t row = 0; row < r.rows; ++row) {
    const T* __restrict x = r.x + row * r.c;
#pragma omp simd
    for (int64_t k = begin; k < end; ++k) s[k] += to_double(x[k]);
  }
}

template <class T>
[[gnu::always_inline]] inline void rows_centered_squares_body(const RowArgs<T>& r, int64_t begin, int64_t end) {
  double* __restrict s = r.s;
  const double* __restrict mu = r.mu;
  for (int64_t row = 0; row < r.rows; ++row) {
    const T* __restrict x = r.x + row * r.c;
#pragma omp simd
    for (int64_t k = begin; k < end; ++k) s[k] += (to_double(x[k]) - mu[k]) * (to_double(x[k]) - mu[k]);
  }
}

template <class T>
[[gnu::always_inline]] inline void rows_grad_sums_body(const RowArgs<T>& r, int64_t begin, int64_t end) {
  double* __restrict s = r.s;
  double* __restrict t = r.t;
  const double* __restrict mu = r.mu;
  for (int64_t row = 0; row < r.rows; ++row) {
    const T* __restrict x = r.x + row * r.c;
    const T* __restrict g = r.g + row * r.c;
#pragma omp simd
    for (int64_t k = begin; k < end; ++k) {
      s[k] += to_double(g[k]);
      t[k] += to_double(g[k]) * (to_double(x[k]) - mu[k]);
    }
  }
}

template <class T>
[[gnu::always_inline]] inline void rows_affine_body(const RowArgs<T>& r, int64_t begin, int64_t end) {
  const double* __restrict a = r.a;
  const double* __restrict b = r.b0;
  for (int64_t row = 0; row < r.rows; ++row) {
    const T* __restrict x = r.x + row * r.c;
    T* __restrict y = r.y + row * r.c;
#pragma omp simd
    for (int64_t k = begin; k < end; ++k) y[k] = from_double<T>(to_double(x[k]) * a[k] + b[k]);
  }
}

template <class T>
[[gnu::always_inline]] inline void rows_grad_input_body(const RowArgs<T>& r, int64_t begin, int64_t end) {
  const double* __restrict mu = r.mu;
  const double* __restrict a = r.a;
  const double* __restrict b0 = r.b0;
  const double* __restrict b1 = r.b1;
  for (int64_t row = 0; row < r.rows; ++row) {
    const T* __restrict x = r.x + row * r.c;
    const T* __restrict g = r.g + row * r.c;
    T* __restrict y = r.y + row * r.c;
#pragma omp simd
    for (int64_t k = begin; k < end; ++k)
      y[k] = from_double<T>(to_double(g[k]) * a[k] + b0[k] - (to_double(x[k]) - mu[k]) * b1[k]);
  }
}

// Rows per block of the channels-last sums: a function of the row count only.
inline int64_t row_block(int64_t rows) { return std::max<int64_t>(32, (rows + 255) / 256); }

// Per-channel sums over the rows of a channels-last X by `Body`, into s (and t when given).
template <auto Body, class T>
void rows_reduce(RowArgs<T> args, int64_t rows, std::vector<double>& s, std::vector<double>* t) {
  const int64_t c = args.c, block = row_block(rows), blocks = (rows + block - 1) / block;
  const size_t width = size_t(c) * (t ? 2 : 1);
  std::vector<double> partial(size_t(blocks) * width, 0.0);
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      RowArgs<T> r = args;
      const int64_t first = b * block;
      r.rows = std::min(block, rows - first);
      r.x = args.x ? args.x + first * c : nullptr;
      r.g = args.g ? args.g + first * c : nullptr;
      r.s = partial.data() + size_t(b) * width;
      r.t = t ? r.s + c : nullptr;
      simd::run_best<Body>(r, c);
    }
  });
  s.assign(size_t(c), 0.0);
  if (t) t->assign(size_t(c), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const double* p = partial.data() + size_t(b) * width;
    for (int64_t k = 0; k < c; ++k) s[size_t(k)] += p[k];
    if (t)
      for (int64_t k = 0; k < c; ++k) (*t)[size_t(k)] += p[c + k];
  }
}

// An elementwise pass over the rows of a channels-last X by `Body`, rows split across threads.
template <auto Body, class T>
void rows_map(RowArgs<T> args, int64_t rows) {
  const int64_t c = args.c;
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, c)), [&](int64_t r0, int64_t r1) {
    RowArgs<T> r = args;
    r.rows = r1 - r0;
    r.x = args.x + r0 * c;
    r.g = args.g ? args.g + r0 * c : nullptr;
    r.y = args.y + r0 * c;
    simd::run_best<Body>(r, c);
  });
}

// Channels first: f(k, channel) for every channel, channels split across threads.
template <class F>
void each_channel(const Layout& l, F&& f) {
  parallel_for(l.c, 1, [&](int64_t s, int64_t e) {
    for (int64_t ch = s; ch < e; ++ch) f(size_t(ch), l.channel(ch));
  });
}

// Per channel: sum of x.
template <class T>
std::vector<double> channel_sums(const T* x, const Layout& l) {
  std::vector<double> s(size_t(l.c), 0.0);
  if (l.channels_last) {
    RowArgs<T> r;
    r.x = x;
    r.c = l.c;
    rows_reduce<rows_sum_body<T>>(r, l.rows(), s, nullptr);
  } else {
    each_channel(l, [&](size_t k, const Channel& run) { s[k] = sum(x, run); });
  }
  return s;
}

// Per channel: sum of (x - mean)^2.
template <class T>
std::vector<double> channel_centered_squares(const T* x, const Layout& l, const std::vector<double>& mean) {
  std::vector<double> s(size_t(l.c), 0.0);
  if (l.channels_last) {
    RowArgs<T> r;
    r.x = x;
    r.mu = mean.data();
    r.c = l.c;
    rows_reduce<rows_centered_squares_body<T>>(r, l.rows(), s, nullptr);
  } else {
    each_channel(l, [&](size_t k, const Channel& run) { s[k] = centered_squares(x, run, mean[k]); });
  }
  return s;
}

// Per channel: sum of g and sum of g * (x - mean).
template <class T>
void channel_grad_sums(const T* g, const T* x, const Layout& l, const std::vector<double>& mean,
                       std::vector<double>& sum_g, std::vector<double>& sum_gxc) {
  if (l.channels_last) {
    RowArgs<T> r;
    r.x = x;
    r.g = g;
    r.mu = mean.data();
    r.c = l.c;
    rows_reduce<rows_grad_sums_body<T>>(r, l.rows(), sum_g, &sum_gxc);
    return;
  }
  sum_g.assign(size_t(l.c), 0.0);
  sum_gxc.assign(size_t(l.c), 0.0);
  each_channel(l, [&](size_t k, const Channel& run) { grad_sums(g, x, run, mean[k], sum_g[k], sum_gxc[k]); });
}

// y = x * a + b, a and b per channel.
template <class T>
void channel_affine(const T* x, T* y, const Layout& l, const std::vector<double>& a, const std::vector<double>& b) {
  if (l.channels_last) {
    RowArgs<T> r;
    r.x = x;
    r.y = y;
    r.a = a.data();
    r.b0 = b.data();
    r.c = l.c;
    return rows_map<rows_affine_body<T>>(r, l.rows());
  }
  each_channel(l, [&](size_t k, const Channel& run) { affine(x, y, run, a[k], b[k]); });
}

// dx = g * a + b0 - (x - mean) * b1, each factor per channel.
template <class T>
void channel_grad_input(const T* g, const T* x, T* dx, const Layout& l, const std::vector<double>& mean,
                        const std::vector<double>& a, const std::vector<double>& b0, const std::vector<double>& b1) {
  if (l.channels_last) {
    RowArgs<T> r;
    r.x = x;
    r.g = g;
    r.y = dx;
    r.mu = mean.data();
    r.a = a.data();
    r.b0 = b0.data();
    r.b1 = b1.data();
    r.c = l.c;
    return rows_map<rows_grad_input_body<T>>(r, l.rows());
  }
  each_channel(l, [&](size_t k, const Channel& run) { grad_input(g, x, dx, run, mean[k], a[k], b0[k], b1[k]); });
}

// BatchNormalization in training mode over X laid out as `l` (norm.cpp): Y, and running_mean and
// running_var (outputs 1 and 2) when the node has them.
void batch_norm_training(const Node& node, ComputeContext& ctx, const Layout& l);

}  // namespace kiln::norm
