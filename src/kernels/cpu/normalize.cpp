// Normalisations that are neither batch nor layer norms:
// - MeanVarianceNormalization: Y = (X - mean) / (std + 1e-9) over `axes` (default [0, 2, 3]),
//   the 1e-9 being where ONNX's function body puts it;
// - LpNormalization: X divided by its L1 or L2 norm along `axis` (a zero norm gives zeros, as in
//   ONNX Runtime and PyTorch's F.normalize, instead of NaN);
// - LRN: X / (bias + alpha / size * sum of squares over a window of `size` channels)^beta.
//   oneDNN's lrn_across_channels also divides alpha by size and centres odd windows the same way,
//   so float32 with an odd size runs on it. For even sizes ONNX's window is [c - (size-1)/2,
//   c + size/2] but oneDNN's leans the other way (tests/kernels/normalize_test.cpp caught it), so
//   those, float64 and float16 run a plain loop.
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// Runs f.template operator()<T>() for the float dtypes these ops accept.
// ---------------------------------------------------------------------------------------------
// MeanVarianceNormalization

class MvnKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const std::vector<int64_t> axes = node_.attr_ints("axes", {0, 2, 3});
    reduced_.assign(size_t(rank), false);
    for (int64_t a : axes) {
      if (a < -rank || a >= rank || reduced_[size_t(a < 0 ? a + rank : a)])
        throw ShapeError(fmt::format("MeanVarianceNormalization: axes [{}] must be distinct and in range for input {}",
                                     fmt::join(axes, ", "), x.describe()));
      reduced_[size_t(a < 0 ? a + rank : a)] = true;
    }
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    // stat[k]: the statistics of the elements whose kept coordinates flatten to k.
    const Shape& shape = x.shape();
    Shape kept = shape;
    for (size_t d = 0; d < shape.size(); ++d)
      if (reduced_[d]) kept[d] = 1;
    const Strides ks = contiguous_strides(kept);
    std::vector<int64_t> stat_of(size_t(x.numel()));
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t k = 0;
      for (size_t d = 0; d < shape.size(); ++d) k += reduced_[d] ? 0 : idx[d] * ks[d];
      stat_of[size_t(i)] = k;
      for (size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    const size_t groups = size_t(numel(kept));
    const double count = double(x.numel()) / double(std::max<size_t>(1, groups));
    visit_float(x.dtype(), "MeanVarianceNormalization", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      T* py = y.data<T>();
      std::vector<double> mean(groups, 0.0), sq(groups, 0.0);
      for (int64_t i = 0; i < x.numel(); ++i) mean[size_t(stat_of[size_t(i)])] += to_double(px[i]);
      for (double& m : mean) m /= count;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double dv = to_double(px[i]) - mean[size_t(stat_of[size_t(i)])];
        sq[size_t(stat_of[size_t(i)])] += dv * dv;
      }
      for (double& s : sq) s = std::sqrt(s / count) + 1e-9;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const size_t k = size_t(stat_of[size_t(i)]);
        py[i] = from_double<T>((to_double(px[i]) - mean[k]) / sq[k]);
      }
    });
  }

 private:
  std::vector<bool> reduced_;
};

// ---------------------------------------------------------------------------------------------
// LpNormalization

class LpNormKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const int64_t attr = node_.attr_int("axis", -1);
    if (attr < -rank || attr >= rank)
      throw ShapeError(
          fmt::format("LpNormalization: axis {} is out of range for input {} (rank {})", attr, x.describe(), rank));
    p_ = node_.attr_int("p", 2);
    if (p_ != 1 && p_ != 2) throw InvalidModel(fmt::format("LpNormalization: p = {} must be 1 or 2", p_));
    const int64_t axis = attr < 0 ? attr + rank : attr;
    outer_ = inner_ = 1;
    for (int64_t i = 0; i < rank; ++i) {
      if (i < axis) outer_ *= x.shape[size_t(i)];
      if (i > axis) inner_ *= x.shape[size_t(i)];
    }
    len_ = x.shape[size_t(axis)];
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    visit_float(ctx.input(0).dtype(), "LpNormalization", [&](auto tag) {
      using T = decltype(tag);
      const T* px = ctx.input(0).data<T>();
      T* py = ctx.output(0).data<T>();
      const int64_t len = len_, inner = inner_;
      parallel_for(outer_ * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, len)), [&](int64_t b, int64_t e) {
        for (int64_t line = b; line < e; ++line) {
          const int64_t base = (line / inner) * len * inner + line % inner;
          double norm = 0;
          for (int64_t i = 0; i < len; ++i) {
            const double v = to_double(px[base + i * inner]);
            norm += p_ == 1 ? std::abs(v) : v * v;
          }
          if (p_ == 2) norm = std::sqrt(norm);
          for (int64_t i = 0; i < len; ++i)
            py[base + i * inner] = from_double<T>(norm == 0 ? 0.0 : to_double(px[base + i * inner]) / norm);
        }
      });
    });
  }

 private:
  int64_t p_ = 2, outer_ = 1, len_ = 1, inner_ = 1;
};

// ---------------------------------------------------------------------------------------------
// LRN

class LrnKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (x.shape.size() < 2) throw ShapeError(fmt::format("LRN: input {} must be [N, C, ...]", x.describe()));
    size_ = node_.attr_int("size");
    if (size_ < 1) throw InvalidModel(fmt::format("LRN: size {} must be positive", size_));
    int64_t rest = 1;
    for (size_t i = 2; i < x.shape.size(); ++i) rest *= x.shape[i];
    // Channels are the only axis LRN looks across, so the spatial dims flatten into one.
    view_ = {x.shape[0], x.shape[1], rest, 1};
    dtype_ = x.dtype;
    built_ = false;
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void prepare(const InferContext&, const std::vector<TensorMeta>&) override { build(); }
  void compute(ComputeContext& ctx) override {
    if (!built_) build();
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (use_dnnl()) {
      const dnnl::memory::desc d = dnnl_util::plain_desc(view_);
      dnnl_util::execute(
          prim_, {{DNNL_ARG_SRC, dnnl_util::memory_of(d, ctx.input(0))}, {DNNL_ARG_DST, dnnl_util::memory_of(d, y)}},
          "LRN");
      return;
    }
    visit_float(dtype_, "LRN", [&](auto tag) {  // float32 with an even size lands here too
      using T = decltype(tag);
      run_plain<T>(ctx.input(0).data<T>(), y.data<T>());
    });
  }

 private:
  float alpha() const { return node_.attr_float("alpha", 1e-4f); }
  float beta() const { return node_.attr_float("beta", 0.75f); }
  float bias() const { return node_.attr_float("bias", 1.f); }

  bool use_dnnl() const { return dtype_ == DType::Float32 && size_ % 2 == 1; }

  void build() {
    built_ = true;
    if (!use_dnnl() || numel(view_) == 0) return;
    prim_ = dnnl_util::checked(fmt::format("build LRN (size {}) for float{}", size_, to_string(view_)), [&] {
      dnnl::lrn_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels,
                                dnnl_util::plain_desc(view_), size_, alpha(), beta(), bias());
      return dnnl::lrn_forward(dnnl::lrn_forward::primitive_desc(d, dnnl_util::engine()));
    });
  }

  template <class T>
  void run_plain(const T* x, T* y) const {
    const int64_t c = view_[1], rest = view_[2], lo = (size_ - 1) / 2, hi = size_ - 1 - lo;
    const double a = double(alpha()) / double(size_), b = beta(), k = bias();
    parallel_for(view_[0] * c, 1, [&](int64_t s, int64_t e) {
      for (int64_t plane = s; plane < e; ++plane) {
        const int64_t n = plane / c, ch = plane % c;
        for (int64_t i = 0; i < rest; ++i) {
          double sum = 0;
          for (int64_t cc = std::max<int64_t>(0, ch - lo); cc <= std::min(c - 1, ch + hi); ++cc) {
            const double v = to_double(x[(n * c + cc) * rest + i]);
            sum += v * v;
          }
          y[plane * rest + i] = from_double<T>(to_double(x[plane * rest + i]) / std::pow(k + a * sum, b));
        }
      }
    });
  }

  int64_t size_ = 1;
  Shape view_;
  DType dtype_ = DType::Float32;
  bool built_ = false;
  dnnl::lrn_forward prim_;
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16};

const KernelRegistrar mvn({"", "MeanVarianceNormalization", 9, kMaxOpset, kFloats},
                          [](const Node& n) { return std::make_unique<MvnKernel>(n); });
const KernelRegistrar lp_norm({"", "LpNormalization", 1, kMaxOpset, kFloats},
                              [](const Node& n) { return std::make_unique<LpNormKernel>(n); });
const KernelRegistrar lrn({"", "LRN", 1, kMaxOpset, kFloats},
                          [](const Node& n) { return std::make_unique<LrnKernel>(n); });

}  // namespace
}  // namespace kiln
