// Gradient clipping by global norm: torch.nn.utils.clip_grad_norm_ with norm_type 2.
//
// The gradients are cut into fixed-size blocks (never into per-thread chunks) whose sums of squares
// are computed in parallel and then added in block order: the norm is the same for any thread
// count, which exact resume depends on.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kiln/lr_schedulers.h"

namespace kiln::trainer {
namespace {

constexpr int64_t kBlock = 1 << 15;  // elements per block: large enough to amortise a task

struct Block {
  size_t grad;  // index into the gradient list
  int64_t begin, end;
};

// Sum of squares in double with eight independent accumulators (a fixed order the compiler can
// vectorise), then the tail.
template <class T>
double sum_squares(const T* p, int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double v = to_double(p[i + k]);
      acc[k] += v * v;
    }
  double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) {
    const double v = to_double(p[i]);
    s += v * v;
  }
  return s;
}

// g *= coef in the gradient's precision, as torch multiplies by the coefficient tensor of the
// norm's dtype; 16-bit floats go through float.
template <class T>
void scale(T* p, int64_t n, double coef) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < n; ++i) p[i] *= coef;
  } else if constexpr (std::is_same_v<T, float>) {
    const float c = static_cast<float>(coef);
    for (int64_t i = 0; i < n; ++i) p[i] *= c;
  } else {
    const float c = static_cast<float>(coef);
    for (int64_t i = 0; i < n; ++i) p[i] = from_double<T>(static_cast<float>(to_double(p[i])) * c);
  }
}

// Calls f(T*) with the gradient's data as its floating type.
template <class F>
void with_float_data(Tensor& g, F&& f) {
  switch (g.dtype()) {
    case DType::Float32:
      return f(g.data<float>());
    case DType::Float64:
      return f(g.data<double>());
    case DType::Float16:
      return f(g.data<Half>());
    case DType::BFloat16:
      return f(g.data<BFloat16>());
    default:
      break;
  }
}

void check_grads(const std::vector<Tensor*>& grads, double max_norm) {
  if (std::isnan(max_norm) || max_norm < 0)
    throw InvalidArgument(fmt::format("clip_grad_norm: max_norm is {}; it must be >= 0 (max_grad_norm)", max_norm));
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor* g = grads[i];
    if (g == nullptr || !g->defined())
      throw InvalidArgument(fmt::format("clip_grad_norm: gradient {} of {} is {}", i, grads.size(),
                                        g == nullptr ? "a null pointer" : "an undefined tensor"));
    if (!is_floating(g->dtype()))
      throw TypeError(
          fmt::format("clip_grad_norm: gradient {} is {}; gradients must be floating point", i, g->describe()));
    if (!g->is_contiguous())
      throw InvalidArgument(
          fmt::format("clip_grad_norm: gradient {} ({}) is not contiguous; it is scaled in place", i, g->describe()));
  }
}

}  // namespace

double clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm) {
  return clip_grad_norm(grads, max_norm, nullptr);
}

double clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm,
                      const std::function<double(double)>& sum_over_ranks) {
  check_grads(grads, max_norm);
  if (grads.empty() && !sum_over_ranks) return 0.0;

  std::vector<Block> blocks;
  for (size_t i = 0; i < grads.size(); ++i) {
    const int64_t n = grads[i]->numel();
    for (int64_t b = 0; b < n; b += kBlock) blocks.push_back({i, b, std::min(n, b + kBlock)});
  }
  const auto nblocks = static_cast<int64_t>(blocks.size());

  std::vector<double> partial(blocks.size(), 0.0);
  parallel_for(nblocks, 2, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const Block& bl = blocks[b];
      with_float_data(*grads[bl.grad],
                      [&](const auto* p) { partial[b] = sum_squares(p + bl.begin, bl.end - bl.begin); });
    }
  });

  // Per-gradient norms, then the norm of those norms (torch.norm(torch.stack(norms))).
  std::vector<double> sums(grads.size(), 0.0);
  for (int64_t b = 0; b < nblocks; ++b) sums[blocks[b].grad] += partial[b];
  double total_sq = 0.0;
  for (const double s : sums) {
    const double norm = std::sqrt(s);
    total_sq += norm * norm;
  }
  if (sum_over_ranks) total_sq = sum_over_ranks(total_sq);
  const double total = std::sqrt(total_sq);

  // clamp(max_norm / (total + 1e-6), max=1) keeps NaN (torch.clamp propagates it) and gives 0 for
  // an infinite norm; a coefficient of exactly 1 leaves the gradients as they are.
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;
  parallel_for(nblocks, 2, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const Block& bl = blocks[b];
      with_float_data(*grads[bl.grad], [&](auto* p) { scale(p + bl.begin, bl.end - bl.begin, coef); });
    }
  });
  return total;
}

}  // namespace kiln::trainer
