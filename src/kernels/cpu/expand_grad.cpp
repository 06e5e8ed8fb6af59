// The gradient kernels of the expand family (expand.cpp):
//
// ai.kiln.PadGrad(dY, shape, pads[, axes]) adds Pad's gradient back onto the input elements each
// output copied.
//
// ai.kiln.SumToShapeOf(G, X) sums a gradient that has a broadcast shape back to the shape of the
// tensor that was broadcast: the gradient of Expand, and of every broadcasting input, which the
// gradient builder inserts after their rules (set_GI with Broadcast::Maybe, autodiff/registry.h).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/expand_common.h"
#include "kernels/cpu/int_values.h"
#include "kernels/cpu/low_precision.h"
#include "kernels/cpu/simd_dispatch.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using pad::any_dynamic;
using pad::map_coordinate;
using pad::pad_geometry;
using pad::PadMode;
using pad::parse_pad_mode;

// ai.kiln.PadGrad(dY, shape, pads[, axes]): every element of dY is added to the input element
// Pad copied it from (none for constant borders; several for reflect/edge borders, which is why
// those run serially, while constant mode, one-to-one, runs rows in parallel).
class PadGradKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    mode_ = parse_pad_mode(node_);
    const std::vector<int64_t> shape = int64_values(ctx.value(1), "shape");
    const Shape out = pad_geometry(shape, int64_values(ctx.value(2), "pads"), ctx, 3, mode_, begin_);
    if (ctx.shape(0) != out)
      throw ShapeError(fmt::format("dY {} must have the padded shape {} (of input {})", to_string(ctx.shape(0)),
                                   to_string(out), to_string(shape)));
    return {{ctx.dtype(0), shape, any_dynamic(ctx), Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& dx = ctx.output(0);
    visit_dtype(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) run<T>(ctx.input(0), dx);
      else throw TypeError(fmt::format("PadGrad supports float and double, got {}", dx.describe()));
    });
  }

 private:
  template <class T>
  void run(const Tensor& dy, Tensor& dx) const {
    T* out = dx.data<T>();
    std::fill(out, out + dx.numel(), T(0));
    const Shape& is = dx.shape();
    const Shape& os = dy.shape();
    const size_t r = os.size();
    if (dy.numel() == 0 || dx.numel() == 0) return;
    const T* g = dy.data<T>();
    if (r == 0) {
      out[0] = g[0];
      return;
    }
    std::vector<std::vector<int64_t>> maps(r);
    for (size_t d = 0; d < r; ++d)
      for (int64_t o = 0; o < os[d]; ++o) maps[d].push_back(map_coordinate(o - begin_[d], is[d], mode_));
    const Strides st = contiguous_strides(is);
    const int64_t cols = os[r - 1];
    const std::vector<int64_t>& last = maps[r - 1];
    auto rows_range = [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t off = 0;
        bool outside = false;
        for (int64_t rem = row, d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
          const int64_t m = maps[d][rem % os[d]];
          rem /= os[d];
          outside = outside || m < 0;
          off += m * st[d];
        }
        if (outside) continue;
        const T* grow = g + row * cols;
        for (int64_t c = 0; c < cols; ++c)
          if (last[c] >= 0) out[off + last[c]] += grow[c];
      }
    };
    const int64_t rows = dy.numel() / cols;
    if (mode_ == PadMode::Constant) parallel_for(rows, std::max<int64_t>(1, 16384 / cols), rows_range);
    else rows_range(0, rows);
  }

  PadMode mode_ = PadMode::Constant;
  std::vector<int64_t> begin_;
};

const KernelRegistrar reg_pad_grad({kKilnDomain, "PadGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                   [](const Node& n) { return std::make_unique<PadGradKernel>(n); });
const OpDocRegistrar doc_pad_grad(
    {kKilnDomain,
     "PadGrad",
     "The gradient of Pad with respect to its data, for every mode Pad supports.",
     {"dY: the gradient of Pad's output", "shape: int64 [r], the shape of Pad's data",
      "pads: Pad's int64 pads (negative ones crop)", "axes (optional): Pad's axes (opset 18)"},
     {"dX: the gradient of data, of the given shape"},
     "attribute mode as Pad's. dX = 0; for every output position o of Pad that copies input position i "
     "(constant borders copy none; reflect and edge borders copy inner elements again): dX[i] += dY[o]"});

// Columns [0, width) of rows [r0, r1) of a row-major matrix with rows of `stride` elements, added
// into acc (simd_dispatch.h body: AVX-512 / AVX2 / baseline copies).
template <class T>
struct ColumnSum {
  const T* src;
  double* acc;
  int64_t stride, width;
};

template <class T>
[[gnu::always_inline]] inline void add_rows(const ColumnSum<T>& a, int64_t r0, int64_t r1) {
  double* __restrict acc = a.acc;
  const int64_t stride = a.stride, width = a.width;
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict row = a.src + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) acc[j] += static_cast<double>(row[j]);
  }
}

class SumToShapeOf : public Kernel {
 public:
  using Kernel::Kernel;
  bool reads_only_shape(size_t input) const override { return input == 1; }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& g = ctx.shape(0);
    const Shape& like = ctx.shape(1);
    if (like.size() > g.size())
      throw ShapeError(fmt::format("gradient {} has lower rank than target {}", to_string(g), to_string(like)));
    const size_t lead = g.size() - like.size();
    for (size_t i = 0; i < like.size(); ++i)
      if (like[i] != 1 && like[i] != g[lead + i])
        throw ShapeError(fmt::format("gradient {} does not broadcast from target {}", to_string(g), to_string(like)));
    // The builder inserts this op whenever it cannot prove the shapes equal; when they are, the
    // output is the input's buffer and nothing runs.
    same_ = numel(g) == numel(like);
    // Only leading dims reduced (a bias of [B, S, D] -> [D]): rows of the target's size are summed.
    size_t first_kept = lead;
    while (first_kept < g.size() && like[first_kept - lead] == 1) ++first_kept;
    leading_ = true;
    for (size_t i = first_kept; i < g.size(); ++i) leading_ = leading_ && like[i - lead] == g[i];
    return {{ctx.dtype(0), like}};
  }

  bool output_aliases_input() const override { return same_; }

  void compute(ComputeContext& ctx) override {
    visit_dtype(ctx.input(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) run<T>(ctx);
      else throw TypeError(fmt::format("SumToShapeOf supports float and double, got {}", ctx.input(0).describe()));
    });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor& g = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (same_) {
      if (y.raw_data() != g.raw_data()) y.copy_from(g.reshape(y.shape()));
      return;
    }
    if (leading_) return sum_rows<T>(g, y);
    const Shape& gs = g.shape();
    const size_t rank = gs.size();
    const size_t lead = rank - y.shape().size();
    // Output strides over the gradient's dims: 0 where the target broadcast (or lacks the dim).
    Strides ostride(rank, 0);
    const Strides ys = contiguous_strides(y.shape());
    for (size_t i = lead; i < rank; ++i) ostride[i] = y.shape()[i - lead] == 1 ? 0 : ys[i - lead];
    const int64_t n = g.numel();
    const T* src = g.data<T>();
    T* dst = y.data<T>();
    const int64_t ny = y.numel();
    // Sum in double, split over output elements so threads never write the same place.
    std::vector<double> acc(static_cast<size_t>(ny), 0.0);
    std::vector<int64_t> idx(rank, 0);
    int64_t off = 0;
    for (int64_t k = 0; k < n; ++k) {
      acc[static_cast<size_t>(off)] += static_cast<double>(src[k]);
      for (size_t i = rank; i-- > 0;) {
        off += ostride[i];
        if (++idx[i] < gs[i]) break;
        off -= ostride[i] * gs[i];
        idx[i] = 0;
      }
    }
    for (int64_t k = 0; k < ny; ++k) dst[k] = static_cast<T>(acc[static_cast<size_t>(k)]);
  }

  // y[j] = sum over rows r of g[r * n + j], in double. The rows are split into one block per thread
  // (each streams whole rows, contiguous memory), whose partial sums are added in block order; with
  // too few rows for that, or rows too wide for the partial sums to stay in cache, the columns are
  // split instead (each thread sums its own). Splitting columns of rows of 1024 floats halves each
  // thread's run per page and did not scale: 0.40 ms at 1 thread and at 2 for bert's [2048, 1024].
  template <class T>
  static void sum_rows(const Tensor& g, Tensor& y) {
    const int64_t n = y.numel();
    const int64_t rows = n == 0 ? 0 : g.numel() / n;
    const T* src = g.data<T>();
    T* dst = y.data<T>();
    const int64_t blocks = std::min<int64_t>(omp_get_max_threads(), rows / kRowsPerBlock);
    if (blocks < 2 || n > kMaxBlockWidth) {
      parallel_for(n, kColumnGrain, [&](int64_t b, int64_t e) {
        std::vector<double> acc(static_cast<size_t>(e - b), 0.0);
        simd::run_best<add_rows<T>>(ColumnSum<T>{src + b, acc.data(), n, e - b}, rows);
        for (int64_t j = b; j < e; ++j) dst[j] = static_cast<T>(acc[static_cast<size_t>(j - b)]);
      });
      return;
    }
    std::vector<double> partial(static_cast<size_t>(blocks * n), 0.0);
    parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t r0 = rows * k / blocks, r1 = rows * (k + 1) / blocks;
        simd::run_best<add_rows<T>>(ColumnSum<T>{src + r0 * n, partial.data() + k * n, n, n}, r1 - r0);
      }
    });
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < blocks; ++k) sum += partial[static_cast<size_t>(k * n + j)];
      dst[j] = static_cast<T>(sum);
    }
  }

  static constexpr int64_t kColumnGrain = 256;
  static constexpr int64_t kRowsPerBlock = 64;
  static constexpr int64_t kMaxBlockWidth = 16384;  // a block's partial sums: 128 KB of doubles

  bool same_ = false;
  bool leading_ = false;
};

const KernelRegistrar reg_sum_to_shape({kKilnDomain, "SumToShapeOf", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                       [](const Node& n) { return std::make_unique<SumToShapeOf>(n); });
// Mixed precision's bias gradients (a 16-bit Gemm's C): float32 sums rounded once.
const KernelRegistrar reg_sum_to_shape_low(
    {kKilnDomain, "SumToShapeOf", 1, kMaxOpset, {DType::BFloat16, DType::Float16}},
    via_float32([](const Node& n) { return std::make_unique<SumToShapeOf>(n); }));
const OpDocRegistrar doc_sum_to_shape(
    {kKilnDomain,
     "SumToShapeOf",
     "Reduces a gradient of a broadcast result to the shape of the broadcast operand.",
     {"G: the gradient, with the broadcast (output) shape", "X: the operand; only its shape is read"},
     {"Y: G summed over the dims that X broadcast (leading dims X lacks, and dims where X has 1), "
      "with X's shape"},
     "Y[j] = sum over all i that broadcast to j of G[i] (numpy: G.sum(axes).reshape(X.shape))"});

}  // namespace
}  // namespace kiln
