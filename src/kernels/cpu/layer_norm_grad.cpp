// ai.kiln.LayerNormalizationGrad: the gradient of LayerNormalization (kernels/cpu/layer_norm.cpp),
// emitted by autodiff/layer_norm.cpp. X is viewed as [rows, n] at `axis`; per row, with
// x^ = (x - mean) * inv and dx^ = dy * scale (scale broadcast over the row):
//   dx = inv * (dx^ - mean(dx^) - x^ * mean(dx^ * x^))
//        + dMean / n - dInvStdDev * inv^2 * x^ / n          (when the statistics outputs had gradients)
// dScale and dB sum dy * x^ and dy over the rows, then over the dims Scale and B broadcast.
// The forward's Mean and InvStdDev outputs are float (stash_type 1): they are reused for float32 X
// and recomputed in double for float64, whose gradient they would otherwise round to float.
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/simd_dispatch.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// For each element of the normalised shape, its offset in a parameter of shape `p` broadcast to it.
std::vector<int64_t> broadcast_offsets(const Shape& p, const Shape& norm) {
  std::vector<int64_t> out(size_t(numel(norm)));
  const Strides pst = contiguous_strides(p);
  const size_t lead = norm.size() - p.size();
  for (int64_t i = 0; i < int64_t(out.size()); ++i) {
    int64_t rem = i, src = 0;
    for (size_t d = norm.size(); d-- > 0;) {
      const int64_t idx = rem % norm[d];
      rem /= norm[d];
      if (d >= lead && p[d - lead] != 1) src += idx * pst[d - lead];
    }
    out[size_t(i)] = src;
  }
  return out;
}

bool broadcasts_to(const Shape& p, const Shape& norm) {
  if (p.size() > norm.size()) return false;
  for (size_t d = 0; d < p.size(); ++d) {
    const int64_t want = norm[norm.size() - p.size() + d];
    if (p[d] != want && p[d] != 1) return false;
  }
  return true;
}

// One chunk's rows [first, first + count) of LayerNormalizationGrad, with its partial sums of dScale
// and dB: a simd_dispatch.h body, so that its loops run at the CPU's vector width (the library's
// baseline build ran these double loops two lanes wide).
template <class T>
struct RowArgs {
  const T* x;
  const T* g;
  T* dx;
  const double* scale;
  double* dxhat;  // [n] scratch
  double* ps;     // the chunk's partial dScale and dB, [n] each
  double* pb;
  int64_t n;
  double eps;
  int64_t first;
  const Tensor* mean;  // the forward's statistics (float32 X), or null: recomputed
  const Tensor* inv;
  const Tensor* dmean;  // the statistics' gradients, or null
  const Tensor* dinv;
};

template <class T>
[[gnu::always_inline]] inline void grad_rows_body(const RowArgs<T>& a, int64_t begin, int64_t end) {
  const int64_t n = a.n;
  // Raw pointers and omp simd reductions: through the vectors' references GCC could not rule out
  // aliasing or reorder the sums, and none of these loops vectorised.
  double* __restrict dxh = a.dxhat;
  double* __restrict ps_row = a.ps;
  double* __restrict pb_row = a.pb;
  const double* __restrict sc = a.scale;
  for (int64_t k = begin; k < end; ++k) {
    const int64_t r = a.first + k;
    const T* __restrict xr = a.x + r * n;
    const T* __restrict gr = a.g + r * n;
    double mean, inv;
    if (a.mean != nullptr) {
      mean = a.mean->item_as_double(r);
      inv = a.inv->item_as_double(r);
    } else {
      double sum = 0, sq = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) sum += to_double(xr[i]);
      mean = sum / double(n);
#pragma omp simd reduction(+ : sq)
      for (int64_t i = 0; i < n; ++i) sq += (to_double(xr[i]) - mean) * (to_double(xr[i]) - mean);
      inv = 1.0 / std::sqrt(sq / double(n) + a.eps);
    }
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
#pragma omp simd reduction(+ : mean_dxhat, mean_dxhat_xhat)
    for (int64_t i = 0; i < n; ++i) {
      const double g = to_double(gr[i]), xhat = (to_double(xr[i]) - mean) * inv;
      dxh[i] = g * sc[i];
      mean_dxhat += dxh[i];
      mean_dxhat_xhat += dxh[i] * xhat;
      ps_row[i] += g * xhat;
      pb_row[i] += g;
    }
    mean_dxhat /= double(n);
    mean_dxhat_xhat /= double(n);
    const double extra_const = a.dmean ? a.dmean->item_as_double(r) / double(n) : 0.0;
    const double extra_xhat = a.dinv ? -a.dinv->item_as_double(r) * inv * inv / double(n) : 0.0;
    T* __restrict dxr = a.dx + r * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const double xhat = (to_double(xr[i]) - mean) * inv;
      dxr[i] = from_double<T>(inv * (dxh[i] - mean_dxhat - xhat * mean_dxhat_xhat) + extra_const + extra_xhat * xhat);
    }
  }
}

// Inputs: 0 dY, 1 X, 2 Scale, 3 Mean?, 4 InvStdDev?, 5 dMean?, 6 dInvStdDev?, 7 B? (shape only).
class LayerNormGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  bool reads_only_shape(size_t input) const override { return input == 7; }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& dy = ctx.input(0);
    const TensorMeta& x = ctx.input(1);
    if (dy.shape != x.shape || dy.dtype != x.dtype)
      throw ShapeError(fmt::format("LayerNormalizationGrad: dY {} must match X {}", dy.describe(), x.describe()));
    const int64_t rank = static_cast<int64_t>(x.shape.size()), attr = node_.attr_int("axis", -1);
    if (attr < -rank || attr >= rank)
      throw ShapeError(fmt::format("LayerNormalizationGrad: axis {} is out of range for X {}", attr, x.describe()));
    const int64_t axis = attr < 0 ? attr + rank : attr;
    norm_.assign(x.shape.begin() + axis, x.shape.end());
    rows_ = 1;
    for (int64_t i = 0; i < axis; ++i) rows_ *= x.shape[size_t(i)];
    Shape stat = x.shape;
    for (int64_t i = axis; i < rank; ++i) stat[size_t(i)] = 1;
    for (size_t i : {2u, 7u})
      if (ctx.has_input(i) && !broadcasts_to(ctx.shape(i), norm_))
        throw ShapeError(
            fmt::format("LayerNormalizationGrad: input {} {} does not broadcast to the normalised shape {}", i,
                        ctx.input(i).describe(), to_string(norm_)));
    for (size_t i = 3; i < 7; ++i)
      if (ctx.has_input(i) && numel(ctx.shape(i)) != rows_)
        throw ShapeError(
            fmt::format("LayerNormalizationGrad: statistic input {} {} must have {} elements (one per row "
                        "of X {} at axis {})",
                        i, ctx.input(i).describe(), rows_, x.describe(), attr));
    const Shape bias_shape = ctx.has_input(7) ? ctx.shape(7) : norm_;
    return {{x.dtype, x.shape, x.dynamic, Tensor()},
            {ctx.dtype(2), ctx.shape(2), false, Tensor()},
            {ctx.dtype(2), bias_shape, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    visit_dtype(ctx.input(1).dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>) run<T>(ctx);
      else throw TypeError(fmt::format("LayerNormalizationGrad: {} input", ctx.input(1).describe()));
    });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const int64_t n = numel(norm_), rows = rows_;
    const double eps = node_.attr_float("epsilon", 1e-5f);
    const T* px = ctx.input(1).data<T>();
    const T* pg = ctx.input(0).data<T>();
    T* pdx = ctx.output(0).data<T>();
    const Tensor& scale_t = ctx.input(2);
    const std::vector<int64_t> soff = broadcast_offsets(scale_t.shape(), norm_);
    std::vector<double> scale(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) scale[size_t(i)] = scale_t.item_as_double(soff[size_t(i)]);
    const bool saved = std::is_same_v<T, float> && ctx.has_input(3) && ctx.has_input(4);
    const Tensor* dmean = ctx.has_input(5) ? &ctx.input(5) : nullptr;
    const Tensor* dinv = ctx.has_input(6) ? &ctx.input(6) : nullptr;
    // Per-thread partial sums of dScale and dB over the rows, added up at the end.
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
    const int64_t chunks = (rows + grain - 1) / grain;
    std::vector<std::vector<double>> part_s(static_cast<size_t>(chunks)), part_b(static_cast<size_t>(chunks));
    parallel_for(chunks, 1, [&](int64_t cs, int64_t ce) {
      std::vector<double> dxhat(static_cast<size_t>(n));
      for (int64_t chunk = cs; chunk < ce; ++chunk) {
        std::vector<double>& ps = part_s[size_t(chunk)];
        std::vector<double>& pb = part_b[size_t(chunk)];
        ps.assign(size_t(n), 0.0);
        pb.assign(size_t(n), 0.0);
        const int64_t first = chunk * grain, count = std::min(rows, (chunk + 1) * grain) - first;
        const RowArgs<T> args{px,
                              pg,
                              pdx,
                              scale.data(),
                              dxhat.data(),
                              ps.data(),
                              pb.data(),
                              n,
                              eps,
                              first,
                              saved ? &ctx.input(3) : nullptr,
                              saved ? &ctx.input(4) : nullptr,
                              dmean,
                              dinv};
        simd::run_best<grad_rows_body<T>>(args, count);
      }
    });
    fold(ctx.output(1), part_s);
    fold(ctx.output(2), part_b);
  }

  // Sums the per-chunk [n] partials into a parameter gradient of its own (broadcast) shape.
  void fold(Tensor& out, const std::vector<std::vector<double>>& parts) const {
    const std::vector<int64_t> off = broadcast_offsets(out.shape(), norm_);
    std::vector<double> acc(size_t(out.numel()), 0.0);
    for (const auto& p : parts)
      for (size_t i = 0; i < p.size(); ++i) acc[size_t(off[i])] += p[i];
    visit_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>)
        for (size_t i = 0; i < acc.size(); ++i) out.data<T>()[i] = from_double<T>(acc[i]);
    });
  }

  Shape norm_;
  int64_t rows_ = 1;
};

const KernelRegistrar reg(
    {kKilnDomain, "LayerNormalizationGrad", 1, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
    [](const Node& n) { return std::make_unique<LayerNormGradKernel>(n); });
const OpDocRegistrar doc(
    {kKilnDomain,
     "LayerNormalizationGrad",
     "Gradient of LayerNormalization (opset 17).",
     {"dY: gradient of Y", "X: the forward input", "Scale: broadcast to X.shape[axis:]",
      "Mean (optional): the forward's Mean output; used for float32 X, recomputed if absent",
      "InvStdDev (optional): the forward's InvStdDev output; used with Mean",
      "dMean (optional): gradient of the Mean output", "dInvStdDev (optional): gradient of the InvStdDev output",
      "B (optional): the forward's B; only its shape is read, for dB's shape"},
     {"dX: gradient of X", "dScale: gradient of Scale, Scale's shape",
      "dB: gradient of B, B's shape (X.shape[axis:] without B)"},
     "attributes axis, epsilon. Per row of n = prod(X.shape[axis:]) elements: x^ = (x - mean) * inv, "
     "dx^ = dY * Scale, dX = inv * (dx^ - mean(dx^) - x^ * mean(dx^ * x^)) + dMean / n - dInvStdDev * inv^2 * x^ / n; "
     "dScale = sum over rows of dY * x^, dB = sum over rows of dY (then summed over broadcast dims)"});

}  // namespace
}  // namespace kiln
