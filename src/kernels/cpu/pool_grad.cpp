// ai.kiln.MaxPoolGrad and ai.kiln.AveragePoolGrad: the input gradients of MaxPool and AveragePool
// from the output gradient and the input, with the forward's attributes (kernel_shape, strides,
// pads, auto_pad, dilations, ceil_mode, count_include_pad). MaxPool's argmax is recomputed from X
// (the first maximum of each window, as the forward's Indices), so the graph needs no Indices
// output. Plain loops over a window table, threads split the (batch, channel) planes. The
// *ChannelsLast forms (the layout pass, ir/fusion.h) take dY, X and dX as [N, H, W, C]: each window
// is walked once for a block of channels, a vector of them at a time; threads split the (batch,
// channel block) pairs.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/low_precision.h"
#include "kernels/cpu/pool_common.h"
#include "kernels/cpu/simd_dispatch.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// Channels per block of the channels-last walks.
constexpr int64_t kChannelBlock = 64;

class PoolGradKernel : public Kernel {
 public:
  PoolGradKernel(const Node& node, const char* op)
      : Kernel(node), op_(op), channels_last_(node.op_type.ends_with("ChannelsLast")) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    TensorMeta dy = ctx.input(0), x = ctx.input(1);
    const Shape x_shape = x.shape;
    if (channels_last_) {
      if (x.shape.size() != 4 || dy.shape.size() != 4)
        throw ShapeError(fmt::format("{}: dY {} and X {} must be 2-D maps held channels last ([N, H, W, C])",
                                     node_.label(), dy.describe(), x.describe()));
      x.shape = dnnl_util::nchw_of(x.shape);
      dy.shape = dnnl_util::nchw_of(dy.shape);
    }
    if (x.shape.size() < 3 || x.shape.size() > 5)
      throw ShapeError(fmt::format("{}: X {} must be [N, C, D1..D3]", op_, x.describe()));
    if (!node_.has_attr("kernel_shape"))
      throw InvalidModel(fmt::format("{}: attribute 'kernel_shape' is required", op_));
    const Shape spatial(x.shape.begin() + 2, x.shape.end());
    const std::vector<int64_t> kernel = node_.attr_ints("kernel_shape");
    if (kernel.size() != spatial.size())
      throw ShapeError(
          fmt::format("{}: kernel_shape [{}] does not fit X {}", op_, fmt::join(kernel, ", "), x.describe()));
    const dnnl_util::Window win = dnnl_util::make_window(node_, spatial, kernel, true);
    Shape y{x.shape[0], x.shape[1]};
    y.insert(y.end(), win.out.begin(), win.out.end());
    if (dy.shape != y || dy.dtype != x.dtype)
      throw ShapeError(fmt::format("{}: dY {} must be {}{}, the pooled shape of X {}", op_, dy.describe(),
                                   dtype_name(x.dtype), to_string(y), x.describe()));
    planes_ = x.shape[0] * x.shape[1];
    images_ = x.shape[0];
    channels_ = x.shape[1];
    in_plane_ = numel(spatial);
    out_plane_ = numel(win.out);
    plan_windows(spatial, win);
    return {TensorMeta{x.dtype, x_shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& dx = ctx.output(0);
    visit_dtype(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const T* dy = ctx.input(0).data<T>();
        const T* x = ctx.input(1).data<T>();
        T* out = dx.data<T>();
        if (channels_last_ || !writes_every_input()) std::memset(out, 0, dx.nbytes());
        if (channels_last_) {
          const int64_t c = channels_, blocks = (c + kChannelBlock - 1) / kChannelBlock;
          parallel_for(images_ * blocks, 1, [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              const int64_t n = p / blocks, first = (p % blocks) * kChannelBlock;
              const Block b{c, first, std::min(c, first + kChannelBlock)};
              scatter_block(dy + n * out_plane_ * c, x + n * in_plane_ * c, out + n * in_plane_ * c, b);
            }
          });
          return;
        }
        parallel_for(planes_, 1, [&](int64_t begin, int64_t end) {
          for (int64_t pl = begin; pl < end; ++pl)
            scatter(dy + pl * out_plane_, x + pl * in_plane_, out + pl * in_plane_);
        });
      } else {
        throw Unsupported(
            fmt::format("{}: {} inputs (float32 and float64 are supported)", op_, dtype_name(dx.dtype())));
      }
    });
  }

 protected:
  // Channels [first, last) of a channels-last image with c channels.
  struct Block {
    int64_t c = 0, first = 0, last = 0;
  };
  // Whether scatter() writes every element of dX itself (no zeroing first).
  virtual bool writes_every_input() const { return false; }
  // Precomputes what scatter() needs of the windows over an input plane of `spatial` dims.
  virtual void plan_windows(const Shape& spatial, const dnnl_util::Window& win) = 0;
  // One plane: adds each output's gradient to the inputs it came from.
  virtual void scatter(const float* dy, const float* x, float* dx) const = 0;
  virtual void scatter(const double* dy, const double* x, double* dx) const = 0;
  // One image held channels last, the channels of block b.
  virtual void scatter_block(const float* dy, const float* x, float* dx, const Block& b) const = 0;
  virtual void scatter_block(const double* dy, const double* x, double* dx, const Block& b) const = 0;

  const char* op_;
  const bool channels_last_;
  int64_t planes_ = 0, images_ = 0, channels_ = 0, in_plane_ = 1, out_plane_ = 1;
};

// MaxPoolGrad walks the windows directly (spatial dims padded to three, each output's range of taps
// inside the input worked out once per axis) instead of through the window table, choosing the
// arg-max with selects. Ties go to the first tap in row-major order, as with the table. Training
// steps: LeNet's two pools 0.77 -> 0.53 ms, ResNet-18's 224x224 stem pool 22.8 -> 9-13 ms.
class MaxPoolGradKernel final : public PoolGradKernel {
 public:
  explicit MaxPoolGradKernel(const Node& node) : PoolGradKernel(node, "MaxPoolGrad") {}

 protected:
  void plan_windows(const Shape& spatial, const dnnl_util::Window& win) override {
    const size_t nsp = spatial.size(), off = 3 - nsp;
    axes_ = {};
    for (size_t i = 0; i < nsp; ++i) axes_[off + i] = make_axis(spatial[i], win, i);
    for (Axis& a : axes_)
      if (a.lo.empty()) a = Axis{1, 1, 1, 0, 1, {0}, {1}};  // a padding axis: one output, one tap
  }
  void scatter(const float* dy, const float* x, float* dx) const override { run(dy, x, dx); }
  void scatter(const double* dy, const double* x, double* dx) const override { run(dy, x, dx); }
  void scatter_block(const float* dy, const float* x, float* dx, const Block& b) const override {
    run_block(dy, x, dx, b);
  }
  void scatter_block(const double* dy, const double* x, double* dx, const Block& b) const override {
    run_block(dy, x, dx, b);
  }

 private:
  // One spatial axis: output o's taps k in [lo[o], hi[o]) read input o * s - p + k * d.
  struct Axis {
    int64_t in = 1, s = 1, d = 1, p = 0, k = 1;
    std::vector<int64_t> lo, hi;
    int64_t out() const { return int64_t(lo.size()); }
    int64_t pos(int64_t o, int64_t k) const { return o * s - p + k * d; }
  };

  static Axis make_axis(int64_t in, const dnnl_util::Window& w, size_t i) {
    Axis a{in, w.strides[i], w.dilations[i], w.pad_begin[i], w.kernel[i], {}, {}};
    for (int64_t o = 0; o < w.out[i]; ++o) {
      int64_t lo = 0, hi = a.k;
      while (lo < hi && a.pos(o, lo) < 0) ++lo;
      while (hi > lo && a.pos(o, hi - 1) >= in) --hi;
      a.lo.push_back(lo);
      a.hi.push_back(hi);
    }
    return a;
  }

  // v where `keep`, else +0, by masking its bits: no branch on the data (a select on a store
  // compiled to one, mispredicted on every other window), and an infinite v stays infinite.
  template <class T>
  static T kept(bool keep, T v) {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    return std::bit_cast<T>(std::bit_cast<Bits>(v) & (Bits(0) - Bits(keep)));
  }

  // Whether the windows of a 2-D map tile it: kernel == stride, no dilation, no padding (each input
  // in at most one window; LeNet's and VGG's 2 x 2 pools).
  bool tiled() const {
    const Axis& a0 = axes_[0];  // the padding axis (2-D and 1-D maps), or a depth of one tap
    if (a0.out() != 1 || a0.in != 1 || a0.k != 1 || a0.p != 0) return false;
    for (size_t i = 1; i < 3; ++i)
      if (axes_[i].k != axes_[i].s || axes_[i].d != 1 || axes_[i].p != 0) return false;
    return true;
  }

  // 2 x 2 windows tiling the whole map: run_tiled writes every element of dX.
  bool writes_every_input() const override {
    return tiled() && axes_[1].k == 2 && axes_[2].k == 2 && axes_[1].in == 2 * axes_[1].out() &&
           axes_[2].in == 2 * axes_[2].out();
  }

  // Tiled windows, dX zeroed by compute() (but for 2 x 2 windows that tile the whole map, which
  // write all four taps): each window's gradient at its first maximum in row-major order (the
  // selects as scatter_one's).
  template <class T>
  void run_tiled(const T* dy, const T* x, T* dx) const {
    const Axis &a1 = axes_[1], &a2 = axes_[2];
    const int64_t w = a2.in, kh = a1.k, kw = a2.k, ow = a2.out();
    for (int64_t oy = 0; oy < a1.out(); ++oy) {
      const T* g = dy + oy * ow;
      const T* r0 = x + oy * kh * w;
      T* d0 = dx + oy * kh * w;
      if (kh == 2 && kw == 2) {
        const T* r1 = r0 + w;
        T* d1 = d0 + w;
        // All four taps written (0 but at the maximum): no data-dependent stores or branches, so
        // the loop vectorizes.
#pragma omp simd
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t c = 2 * ox;
          const T a = r0[c], b = r0[c + 1], e = r1[c], f = r1[c + 1], v = g[ox];
          const bool second = b > a;
          const T m1 = second ? b : a;
          const bool third = e > m1;
          const T m2 = third ? e : m1;
          const bool fourth = f > m2;
          d0[c] = kept(!second & !third & !fourth, v);
          d0[c + 1] = kept(second & !third & !fourth, v);
          d1[c] = kept(third & !fourth, v);
          d1[c + 1] = kept(fourth, v);
        }
        continue;
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t at = ox * kw;
        T best = r0[at];
        for (int64_t ky = 0; ky < kh; ++ky)
          for (int64_t kx = 0; kx < kw; ++kx) {
            const int64_t i = ky * w + ox * kw + kx;
            const bool better = r0[i] > best;
            at = better ? i : at;
            best = better ? r0[i] : best;
          }
        d0[at] = g[ox];
      }
    }
  }

  template <class T>
  void run(const T* dy, const T* x, T* dx) const {
    if (tiled()) return run_tiled(dy, x, dx);
    const Axis &a0 = axes_[0], &a1 = axes_[1], &a2 = axes_[2];
    for (int64_t o0 = 0; o0 < a0.out(); ++o0)
      for (int64_t o1 = 0; o1 < a1.out(); ++o1) {
        const int64_t o = (o0 * a1.out() + o1) * a2.out();
        const int64_t lo0 = a0.lo[size_t(o0)], hi0 = a0.hi[size_t(o0)], lo1 = a1.lo[size_t(o1)],
                      hi1 = a1.hi[size_t(o1)];
        if (lo0 == hi0 || lo1 == hi1) continue;  // windows wholly in the padding took no input
        for (int64_t o2 = 0; o2 < a2.out(); ++o2) scatter_one(dy[o + o2], x, dx, o0, o1, o2);
      }
  }

  // One window, its first tap the starting maximum: selects instead of branches (which tap wins
  // is data; with branches, or with a "no tap yet" test in the loop, the walk ran 2x slower).
  template <class T>
  void scatter_one(T g, const T* x, T* dx, int64_t o0, int64_t o1, int64_t o2) const {
    const Axis &a0 = axes_[0], &a1 = axes_[1], &a2 = axes_[2];
    const int64_t lo0 = a0.lo[size_t(o0)], hi0 = a0.hi[size_t(o0)], lo1 = a1.lo[size_t(o1)], hi1 = a1.hi[size_t(o1)],
                  lo2 = a2.lo[size_t(o2)], hi2 = a2.hi[size_t(o2)];
    if (lo2 == hi2) return;
    int64_t at = (a0.pos(o0, lo0) * a1.in + a1.pos(o1, lo1)) * a2.in + a2.pos(o2, lo2);
    T best = x[at];
    for (int64_t k0 = lo0; k0 < hi0; ++k0)
      for (int64_t k1 = lo1; k1 < hi1; ++k1) {
        const int64_t row = (a0.pos(o0, k0) * a1.in + a1.pos(o1, k1)) * a2.in;
        for (int64_t k2 = lo2; k2 < hi2; ++k2) {
          const int64_t i = row + a2.pos(o2, k2);
          const T v = x[i];
          const bool better = v > best;
          at = better ? i : at;
          best = better ? v : best;
        }
      }
    dx[at] += g;
  }

  // run() over a channels-last image: each window's taps walked in row-major order, the maximum
  // and its tap's number kept per channel of the block (one vector step per tap: simd_dispatch.h),
  // then each channel's gradient added at its tap.
  template <class T>
  void run_block(const T* dy, const T* x, T* dx, const Block& b) const {
    const Axis &a0 = axes_[0], &a1 = axes_[1], &a2 = axes_[2];
    const int64_t c = b.c, w = b.last - b.first;
    std::array<T, kChannelBlock> best{};
    std::array<int32_t, kChannelBlock> tap{};
    std::vector<int64_t> at;  // each tap's element offset, channel 0
    for (int64_t o0 = 0; o0 < a0.out(); ++o0)
      for (int64_t o1 = 0; o1 < a1.out(); ++o1)
        for (int64_t o2 = 0; o2 < a2.out(); ++o2) {
          const int64_t lo0 = a0.lo[size_t(o0)], hi0 = a0.hi[size_t(o0)], lo1 = a1.lo[size_t(o1)],
                        hi1 = a1.hi[size_t(o1)], lo2 = a2.lo[size_t(o2)], hi2 = a2.hi[size_t(o2)];
          if (lo0 == hi0 || lo1 == hi1 || lo2 == hi2) continue;  // wholly in the padding
          at.clear();
          for (int64_t k0 = lo0; k0 < hi0; ++k0)
            for (int64_t k1 = lo1; k1 < hi1; ++k1)
              for (int64_t k2 = lo2; k2 < hi2; ++k2)
                at.push_back(((a0.pos(o0, k0) * a1.in + a1.pos(o1, k1)) * a2.in + a2.pos(o2, k2)) * c + b.first);
          std::copy(x + at[0], x + at[0] + w, best.begin());
          std::fill(tap.begin(), tap.begin() + w, 0);
          for (size_t t = 1; t < at.size(); ++t)
            simd::run_best<max_step_body<T>>(MaxStep<T>{x + at[t], best.data(), tap.data(), int32_t(t)}, w);
          const T* g = dy + ((o0 * a1.out() + o1) * a2.out() + o2) * c + b.first;
          for (int64_t k = 0; k < w; ++k) dx[at[size_t(tap[size_t(k)])] + k] += g[k];
        }
  }

  // One tap of a window over a block of channels: where x beats the maximum so far, it and tap t win.
  template <class T>
  struct MaxStep {
    const T* x;
    T* best;
    int32_t* tap;
    int32_t t;
  };
  template <class T>
  [[gnu::always_inline]] static inline void max_step_body(const MaxStep<T>& s, int64_t begin, int64_t end) {
    const T* __restrict x = s.x;
    T* __restrict best = s.best;
    int32_t* __restrict tap = s.tap;
    const int32_t t = s.t;
#pragma omp simd
    for (int64_t k = begin; k < end; ++k) {
      const bool better = x[k] > best[k];
      best[k] = better ? x[k] : best[k];
      tap[k] = better ? t : tap[k];
    }
  }

  std::array<Axis, 3> axes_;
};

class AveragePoolGradKernel final : public PoolGradKernel {
 public:
  explicit AveragePoolGradKernel(const Node& node) : PoolGradKernel(node, "AveragePoolGrad") {}
  bool reads_only_shape(size_t input) const override { return input == 1; }

 protected:
  void plan_windows(const Shape& spatial, const dnnl_util::Window& win) override {
    table_ = pool::make_table(spatial, win);
  }
  void scatter(const float* dy, const float* x, float* dx) const override { run(dy, x, dx); }
  void scatter(const double* dy, const double* x, double* dx) const override { run(dy, x, dx); }
  void scatter_block(const float* dy, const float*, float* dx, const Block& b) const override { run_block(dy, dx, b); }
  void scatter_block(const double* dy, const double*, double* dx, const Block& b) const override {
    run_block(dy, dx, b);
  }

 private:
  template <class T>
  void run_block(const T* dy, T* dx, const Block& b) const {
    const bool include_pad = pool::count_include_pad(node_);
    for (int64_t o = 0; o < table_.out_plane; ++o) {
      const double div = pool::avg_divisor(table_, o, include_pad);
      if (div == 0) continue;
      const T* g = dy + o * b.c;
      for (int64_t t = table_.start[size_t(o)]; t < table_.start[size_t(o) + 1]; ++t) {
        T* d = dx + table_.taps[size_t(t)] * b.c;
        for (int64_t k = b.first; k < b.last; ++k) d[k] += static_cast<T>(double(g[k]) / div);
      }
    }
  }

  template <class T>
  void run(const T* dy, const T*, T* dx) const {
    const bool include_pad = pool::count_include_pad(node_);
    for (int64_t o = 0; o < table_.out_plane; ++o) {
      const double div = pool::avg_divisor(table_, o, include_pad);
      if (div == 0) continue;
      const T g = static_cast<T>(double(dy[o]) / div);
      for (int64_t t = table_.start[size_t(o)]; t < table_.start[size_t(o) + 1]; ++t) dx[table_.taps[size_t(t)]] += g;
    }
  }

  pool::WindowTable table_;
};

// ai.kiln.GlobalAveragePoolGrad(dY [N, C, 1...], X [N, C, ...]) -> dX = dY / (X's positions per
// plane), spread over each plane; GlobalAveragePoolGradChannelsLast: X and dX as [N, H, W, C]. One
// pass writing dX (the rule's Expand of dY made the same values through two more ops).
class GlobalAveragePoolGrad final : public Kernel {
 public:
  using Kernel::Kernel;
  bool reads_only_shape(size_t input) const override { return input == 1; }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& dy = ctx.input(0);
    const TensorMeta& x = ctx.input(1);
    if (channels_last_ && x.shape.size() != 4)
      throw ShapeError(fmt::format("{}: X {} must be [N, H, W, C]", node_.label(), x.describe()));
    if (x.shape.size() < 3)
      throw ShapeError(fmt::format("{}: X {} must be [N, C, D1...]", node_.label(), x.describe()));
    Shape y(x.shape.size(), 1);
    y[0] = x.shape[0];
    y[1] = x.shape[channels_last_ ? 3 : 1];
    if (dy.shape != y || dy.dtype != x.dtype)
      throw ShapeError(fmt::format("{}: dY {} must be {}{}, GlobalAveragePool's output for X {}", node_.label(),
                                   dy.describe(), dtype_name(x.dtype), to_string(y), x.describe()));
    planes_ = y[0] * y[1];
    channels_ = y[1];
    plane_ = planes_ == 0 ? 0 : numel(x.shape) / planes_;
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    visit_dtype(ctx.output(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const T* dy = ctx.input(0).data<T>();
        T* dx = ctx.output(0).data<T>();
        const T inv = plane_ == 0 ? T(0) : static_cast<T>(1.0 / double(plane_));
        const int64_t c = channels_, plane = plane_;
        if (channels_last_) {  // each image: plane rows of its C gradients
          parallel_for(planes_ / std::max<int64_t>(1, c) * plane, 64, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              const T* g = dy + (r / plane) * c;
              T* d = dx + r * c;
              for (int64_t k = 0; k < c; ++k) d[k] = g[k] * inv;
            }
          });
          return;
        }
        parallel_for(planes_, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t p = begin; p < end; ++p)
                         std::fill(dx + p * plane, dx + (p + 1) * plane, dy[p] * inv);
                     });
      } else {
        throw Unsupported(fmt::format("{}: {} inputs (float32 and float64 are supported)", node_.label(),
                                      dtype_name(ctx.output(0).dtype())));
      }
    });
  }

 private:
  const bool channels_last_ = node_.op_type == "GlobalAveragePoolGradChannelsLast";
  int64_t planes_ = 0, channels_ = 0, plane_ = 0;
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64};
const KernelRegistrar max_reg({kKilnDomain, "MaxPoolGrad", 1, kMaxOpset, kFloats},
                              [](const Node& n) { return std::make_unique<MaxPoolGradKernel>(n); });
const KernelRegistrar avg_reg({kKilnDomain, "AveragePoolGrad", 1, kMaxOpset, kFloats},
                              [](const Node& n) { return std::make_unique<AveragePoolGradKernel>(n); });
const KernelRegistrar max_cl_reg({kKilnDomain, "MaxPoolGradChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                 [](const Node& n) { return std::make_unique<MaxPoolGradKernel>(n); });
const KernelRegistrar avg_cl_reg({kKilnDomain, "AveragePoolGradChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                 [](const Node& n) { return std::make_unique<AveragePoolGradKernel>(n); });
const OpDocRegistrar max_cl_doc({kKilnDomain,
                                 "MaxPoolGradChannelsLast",
                                 "MaxPoolGrad over 2-D maps held channels last (the layout pass, ir/fusion.h).",
                                 {"dY: [N, H', W', C]", "X: [N, H, W, C]"},
                                 {"dX: [N, H, W, C]"},
                                 "MaxPoolGrad's attributes and formula. Float32."});
const OpDocRegistrar avg_cl_doc({kKilnDomain,
                                 "AveragePoolGradChannelsLast",
                                 "AveragePoolGrad over 2-D maps held channels last (the layout pass, ir/fusion.h).",
                                 {"dY: [N, H', W', C]", "X: [N, H, W, C]; only its shape is read"},
                                 {"dX: [N, H, W, C]"},
                                 "AveragePoolGrad's attributes and formula. Float32."});
std::unique_ptr<Kernel> make_global_avg(const Node& n) { return std::make_unique<GlobalAveragePoolGrad>(n); }
const KernelRegistrar global_avg_reg({kKilnDomain, "GlobalAveragePoolGrad", 1, kMaxOpset, kFloats}, make_global_avg);
const KernelRegistrar global_avg_low(
    {kKilnDomain, "GlobalAveragePoolGrad", 1, kMaxOpset, {DType::Float16, DType::BFloat16}},
    via_float32(make_global_avg));
const KernelRegistrar global_avg_cl_reg(
    {kKilnDomain, "GlobalAveragePoolGradChannelsLast", 1, kMaxOpset, {DType::Float32}}, make_global_avg);
const OpDocRegistrar global_avg_doc({kKilnDomain,
                                     "GlobalAveragePoolGrad",
                                     "Gradient of GlobalAveragePool with respect to its input.",
                                     {"dY: gradient of the GlobalAveragePool output, [N, C, 1...]",
                                      "X: the GlobalAveragePool input; only its "
                                      "shape is read"},
                                     {"dX: gradient of X, X's shape"},
                                     "dX[n, c, i] = dY[n, c] / P, P = the positions of a plane of X"});
const OpDocRegistrar global_avg_cl_doc(
    {kKilnDomain,
     "GlobalAveragePoolGradChannelsLast",
     "GlobalAveragePoolGrad of 2-D maps held channels last (the layout pass, ir/fusion.h).",
     {"dY: [N, C, 1, 1]", "X: [N, H, W, C]; only its shape is read"},
     {"dX: [N, H, W, C]"},
     "dX[n, h, w, c] = dY[n, c] / (H * W). Float32."});
const OpDocRegistrar max_doc(
    {kKilnDomain,
     "MaxPoolGrad",
     "Gradient of MaxPool with respect to its input; attributes are the MaxPool's (kernel_shape, strides, pads, "
     "auto_pad, dilations, ceil_mode).",
     {"dY: gradient of the MaxPool output Y", "X: the MaxPool input"},
     {"dX: gradient of X, X's shape"},
     "dX[i] = sum over windows w whose first maximum is at i of dY[w] (the argmax is recomputed from X; ties go "
     "to the first tap in row-major window order)"});
const OpDocRegistrar avg_doc(
    {kKilnDomain,
     "AveragePoolGrad",
     "Gradient of AveragePool with respect to its input; attributes are the AveragePool's (kernel_shape, "
     "strides, pads, auto_pad, dilations, ceil_mode, count_include_pad).",
     {"dY: gradient of the AveragePool output Y", "X: the AveragePool input; only its shape is read"},
     {"dX: gradient of X, X's shape"},
     "dX[i] = sum over windows w containing i of dY[w] / count(w), count(w) = taps of w inside X, or with "
     "count_include_pad taps inside the explicitly padded X (never ceil_mode's extra partial window)"});

}  // namespace
}  // namespace kiln
