// Data-movement ops that rearrange elements: Transpose, Concat, Slice, Split. They only move bytes,
// so one implementation on element sizes serves every dtype. Slice's gradient, ai.kiln.SliceGrad, is
// in transform_grad.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/parallel.h"
#include "kernels/cpu/int_values.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/transform_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::transform {
namespace {

// Slice: per-axis start/end/step normalised and clamped exactly as the ONNX spec says, then one
// strided copy (negative steps are negative strides).
//
// The spec's rule: negative start/end count from the end; then start clamps to [0, dim] for
// positive steps and [0, dim-1] for negative ones, end to [0, dim] or [-1, dim-1].
void slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t& first, int64_t& stride,
                int64_t& count) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  // Magnitude as unsigned so that a step of INT64_MIN does not overflow.
  const uint64_t mag = step > 0 ? static_cast<uint64_t>(step) : uint64_t{0} - static_cast<uint64_t>(step);
  int64_t span = 0;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    span = end - start;
  } else if (dim > 0) {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    span = start - end;
  }
  count = span > 0 ? static_cast<int64_t>((static_cast<uint64_t>(span) - 1) / mag + 1) : 0;
  first = count > 0 ? start : 0;
  stride = count > 1 ? step : 1;  // a huge step with one element must not overflow stride*step
}

}  // namespace

// Reads starts, ends, axes and steps from inputs `first`.. (or, before opset 10, from attributes).
SliceSpec slice_spec(const Node& node, const InferContext& ctx, const Shape& s, size_t first, bool from_inputs) {
  const int64_t rank = static_cast<int64_t>(s.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (from_inputs) {
    starts = int_values(ctx.value(first), "starts");
    ends = int_values(ctx.value(first + 1), "ends");
    if (ctx.has_input(first + 2)) axes = int_values(ctx.value(first + 2), "axes");
    if (ctx.has_input(first + 3)) steps = int_values(ctx.value(first + 3), "steps");
  } else {
    starts = node.attr_ints("starts");
    ends = node.attr_ints("ends");
    axes = node.attr_ints("axes", {});
  }
  if (axes.empty() && !(from_inputs && ctx.has_input(first + 2))) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty() && !(from_inputs && ctx.has_input(first + 3))) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw InvalidModel(fmt::format("starts {}, ends {}, axes {} and steps {} must have the same length",
                                   to_string(starts), to_string(ends), to_string(axes), to_string(steps)));
  SliceSpec spec{std::vector<int64_t>(s.size(), 0), std::vector<int64_t>(s.size(), 1), s};
  std::vector<bool> seen(s.size(), false);
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t a = normalize_axis(axes[k], rank);
    if (seen[a]) throw InvalidModel(fmt::format("axes {} name axis {} twice", to_string(axes), a));
    seen[a] = true;
    if (steps[k] == 0) throw InvalidModel(fmt::format("step for axis {} is 0", axes[k]));
    slice_axis(s[a], starts[k], ends[k], steps[k], spec.start[a], spec.step[a], spec.out[a]);
  }
  return spec;
}

}  // namespace kiln::transform

namespace kiln {
namespace {

using transform::grain_for;
using transform::slice_spec;
using transform::SliceSpec;

class TransposeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(s.size());
    std::vector<int64_t> reverse(s.size());
    std::iota(reverse.rbegin(), reverse.rend(), 0);
    perm_ = node_.attr_ints("perm", reverse);
    std::vector<int64_t> sorted = perm_;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(s.size());
    std::iota(iota.begin(), iota.end(), 0);
    if (sorted != iota)
      throw InvalidModel(fmt::format("perm {} is not a permutation of the {} axes of input shape {}", to_string(perm_),
                                     rank, to_string(s)));
    Shape out(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = s[perm_[i]];
    return {{ctx.dtype(0), out, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const Strides in_strides = contiguous_strides(in.shape());
    Strides src(perm_.size());
    for (size_t i = 0; i < perm_.size(); ++i) src[i] = in_strides[perm_[i]];
    strided_copy(in.raw_data(), out.raw_data(), out.shape(), src, dtype_size(in.dtype()));
  }

 private:
  std::vector<int64_t> perm_;
};

class ConcatKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() == 0) throw InvalidModel("Concat needs at least one input");
    const TensorMeta& first = ctx.input(0);
    const int64_t rank = static_cast<int64_t>(first.shape.size());
    if (rank == 0) throw ShapeError("cannot concatenate scalars (input 0 has rank 0)");
    axis_ = normalize_axis(node_.attr_int("axis"), rank);
    Shape out = first.shape;
    out[axis_] = 0;
    bool dynamic = false;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const TensorMeta& m = ctx.input(i);
      bool fits = m.shape.size() == first.shape.size();
      for (size_t d = 0; fits && d < m.shape.size(); ++d)
        fits = static_cast<int64_t>(d) == axis_ || m.shape[d] == first.shape[d];
      if (!fits)
        throw ShapeError(fmt::format("input {} has shape {}, which does not match input 0's shape {} outside axis {}",
                                     i, to_string(m.shape), to_string(first.shape), axis_));
      if (m.dtype != first.dtype)
        throw TypeError(
            fmt::format("input {} is {}, but input 0 is {}", i, dtype_name(m.dtype), dtype_name(first.dtype)));
      out[axis_] += m.shape[axis_];
      dynamic = dynamic || m.dynamic;
    }
    return {{first.dtype, out, dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& out = ctx.output(0);
    const size_t esize = dtype_size(out.dtype());
    const Shape& os = out.shape();
    const int64_t outer = numel(Shape(os.begin(), os.begin() + axis_));
    const int64_t inner = numel(Shape(os.begin() + axis_ + 1, os.end())) * static_cast<int64_t>(esize);
    const int64_t out_row = os[axis_] * inner;  // bytes of one outer index in the output
    char* dst = static_cast<char*>(out.raw_data());
    int64_t at = 0;  // byte offset of the current input inside an output row
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const Tensor& in = ctx.input(i);
      const int64_t chunk = in.shape()[axis_] * inner;
      const char* src = static_cast<const char*>(in.raw_data());
      if (chunk > 0) {
        parallel_for(outer, grain_for(chunk), [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o)
            std::memcpy(dst + o * out_row + at, src + o * chunk, static_cast<size_t>(chunk));
        });
      }
      at += chunk;
    }
  }

 private:
  int64_t axis_ = 0;
};

class SliceKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    spec_ = slice_spec(node_, ctx, ctx.shape(0), 1, ctx.opset >= 10);
    return {{ctx.dtype(0), spec_.out, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (out.numel() == 0) return;
    const size_t esize = dtype_size(in.dtype());
    const Strides st = contiguous_strides(in.shape());
    Strides src(st.size());
    int64_t base = 0;
    for (size_t d = 0; d < st.size(); ++d) {
      base += spec_.start[d] * st[d];
      src[d] = st[d] * spec_.step[d];
    }
    strided_copy(static_cast<const char*>(in.raw_data()) + base * static_cast<int64_t>(esize), out.raw_data(),
                 out.shape(), src, esize);
  }

 private:
  SliceSpec spec_;
};

class SplitKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    axis_ = normalize_axis(node_.attr_int("axis", 0), static_cast<int64_t>(s.size()));
    const int64_t dim = s[axis_];
    const int64_t n = static_cast<int64_t>(node_.outputs.size());
    sizes_.clear();
    if (ctx.opset >= 13 && ctx.has_input(1)) {
      sizes_ = int_values(ctx.value(1), "split");
    } else if (ctx.opset < 13 && node_.has_attr("split")) {
      sizes_ = node_.attr_ints("split");
    } else if (ctx.opset >= 18 && node_.has_attr("num_outputs")) {
      // Opset 18: chunks of ceil(dim / n), the last one smaller.
      const int64_t k = node_.attr_int("num_outputs");
      if (k != n) throw InvalidModel(fmt::format("num_outputs is {} but the node has {} outputs", k, n));
      const int64_t chunk = n > 0 ? (dim + n - 1) / n : 0;
      for (int64_t i = 0; i < n; ++i) sizes_.push_back(std::clamp<int64_t>(dim - i * chunk, 0, chunk));
    } else {
      if (n == 0 || dim % n != 0)
        throw ShapeError(fmt::format("axis {} of shape {} (size {}) cannot be split evenly into {} outputs", axis_,
                                     to_string(s), dim, n));
      sizes_.assign(static_cast<size_t>(n), dim / n);
    }
    int64_t total = 0;
    for (int64_t v : sizes_) {
      if (v < 0) throw InvalidModel(fmt::format("split {} has a negative size", to_string(sizes_)));
      total += v;
    }
    if (static_cast<int64_t>(sizes_.size()) != n || total != dim)
      throw ShapeError(fmt::format("split {} does not divide axis {} of shape {} (size {}) into {} outputs",
                                   to_string(sizes_), axis_, to_string(s), dim, n));
    std::vector<TensorMeta> outs;
    for (int64_t v : sizes_) {
      Shape o = s;
      o[axis_] = v;
      outs.push_back({ctx.dtype(0), o, ctx.input(0).dynamic, Tensor()});
    }
    return outs;
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    const Shape& s = in.shape();
    const int64_t esize = static_cast<int64_t>(dtype_size(in.dtype()));
    const int64_t outer = numel(Shape(s.begin(), s.begin() + axis_));
    const int64_t inner = numel(Shape(s.begin() + axis_ + 1, s.end())) * esize;
    const int64_t in_row = s[axis_] * inner;
    const char* src = static_cast<const char*>(in.raw_data());
    int64_t at = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      const int64_t chunk = sizes_[i] * inner;
      if (i < ctx.outputs.size() && ctx.outputs[i] && ctx.outputs[i]->defined() && chunk > 0) {
        char* dst = static_cast<char*>(ctx.output(i).raw_data());
        parallel_for(outer, grain_for(chunk), [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o)
            std::memcpy(dst + o * chunk, src + o * in_row + at, static_cast<size_t>(chunk));
        });
      }
      at += chunk;
    }
  }

 private:
  int64_t axis_ = 0;
  std::vector<int64_t> sizes_;
};

template <class K>
KernelRegistrar reg(const char* op, int64_t since) {
  return KernelRegistrar({"", op, since, kMaxOpset, {}}, [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar reg_transpose = reg<TransposeKernel>("Transpose", 1);
const KernelRegistrar reg_concat = reg<ConcatKernel>("Concat", 4);
const KernelRegistrar reg_slice = reg<SliceKernel>("Slice", 1);
const KernelRegistrar reg_split = reg<SplitKernel>("Split", 2);
}  // namespace
}  // namespace kiln
