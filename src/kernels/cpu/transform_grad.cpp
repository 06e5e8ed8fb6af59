// ai.kiln.SliceGrad, the gradient of Slice (transform.cpp) with respect to its data.
#include <fmt/format.h>

#include <cstring>

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
