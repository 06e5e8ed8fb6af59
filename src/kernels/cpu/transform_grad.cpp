// ai.kiln.SliceGrad, the gradient of Slice (transform.cpp) with respect to its data, and
// ai.kiln.SliceGradSum, the summed gradients of several Slices of one tensor on one axis.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/int_values.h"
#include "kernels/cpu/transform_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using transform::grain_for;
using transform::slice_spec;
using transform::SliceSpec;

// ai.kiln.SliceGrad(dY, shape, starts, ends[, axes, steps]): zeros of `shape` with dY written where
// Slice read. A slice never reads an element twice, so rows are written in parallel.
class SliceGradKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const std::vector<int64_t> shape = int_values(ctx.value(1), "shape");
    spec_ = slice_spec(node_, ctx, shape, 2, true);
    if (ctx.shape(0) != spec_.out)
      throw ShapeError(fmt::format("dY {} must have the slice's shape {} (of input {})", to_string(ctx.shape(0)),
                                   to_string(spec_.out), to_string(shape)));
    return {{ctx.dtype(0), shape, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    const size_t esize = dtype_size(dx.dtype());
    zero(dx);
    if (dy.numel() == 0) return;
    visit_esize(esize, [&](auto tag) {
      using U = decltype(tag);
      const Shape& ys = dy.shape();
      const size_t r = ys.size();
      const Strides st = contiguous_strides(dx.shape());
      int64_t base = 0;
      Strides dst(r);
      for (size_t d = 0; d < r; ++d) {
        base += spec_.start[d] * st[d];
        dst[d] = st[d] * spec_.step[d];
      }
      const U* src = static_cast<const U*>(dy.raw_data());
      U* out = static_cast<U*>(dx.raw_data()) + base;
      const int64_t cols = r == 0 ? 1 : ys[r - 1];
      const int64_t col_stride = r == 0 ? 0 : dst[r - 1];
      const int64_t rows = dy.numel() / cols;
      parallel_for(rows, grain_for(cols * static_cast<int64_t>(esize)), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          int64_t off = 0;
          for (int64_t rem = row, d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
            off += (rem % ys[d]) * dst[d];
            rem /= ys[d];
          }
          const U* in = src + row * cols;
          if (col_stride == 1) std::memcpy(out + off, in, static_cast<size_t>(cols) * sizeof(U));
          else
            for (int64_t c = 0; c < cols; ++c) out[off + c * col_stride] = in[c];
        }
      });
    });
  }

 private:
  // The whole output to zeros, split across threads (a serial memset of bert's 6 MB QKV gradient
  // was a quarter of this kernel's time at 2 threads).
  static void zero(Tensor& t) {
    auto* bytes = static_cast<unsigned char*>(t.raw_data());
    parallel_for(static_cast<int64_t>(t.nbytes()), int64_t{1} << 18,
                 [&](int64_t b, int64_t e) { std::memset(bytes + b, 0, static_cast<size_t>(e - b)); });
  }
  template <class F>
  static void visit_esize(size_t esize, F&& f) {
    switch (esize) {
      case 2:
        return f(uint16_t{});
      case 4:
        return f(uint32_t{});
      case 8:
        return f(uint64_t{});
      default:
        throw Unsupported(fmt::format("SliceGrad has no loop for {}-byte elements", esize));
    }
  }
  SliceSpec spec_;
};

// ai.kiln.SliceGradSum(dY_1, start_1, end_1, ..., dY_k, start_k, end_k, shape, axis): the sum over j
// of SliceGrad(dY_j, shape, [start_j], [end_j], axis), steps 1 (ir/fusion.h, join_slice_gradients:
// the backward of a tensor split into Slices). Parts that partition the axis are copied side by
// side; otherwise the output is zeroed and each part added where it goes, in input order (as Sum
// adds them).
class SliceGradSumKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const size_t n = ctx.num_inputs();
    if (n < 5 || (n - 2) % 3 != 0)
      throw InvalidModel(
          fmt::format("SliceGradSum takes (dY, start, end) per part, then shape and axis: {} inputs", n));
    shape_ = int_values(ctx.value(n - 2), "shape");
    const std::vector<int64_t> axis = int_values(ctx.value(n - 1), "axis");
    const auto rank = static_cast<int64_t>(shape_.size());
    if (axis.size() != 1 || axis[0] < -rank || axis[0] >= rank)
      throw ShapeError(fmt::format("axis {} must be one axis of shape {}", to_string(axis), to_string(shape_)));
    axis_ = axis[0] < 0 ? axis[0] + rank : axis[0];
    const int64_t extent = shape_[static_cast<size_t>(axis_)];
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + extent : v, int64_t{0}, extent); };
    parts_.clear();
    bool dynamic = false;
    for (size_t k = 0; k + 2 < n; k += 3) {
      const std::vector<int64_t> s = int_values(ctx.value(k + 1), "start"), e = int_values(ctx.value(k + 2), "end");
      if (s.size() != 1 || e.size() != 1)
        throw ShapeError(fmt::format("start {} and end {} of part {} must have one element each", to_string(s),
                                     to_string(e), k / 3));
      const Part p{k, clamp(s[0]), std::max(clamp(s[0]), clamp(e[0]))};
      Shape want = shape_;
      want[static_cast<size_t>(axis_)] = p.end - p.begin;
      if (ctx.shape(k) != want || ctx.dtype(k) != ctx.dtype(0))
        throw ShapeError(fmt::format("dY of part {} is {} {}; the slice [{}, {}) of {} on axis {} is {} {}", k / 3,
                                     dtype_name(ctx.dtype(k)), to_string(ctx.shape(k)), p.begin, p.end,
                                     to_string(shape_), axis_, dtype_name(ctx.dtype(0)), to_string(want)));
      dynamic = dynamic || ctx.input(k).dynamic;
      parts_.push_back(p);
    }
    std::vector<Part> sorted = parts_;
    std::sort(sorted.begin(), sorted.end(), [](const Part& a, const Part& b) { return a.begin < b.begin; });
    int64_t at = 0;
    partition_ = true;
    for (const Part& p : sorted) {
      partition_ = partition_ && p.begin == at;
      at = p.end;
    }
    partition_ = partition_ && at == extent;
    return {{ctx.dtype(0), shape_, dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& out = ctx.output(0);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < shape_.size(); ++d) {
      if (static_cast<int64_t>(d) < axis_) outer *= shape_[d];
      if (static_cast<int64_t>(d) > axis_) inner *= shape_[d];
    }
    const int64_t extent = shape_[static_cast<size_t>(axis_)];
    if (out.dtype() == DType::Float64) run<double>(ctx, out.data<double>(), outer, inner, extent);
    else run<float>(ctx, out.data<float>(), outer, inner, extent);
  }

 private:
  struct Part {
    size_t input;
    int64_t begin, end;
  };

  template <class T>
  void run(ComputeContext& ctx, T* out, int64_t outer, int64_t inner, int64_t extent) const {
    if (!partition_) std::fill(out, out + outer * extent * inner, T(0));
    for (const Part& p : parts_) {
      const T* src = ctx.input(p.input).data<T>();
      const int64_t len = (p.end - p.begin) * inner;
      if (len == 0) continue;
      parallel_for(outer, grain_for(len * static_cast<int64_t>(sizeof(T))), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          T* to = out + (o * extent + p.begin) * inner;
          const T* from = src + o * len;
          if (partition_) std::memcpy(to, from, static_cast<size_t>(len) * sizeof(T));
          else
            for (int64_t i = 0; i < len; ++i) to[i] += from[i];
        }
      });
    }
  }

  std::vector<int64_t> shape_;
  int64_t axis_ = 0;
  std::vector<Part> parts_;
  bool partition_ = false;
};

const KernelRegistrar reg_slice_grad_sum({kKilnDomain, "SliceGradSum", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                         [](const Node& n) { return std::make_unique<SliceGradSumKernel>(n); });
const OpDocRegistrar doc_slice_grad_sum(
    {kKilnDomain,
     "SliceGradSum",
     "The sum of the gradients of several Slices (steps 1) of one tensor on one axis.",
     {"dY_j, start_j, end_j (j = 1..k): each part's gradient and its start and end on the axis (Slice's "
      "semantics)",
      "shape: int64 [r], the shape of the sliced tensor", "axis: int [1], the axis every part slices"},
     {"dX: the sum over j of SliceGrad(dY_j, shape, [start_j], [end_j], axis), of the given shape"},
     "parts that partition the axis are copied side by side; otherwise dX = 0 and each part is added where it goes, "
     "in input order"});

const KernelRegistrar reg_slice_grad({kKilnDomain, "SliceGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                     [](const Node& n) { return std::make_unique<SliceGradKernel>(n); });
const OpDocRegistrar doc_slice_grad(
    {kKilnDomain,
     "SliceGrad",
     "The gradient of Slice with respect to its data.",
     {"dY: the gradient of Slice's output", "shape: int64 [r], the shape of Slice's data",
      "starts, ends, axes (optional), steps (optional): Slice's inputs, with Slice's semantics (opset 10+)"},
     {"dX: the gradient of data, of the given shape"},
     "dX = 0; dX[slice(starts, ends, axes, steps)] = dY (a slice reads each element at most once)"});

}  // namespace
}  // namespace kiln
