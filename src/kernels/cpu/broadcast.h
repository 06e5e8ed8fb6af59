// Numpy-style broadcasting iteration for elementwise kernels with N inputs (binary, ternary).
//
// A BroadcastPlan describes the output as a few collapsed dimensions: adjacent dimensions are merged
// whenever every operand walks them contiguously (or not at all), and size-1 output dimensions are
// dropped. So same-shape operands become one run of numel elements, a scalar operand a stride-0 run,
// and a trailing-dim broadcast ([3, 4, 5] with [5]) two dimensions. The innermost stride of every
// operand is then 0 or 1, which lets kernels write tight, vectorisable inner loops:
//
//   BroadcastPlan<2> p = make_broadcast_plan<2>({a.shape(), b.shape()});
//   broadcast_for_each(p, [&](int64_t out, const std::array<int64_t, 2>& in,
//                             const std::array<int64_t, 2>& step, int64_t n) { ... });
//
// `out` is the linear output index of the run's first element, in[k] the element offset into
// operand k, step[k] its stride (0 or 1) along the run, n the run length. Runs are split across
// threads with kiln::parallel_for; a callback must not throw (it runs inside OpenMP).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "kiln/shape.h"

namespace kiln {

// Elements per task: small tensors stay on one thread, big ones split in chunks of this size.
inline constexpr int64_t kElementwiseGrain = 16384;

template <size_t N>
struct BroadcastPlan {
  Shape out_shape;                              // the broadcast output shape
  int64_t numel = 0;                            // its element count
  std::vector<int64_t> dims;                    // collapsed output dims, innermost last (never empty)
  std::array<std::vector<int64_t>, N> strides;  // element strides of each operand per collapsed dim
};

// Plans the broadcast of N contiguous operands; throws ShapeError naming the shapes that clash.
template <size_t N>
BroadcastPlan<N> make_broadcast_plan(const std::array<Shape, N>& shapes) {
  BroadcastPlan<N> plan;
  Shape out = shapes[0];
  for (size_t k = 1; k < N; ++k) out = broadcast_shapes(out, shapes[k]);
  plan.out_shape = out;
  plan.numel = numel(out);
  const size_t rank = out.size();

  // Per operand, the stride it would have along each output dim (0 where broadcast).
  std::array<Strides, N> full;
  for (size_t k = 0; k < N; ++k) {
    const Shape& s = shapes[k];
    const Strides own = contiguous_strides(s);
    full[k].assign(rank, 0);
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t o = rank - s.size() + i;
      full[k][o] = s[i] == 1 ? 0 : own[i];
    }
  }
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;  // contributes nothing to any offset
    const bool can_merge = !plan.dims.empty() && [&] {
      for (size_t k = 0; k < N; ++k)
        if (plan.strides[k].back() != full[k][i] * out[i]) return false;
      return true;
    }();
    if (can_merge) {
      plan.dims.back() *= out[i];
      for (size_t k = 0; k < N; ++k) plan.strides[k].back() = full[k][i];
    } else {
      plan.dims.push_back(out[i]);
      for (size_t k = 0; k < N; ++k) plan.strides[k].push_back(full[k][i]);
    }
  }
  if (plan.dims.empty()) {  // scalar output (or all dims 1)
    plan.dims.push_back(1);
    for (size_t k = 0; k < N; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

// Calls run(out_index, in_offsets, in_steps, count) for every contiguous run of the output, in
// parallel chunks of about `grain` elements.
template <size_t N, class Run>
void broadcast_for_each(const BroadcastPlan<N>& plan, Run&& run, int64_t grain = kElementwiseGrain) {
  const size_t r = plan.dims.size();
  const int64_t inner = plan.dims.back();
  std::array<int64_t, N> step;
  for (size_t k = 0; k < N; ++k) step[k] = plan.strides[k].back();
  parallel_for(plan.numel, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin` over the collapsed dims, and the operand offsets there.
    std::vector<int64_t> idx(r, 0);
    std::array<int64_t, N> off{};
    int64_t rem = begin;
    for (size_t i = r; i-- > 0;) {
      idx[i] = rem % plan.dims[i];
      rem /= plan.dims[i];
      for (size_t k = 0; k < N; ++k) off[k] += idx[i] * plan.strides[k][i];
    }
    int64_t pos = begin;
    while (pos < end) {
      const int64_t n = std::min(inner - idx[r - 1], end - pos);
      run(pos, off, step, n);
      pos += n;
      // Advance the odometer by n along the innermost dim, carrying outwards.
      idx[r - 1] += n;
      for (size_t k = 0; k < N; ++k) off[k] += n * step[k];
      for (size_t i = r - 1; i > 0 && idx[i] == plan.dims[i]; --i) {
        idx[i] = 0;
        ++idx[i - 1];
        for (size_t k = 0; k < N; ++k) off[k] += plan.strides[k][i - 1] - plan.dims[i] * plan.strides[k][i];
      }
    }
  });
}

// out[i] = op(a[i], b[i]) under broadcasting, with the inner loop specialised for the
// stride patterns (both contiguous, one operand constant along the run) so it vectorises.
template <class TA, class TB, class TO, class Op>
void broadcast_binary(const BroadcastPlan<2>& plan, const TA* a, const TB* b, TO* out, Op op) {
  broadcast_for_each(plan,
                     [&](int64_t o, const std::array<int64_t, 2>& in, const std::array<int64_t, 2>& st, int64_t n) {
                       const TA* pa = a + in[0];
                       const TB* pb = b + in[1];
                       TO* po = out + o;
                       if (st[0] == 1 && st[1] == 1) {
                         for (int64_t i = 0; i < n; ++i) po[i] = op(pa[i], pb[i]);
                       } else if (st[0] == 1) {
                         const TB vb = *pb;
                         for (int64_t i = 0; i < n; ++i) po[i] = op(pa[i], vb);
                       } else if (st[1] == 1) {
                         const TA va = *pa;
                         for (int64_t i = 0; i < n; ++i) po[i] = op(va, pb[i]);
                       } else {
                         const TO v = op(*pa, *pb);
                         for (int64_t i = 0; i < n; ++i) po[i] = v;
                       }
                     });
}

}  // namespace kiln
