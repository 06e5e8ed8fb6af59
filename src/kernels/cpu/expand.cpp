// Ops that build a larger (or rearranged) tensor from one input by moving bytes: Expand and Tile
// (stride-0 repeats), DepthToSpace and SpaceToDepth (permuted reshapes), all as one strided copy;
// and Pad, whose borders come from a constant or from the input (edge, reflect). Every dtype.
// Pad's gradient, ai.kiln.PadGrad, and the broadcasting gradient ai.kiln.SumToShapeOf are in
// expand_grad.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/expand_common.h"
#include "kernels/cpu/int_values.h"
#include "kernels/cpu/strided_copy.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::pad {

bool any_dynamic(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dynamic) return true;
  return false;
}

const char* node_mode_name(PadMode m) {
  return m == PadMode::Constant ? "constant" : m == PadMode::Reflect ? "reflect" : "edge";
}

int64_t map_coordinate(int64_t i, int64_t dim, PadMode mode) {
  if (i >= 0 && i < dim) return i;
  if (mode == PadMode::Constant || dim == 0) return -1;
  if (mode == PadMode::Edge || dim == 1) return std::clamp<int64_t>(i, 0, dim - 1);
  // Reflect without repeating the edge (numpy's "reflect"), any number of times over.
  const int64_t period = 2 * (dim - 1);
  int64_t m = ((i % period) + period) % period;
  return m < dim ? m : period - m;
}

PadMode parse_pad_mode(const Node& node) {
  const std::string mode = node.attr_string("mode", "constant");
  if (mode == "constant") return PadMode::Constant;
  if (mode == "reflect") return PadMode::Reflect;
  if (mode == "edge") return PadMode::Edge;
  throw Unsupported(fmt::format("mode '{}' is not supported (constant, reflect, edge)", mode));
}

// The padded shape of `s` and the pad before each dimension; `axes_input` is the index of the
// optional axes input (opset 18), or 0 for none.
Shape pad_geometry(const Shape& s, const std::vector<int64_t>& pads, const InferContext& ctx, size_t axes_input,
                   PadMode mode, std::vector<int64_t>& begin) {
  const int64_t rank = static_cast<int64_t>(s.size());
  std::vector<int64_t> axes(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) axes[d] = d;
  if (axes_input > 0 && ctx.has_input(axes_input)) {
    const Tensor& a = ctx.value(axes_input);
    if (a.dtype() != DType::Int64 && a.dtype() != DType::Int32)
      throw TypeError(fmt::format("axes must be int32 or int64, got {}", a.describe()));
    axes = a.to_int64_vector();
    for (int64_t& x : axes) x = normalize_axis(x, rank, "axes");
  }
  const size_t k = axes.size();
  if (pads.size() != 2 * k)
    throw ShapeError(fmt::format("pads {} must have 2 * {} entries for input {}", to_string(pads), k, to_string(s)));
  begin.assign(s.size(), 0);
  Shape out = s;
  for (size_t j = 0; j < k; ++j) {
    const int64_t d = axes[j];
    begin[d] = pads[j];
    out[d] = s[d] + pads[j] + pads[j + k];
    if (out[d] < 0)
      throw ShapeError(fmt::format("pads {} crop axis {} of input {} below zero", to_string(pads), d, to_string(s)));
    if (mode != PadMode::Constant && s[d] == 0 && out[d] > 0)
      throw ShapeError(
          fmt::format("cannot pad the empty axis {} of input {} in mode '{}'", d, to_string(s), node_mode_name(mode)));
  }
  return out;
}

}  // namespace kiln::pad

namespace kiln {
namespace {

using pad::any_dynamic;
using pad::map_coordinate;
using pad::pad_geometry;
using pad::PadMode;
using pad::parse_pad_mode;

class ExpandKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> target = int64_values(ctx.value(1), "the shape input");
    for (int64_t d : target)
      if (d < 0) throw ShapeError(fmt::format("the shape input {} has a negative dimension", to_string(target)));
    Shape out;
    try {
      out = broadcast_shapes(in, target);
    } catch (const ShapeError&) {
      throw ShapeError(fmt::format("cannot expand input {} to shape {}: dimensions must be equal or 1", to_string(in),
                                   to_string(target)));
    }
    return {{ctx.dtype(0), out, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const Shape& os = out.shape();
    const Shape& is = in.shape();
    const Strides st = contiguous_strides(is);
    // Input dims align with the trailing output dims; a broadcast dim reads with stride 0.
    Strides src(os.size(), 0);
    const size_t lead = os.size() - is.size();
    for (size_t d = 0; d < is.size(); ++d) src[lead + d] = is[d] == 1 ? 0 : st[d];
    strided_copy(in.raw_data(), out.raw_data(), os, src, dtype_size(in.dtype()));
  }
};

class TileKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> repeats = int64_values(ctx.value(1), "repeats");
    if (repeats.size() != in.size())
      throw ShapeError(
          fmt::format("repeats {} must have one entry per dimension of input {}", to_string(repeats), to_string(in)));
    Shape out(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      if (repeats[d] < 0) throw ShapeError(fmt::format("repeats {} has a negative entry", to_string(repeats)));
      out[d] = in[d] * repeats[d];
    }
    return {{ctx.dtype(0), out, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const Shape& is = in.shape();
    const Strides st = contiguous_strides(is);
    // Output dim d of size r*n is laid out as [r, n] row-major: a repeat dim of stride 0, then
    // the input dim.
    Shape view;
    Strides src;
    for (size_t d = 0; d < is.size(); ++d) {
      view.push_back(is[d] == 0 ? 0 : out.shape()[d] / is[d]);
      src.push_back(0);
      view.push_back(is[d]);
      src.push_back(st[d]);
    }
    strided_copy(in.raw_data(), out.raw_data(), view, src, dtype_size(in.dtype()));
  }
};

// DepthToSpace and SpaceToDepth are a reshape, a transpose and a reshape; the strided copy walks
// the output in order, reading the input through the permuted strides.
int64_t block_size(const Node& node) {
  const int64_t b = node.attr_int("blocksize");
  if (b < 1) throw InvalidModel(fmt::format("blocksize must be >= 1, got {}", b));
  return b;
}

void require_4d(const Shape& s) {
  if (s.size() != 4) throw ShapeError(fmt::format("input must be 4-D [N, C, H, W], got {}", to_string(s)));
}

class DepthToSpaceKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    require_4d(s);
    b_ = block_size(node_);
    const std::string mode = ctx.opset >= 11 ? node_.attr_string("mode", "DCR") : "DCR";
    if (mode != "DCR" && mode != "CRD") throw InvalidModel(fmt::format("mode must be 'DCR' or 'CRD', got '{}'", mode));
    crd_ = mode == "CRD";
    if (s[1] % (b_ * b_) != 0)
      throw ShapeError(
          fmt::format("channels of input {} ({}) are not a multiple of blocksize^2 = {}", to_string(s), s[1], b_ * b_));
    return {{ctx.dtype(0), {s[0], s[1] / (b_ * b_), s[2] * b_, s[3] * b_}, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    const Shape& s = in.shape();
    const int64_t n = s[0], c = s[1] / (b_ * b_), h = s[2], w = s[3], hw = h * w;
    // Source strides of the input read as [N, b, b, C', H, W] (DCR) or [N, C', b, b, H, W] (CRD).
    const int64_t s_n = s[1] * hw;
    const int64_t s_c = crd_ ? b_ * b_ * hw : hw;
    const int64_t s_b1 = crd_ ? b_ * hw : b_ * c * hw;
    const int64_t s_b2 = crd_ ? hw : c * hw;
    // Output walked as [N, C', H, b1, W, b2].
    strided_copy(in.raw_data(), ctx.output(0).raw_data(), {n, c, h, b_, w, b_}, {s_n, s_c, w, s_b1, 1, s_b2},
                 dtype_size(in.dtype()));
  }

 private:
  int64_t b_ = 1;
  bool crd_ = false;
};

class SpaceToDepthKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    require_4d(s);
    b_ = block_size(node_);
    if (s[2] % b_ != 0 || s[3] % b_ != 0)
      throw ShapeError(fmt::format("height and width of input {} must be multiples of blocksize {}", to_string(s), b_));
    return {{ctx.dtype(0), {s[0], s[1] * b_ * b_, s[2] / b_, s[3] / b_}, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    const Shape& s = in.shape();
    const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
    // Output walked as [N, b1, b2, C, H/b, W/b]; input read as [N, C, H/b, b1, W/b, b2].
    strided_copy(in.raw_data(), ctx.output(0).raw_data(), {n, b_, b_, c, h / b_, w / b_},
                 {c * h * w, w, 1, h * w, b_ * w, b_}, dtype_size(in.dtype()));
  }

 private:
  int64_t b_ = 1;
};

class PadKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    mode_ = parse_pad_mode(node_);
    const std::vector<int64_t> pads = ctx.opset >= 11 ? int64_values(ctx.value(1), "pads") : node_.attr_ints("pads");
    const Shape out = pad_geometry(ctx.shape(0), pads, ctx, ctx.opset >= 18 ? 3 : 0, mode_, begin_);
    if (ctx.opset >= 11 && ctx.has_input(2) && ctx.dtype(2) != ctx.dtype(0))
      throw TypeError(
          fmt::format("constant_value is {} but data is {}", dtype_name(ctx.dtype(2)), dtype_name(ctx.dtype(0))));
    return {{ctx.dtype(0), out, any_dynamic(ctx), Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (out.numel() == 0) return;
    const Tensor fill = fill_value(ctx, in.dtype());
    switch (dtype_size(in.dtype())) {
      case 1:
        return pad_typed<uint8_t>(in, out, fill);
      case 2:
        return pad_typed<uint16_t>(in, out, fill);
      case 4:
        return pad_typed<uint32_t>(in, out, fill);
      case 8:
        return pad_typed<uint64_t>(in, out, fill);
      default:
        throw Unsupported(fmt::format("no Pad loop for {}", in.describe()));
    }
  }

 private:
  Tensor fill_value(const ComputeContext& ctx, DType dtype) const {
    if (node_.op_type == "Pad" && ctx.inputs.size() > 2 && ctx.has_input(2)) {
      const Tensor& v = ctx.input(2);
      if (v.numel() != 1) throw ShapeError(fmt::format("constant_value must hold one element, got {}", v.describe()));
      return v.contiguous();
    }
    Tensor t = Tensor::empty(dtype, {});
    const double value = node_.has_attr("value") ? node_.attr_float("value") : 0.0;  // before opset 11
    visit_dtype(dtype, [&](auto tag) { *t.data<decltype(tag)>() = from_double<decltype(tag)>(value); });
    return t;
  }

  template <class U>
  void pad_typed(const Tensor& in, Tensor& out, const Tensor& fill) const {
    const Shape& is = in.shape();
    const Shape& os = out.shape();
    const size_t r = os.size();
    U value;
    std::memcpy(&value, fill.raw_data(), sizeof(U));
    const U* src = static_cast<const U*>(in.raw_data());
    U* dst = static_cast<U*>(out.raw_data());
    if (r == 0) {
      dst[0] = src[0];
      return;
    }
    // Per-dimension maps from output to input coordinate (or -1).
    std::vector<std::vector<int64_t>> maps(r);
    for (size_t d = 0; d < r; ++d)
      for (int64_t o = 0; o < os[d]; ++o) maps[d].push_back(map_coordinate(o - begin_[d], is[d], mode_));
    const Strides st = contiguous_strides(is);
    const int64_t cols = os[r - 1];
    const std::vector<int64_t>& last = maps[r - 1];
    // The run of the last dim that copies input columns in order: [lo, hi) in the output.
    const int64_t lo = std::clamp<int64_t>(begin_[r - 1], 0, cols);
    const int64_t hi = std::clamp<int64_t>(begin_[r - 1] + is[r - 1], lo, cols);
    const int64_t rows = out.numel() / cols;
    parallel_for(rows, std::max<int64_t>(1, 16384 / cols), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        U* o = dst + row * cols;
        int64_t off = 0;
        bool outside = false;
        for (int64_t rem = row, d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
          const int64_t m = maps[d][rem % os[d]];
          rem /= os[d];
          if (m < 0) outside = true;
          else off += m * st[d];
        }
        if (outside) {
          std::fill(o, o + cols, value);
          continue;
        }
        const U* irow = src + off;
        for (int64_t c = 0; c < lo; ++c) o[c] = last[c] < 0 ? value : irow[last[c]];
        if (hi > lo) std::memcpy(o + lo, irow + last[lo], static_cast<size_t>(hi - lo) * sizeof(U));
        for (int64_t c = hi; c < cols; ++c) o[c] = last[c] < 0 ? value : irow[last[c]];
      }
    });
  }

  PadMode mode_ = PadMode::Constant;
  std::vector<int64_t> begin_;
};

template <class K>
KernelRegistrar reg(const char* op, int64_t since) {
  return KernelRegistrar({"", op, since, kMaxOpset, {}}, [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar reg_expand = reg<ExpandKernel>("Expand", 8);
const KernelRegistrar reg_tile = reg<TileKernel>("Tile", 6);
const KernelRegistrar reg_depth_to_space = reg<DepthToSpaceKernel>("DepthToSpace", 1);
const KernelRegistrar reg_space_to_depth = reg<SpaceToDepthKernel>("SpaceToDepth", 1);
const KernelRegistrar reg_pad = reg<PadKernel>("Pad", 2);
}  // namespace
}  // namespace kiln
