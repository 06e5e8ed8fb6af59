// Ops that change only a tensor's shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity) and ops
// that read it (Shape, Size). The first group aliases its input: the executor hands output 0 input
// 0's buffer and skips compute(); compute() still copies for eager runs where the buffers differ.
// None of them looks at element values, so every dtype is accepted.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/int_values.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// The output of an aliasing op: same bytes as the input, new shape. When the input's contents are
// known at plan time, so are the output's (a view, no copy), which lets shape arithmetic fold.
TensorMeta alias_meta(const InferContext& ctx, Shape shape) {
  const TensorMeta& in = ctx.input(0);
  TensorMeta out{in.dtype, std::move(shape), in.dynamic, Tensor()};
  if (in.value.defined() && in.value.is_contiguous()) out.value = in.value.reshape(out.shape);
  return out;
}

void copy_if_distinct(ComputeContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.raw_data() != in.raw_data() && in.nbytes() > 0) std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
}

class AliasKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void compute(ComputeContext& ctx) override { copy_if_distinct(ctx); }
  bool output_aliases_input() const override { return true; }
};

// Axes from the `axes` attribute (before opset 13) or the optional second input (13 on).
std::optional<std::vector<int64_t>> read_axes(const Node& node, const InferContext& ctx) {
  if (ctx.opset >= 13) {
    if (!ctx.has_input(1)) return std::nullopt;
    return int_values(ctx.value(1), "axes");
  }
  if (!node.has_attr("axes")) return std::nullopt;
  return node.attr_ints("axes");
}

// Normalises `axes` against `rank`, rejecting repeats.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    const int64_t n = normalize_axis(a, rank);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw InvalidModel(fmt::format("axes {} name axis {} twice", to_string(axes), n));
    out.push_back(n);
  }
  return out;
}

class ReshapeKernel : public AliasKernel {
 public:
  using AliasKernel::AliasKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& in = ctx.input(0);
    const Tensor& spec_t = ctx.value(1);
    if (spec_t.rank() != 1) throw ShapeError(fmt::format("the shape input must be 1-D, got {}", spec_t.describe()));
    const std::vector<int64_t> spec = int_values(spec_t, "the shape input");
    const bool allowzero = ctx.opset >= 14 && node_.attr_int("allowzero", 0) != 0;
    auto fail = [&](const std::string& why) {
      return ShapeError(fmt::format("cannot reshape {}{} ({} elements) to {}{}: {}", dtype_name(in.dtype),
                                    to_string(in.shape), numel(in.shape), to_string(spec),
                                    allowzero ? " with allowzero=1" : "", why));
    };
    Shape out(spec.size());
    int64_t infer_at = -1;
    int64_t known = 1;
    for (size_t i = 0; i < spec.size(); ++i) {
      const int64_t d = spec[i];
      if (d == -1) {
        if (infer_at >= 0) throw fail("more than one -1");
        infer_at = static_cast<int64_t>(i);
        continue;
      }
      if (d < -1) throw fail(fmt::format("dimension {} is negative", d));
      if (d == 0 && !allowzero) {
        // 0 copies the input's dimension at the same position.
        if (i >= in.shape.size()) throw fail(fmt::format("0 at position {} has no input dimension to copy", i));
        out[i] = in.shape[i];
      } else {
        out[i] = d;
      }
      known = checked_mul(known, out[i], "Reshape: the target's element count");
    }
    const int64_t total = numel(in.shape);
    if (infer_at >= 0) {
      if (known == 0) throw fail("-1 cannot be inferred when the other dimensions multiply to 0");
      if (total % known != 0) throw fail(fmt::format("{} is not a multiple of {}", total, known));
      out[infer_at] = total / known;
    } else if (known != total) {
      throw fail(fmt::format("the target has {} elements", known));
    }
    return {alias_meta(ctx, out)};
  }
};

class FlattenKernel : public AliasKernel {
 public:
  using AliasKernel::AliasKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(s.size());
    int64_t axis = node_.attr_int("axis", 1);
    // Flatten's axis may equal the rank (everything goes to the outer dimension).
    if (axis < -rank || axis > rank)
      throw ShapeError(fmt::format("axis {} is out of range for rank {} (valid: {}..{})", axis, rank, -rank, rank));
    if (axis < 0) axis += rank;
    const Shape outer(s.begin(), s.begin() + axis), inner(s.begin() + axis, s.end());
    return {alias_meta(ctx, {numel(outer), numel(inner)})};
  }
};

class SqueezeKernel : public AliasKernel {
 public:
  using AliasKernel::AliasKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(s.size());
    std::vector<bool> drop(s.size(), false);
    if (auto axes = read_axes(node_, ctx)) {
      for (int64_t a : normalize_axes(*axes, rank)) {
        if (s[a] != 1)
          throw ShapeError(
              fmt::format("cannot squeeze axis {} of shape {}: its size is {}, not 1", a, to_string(s), s[a]));
        drop[a] = true;
      }
    } else {
      for (size_t i = 0; i < s.size(); ++i) drop[i] = s[i] == 1;
    }
    Shape out;
    for (size_t i = 0; i < s.size(); ++i)
      if (!drop[i]) out.push_back(s[i]);
    return {alias_meta(ctx, out)};
  }
};

class UnsqueezeKernel : public AliasKernel {
 public:
  using AliasKernel::AliasKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    const auto axes = read_axes(node_, ctx);
    if (!axes) throw InvalidModel("Unsqueeze needs axes (an attribute before opset 13, input 1 from 13)");
    const int64_t out_rank = static_cast<int64_t>(s.size() + axes->size());
    std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
    for (int64_t a : normalize_axes(*axes, out_rank)) inserted[a] = true;
    Shape out;
    size_t next = 0;
    for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? 1 : s[next++]);
    return {alias_meta(ctx, out)};
  }
};

// Identity passes sequences and optionals through as well (opset 14 on; the handle, no copy).
class IdentityKernel : public AliasKernel {
 public:
  using AliasKernel::AliasKernel;
  bool takes_non_tensors() const override { return true; }
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& in = ctx.input(0);
    if (in.kind != ValueKind::Tensor) return {TensorMeta::of_kind(in.kind, in.dtype)};
    return {alias_meta(ctx, ctx.shape(0))};
  }
  void compute(ComputeContext& ctx) override {
    if (!ctx.input(0).is_tensor()) ctx.output(0) = ctx.input(0);  // eager runs (run_node)
    else copy_if_distinct(ctx);
  }
};

// Shape and Size: outputs computed from the input's shape alone, so infer() fills in the value
// (unless the shape is known only at run time) and the planner can fold what follows.
class ShapeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  bool reads_only_shape(size_t input) const override { return input == 0; }
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& in = ctx.input(0);
    const int64_t rank = static_cast<int64_t>(in.shape.size());
    begin_ = 0;
    end_ = rank;
    if (ctx.opset >= 15) {
      // Negative start/end count from the end, then both clamp to [0, rank].
      auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
      begin_ = clamp(node_.attr_int("start", 0));
      end_ = std::max(begin_, clamp(node_.attr_int("end", rank)));
    }
    TensorMeta out{DType::Int64, {end_ - begin_}, false, Tensor()};
    if (!in.dynamic)
      out.value = Tensor::from_vector<int64_t>(out.shape, Shape(in.shape.begin() + begin_, in.shape.begin() + end_));
    return {out};
  }
  void compute(ComputeContext& ctx) override {
    const Shape& s = ctx.input(0).shape();
    std::copy(s.begin() + begin_, s.begin() + end_, ctx.output(0).data<int64_t>());
  }

 private:
  int64_t begin_ = 0, end_ = 0;
};

class SizeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  bool reads_only_shape(size_t input) const override { return input == 0; }
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& in = ctx.input(0);
    TensorMeta out{DType::Int64, {}, false, Tensor()};
    if (!in.dynamic) out.value = Tensor::scalar<int64_t>(numel(in.shape));
    return {out};
  }
  void compute(ComputeContext& ctx) override { *ctx.output(0).data<int64_t>() = ctx.input(0).numel(); }
};

template <class K>
KernelRegistrar reg(const char* op, int64_t since, int64_t end = kMaxOpset) {
  return KernelRegistrar({"", op, since, end, {}}, [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar reg_reshape = reg<ReshapeKernel>("Reshape", 5);
const KernelRegistrar reg_flatten = reg<FlattenKernel>("Flatten", 1);
const KernelRegistrar reg_squeeze = reg<SqueezeKernel>("Squeeze", 1);
const KernelRegistrar reg_unsqueeze = reg<UnsqueezeKernel>("Unsqueeze", 1);
const KernelRegistrar reg_identity = reg<IdentityKernel>("Identity", 1);
const KernelRegistrar reg_shape = reg<ShapeKernel>("Shape", 1);
const KernelRegistrar reg_size = reg<SizeKernel>("Size", 1);

}  // namespace
}  // namespace kiln
