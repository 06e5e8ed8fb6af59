// Element-wise and tuple indexing: GatherElements, GatherND, ScatterElements (and the deprecated
// Scatter it replaced), ScatterND. Gathers and plain scatters only move bytes, so one loop on the
// element size serves every dtype; scatter reductions (add, mul, max, min) do arithmetic per dtype.
//
// The gathers' gradients, ai.kiln.GatherElementsGrad and GatherNDGrad, are in scatter_grad.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/int_values.h"
#include "kernels/cpu/scatter_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::indexing {
namespace {

// Normalises index `v` (negative counts from the end) against `dim`; the error names where it sat.
int64_t checked_index(int64_t v, int64_t dim, int64_t flat, const Tensor& indices, const std::string& target) {
  if (v < -dim || v >= dim)
    throw InvalidArgument(
        fmt::format("index {} (at {} of indices {}) is out of range for {} of size {} (valid: {}..{})", v,
                    index_position(flat, indices.shape()), indices.describe(), target, dim, -dim, dim - 1));
  return v < 0 ? v + dim : v;
}

}  // namespace

void check_index_dtype(const TensorMeta& m, const char* what) {
  if (m.dtype != DType::Int64 && m.dtype != DType::Int32)
    throw TypeError(fmt::format("{} must be int32 or int64, got {}{}", what, dtype_name(m.dtype), to_string(m.shape)));
}

// The data offsets (in elements) that each element of `indices` addresses along `axis`, for
// GatherElements and ScatterElements: offset of the same position in data with the axis replaced.
std::vector<int64_t> element_offsets(const Tensor& indices, const Shape& data_shape, int64_t axis,
                                     const std::string& target) {
  const std::vector<int64_t> idx = indices.to_int64_vector();
  const Shape& is = indices.shape();
  const Strides ds = contiguous_strides(data_shape);
  const int64_t dim = data_shape[axis];
  std::vector<int64_t> off(idx.size());
  Shape pos(is.size(), 0);
  int64_t base = 0;  // offset of `pos` in data with the axis coordinate left out
  for (size_t i = 0; i < idx.size(); ++i) {
    off[i] = base + checked_index(idx[i], dim, static_cast<int64_t>(i), indices, target) * ds[axis];
    for (size_t d = is.size(); d-- > 0;) {
      const int64_t step = static_cast<int64_t>(d) == axis ? 0 : ds[d];
      base += step;
      if (++pos[d] < is[d]) break;
      base -= step * is[d];
      pos[d] = 0;
    }
  }
  return off;
}

// Validates the shared shape rules of GatherElements and ScatterElements: equal ranks and, off
// the axis, indices no larger than data (so every position exists in data).
int64_t elements_axis(const Node& node, const Shape& data, const Shape& indices, const char* indices_name) {
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0) throw ShapeError("data must have rank >= 1, got a scalar");
  if (indices.size() != data.size())
    throw ShapeError(
        fmt::format("{} {} must have the same rank as data {}", indices_name, to_string(indices), to_string(data)));
  const int64_t axis = normalize_axis(node.attr_int("axis", 0), rank);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices[d] > data[d])
      throw ShapeError(fmt::format("{} {} is larger than data {} in dimension {} (only axis {} may differ)",
                                   indices_name, to_string(indices), to_string(data), d, axis));
  return axis;
}

Tuples index_tuples(const Tensor& indices, const Shape& data, int64_t batch_dims) {
  const Shape& is = indices.shape();
  const int64_t k = is.back();
  const std::vector<int64_t> idx = indices.to_int64_vector();
  Tuples t;
  for (int64_t d = 0; d < batch_dims; ++d) t.batch *= data[d];
  const Strides ds = contiguous_strides(data);
  t.slice = numel(Shape(data.begin() + batch_dims + k, data.end()));
  t.batch_stride = numel(Shape(data.begin() + batch_dims, data.end()));
  const int64_t tuples = k > 0 ? static_cast<int64_t>(idx.size()) / k : numel(Shape(is.begin(), is.end() - 1));
  t.per_batch = t.batch > 0 ? tuples / t.batch : 0;
  t.offsets.assign(static_cast<size_t>(tuples), 0);
  for (int64_t j = 0; j < tuples; ++j)
    for (int64_t c = 0; c < k; ++c) {
      const int64_t axis = batch_dims + c;
      const int64_t flat = j * k + c;
      t.offsets[j] += checked_index(idx[flat], data[axis], flat, indices,
                                    fmt::format("axis {} of data {}", axis, to_string(data))) *
                      ds[axis];
    }
  return t;
}

// Shape checks shared by GatherND and ScatterND; returns the tuple length k.
int64_t tuple_length(const Shape& data, const Shape& indices, int64_t batch_dims) {
  const int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(indices.size());
  if (r < 1 || q < 1)
    throw ShapeError(
        fmt::format("data {} and indices {} must both have rank >= 1", to_string(data), to_string(indices)));
  if (batch_dims < 0 || batch_dims >= std::min(r, q))
    throw InvalidModel(
        fmt::format("batch_dims {} must be in [0, min(rank(data) {}, rank(indices) {})) ", batch_dims, r, q));
  for (int64_t d = 0; d < batch_dims; ++d)
    if (data[d] != indices[d])
      throw ShapeError(
          fmt::format("batch dimension {} differs: data {} vs indices {}", d, to_string(data), to_string(indices)));
  const int64_t k = indices.back();
  if (k < 1 || k > r - batch_dims)
    throw ShapeError(
        fmt::format("the last dimension of indices {} is {}, but must be in [1, {}] for data {} with "
                    "batch_dims {}",
                    to_string(indices), k, r - batch_dims, to_string(data), batch_dims));
  return k;
}

}  // namespace kiln::indexing

namespace kiln {
namespace {

using indexing::check_index_dtype;
using indexing::element_offsets;
using indexing::elements_axis;
using indexing::index_tuples;
using indexing::tuple_length;
using indexing::Tuples;

// Calls f(U{}) with an unsigned type as wide as one element, so byte-moving loops copy whole
// elements instead of calling memcpy per element.
template <class F>
void visit_element_size(size_t esize, F&& f) {
  switch (esize) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      throw Unsupported(fmt::format("no indexing loop for {}-byte elements", esize));
  }
}

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parse_reduction(const Node& node, int64_t opset) {
  const std::string r = node.attr_string("reduction", "none");
  if (r == "none") return Reduction::None;
  if (opset >= 16 && r == "add") return Reduction::Add;
  if (opset >= 16 && r == "mul") return Reduction::Mul;
  if (opset >= 18 && r == "max") return Reduction::Max;
  if (opset >= 18 && r == "min") return Reduction::Min;
  throw InvalidModel(
      fmt::format("reduction '{}' is not valid at opset {} (none; add, mul from 16; max, min from 18)", r, opset));
}

// dst = reduce(dst, src) in the element's own type (16-bit floats through float).
template <class T>
void combine(T& dst, T src, Reduction r) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    double a = to_double(dst), b = to_double(src);
    combine(a, b, r);
    dst = from_double<T>(a);
  } else if constexpr (std::is_same_v<T, bool>) {
    // Booleans as {0, 1}: add saturates to or, mul is and, max is or, min is and.
    if (r == Reduction::None) dst = src;
    else if (r == Reduction::Add || r == Reduction::Max) dst = dst || src;
    else dst = dst && src;
  } else {
    switch (r) {
      case Reduction::None:
        dst = src;
        break;
      case Reduction::Add:
        dst = static_cast<T>(dst + src);
        break;
      case Reduction::Mul:
        dst = static_cast<T>(dst * src);
        break;
      case Reduction::Max:
        dst = std::max(dst, src);
        break;
      case Reduction::Min:
        dst = std::min(dst, src);
        break;
    }
  }
}

class GatherElementsKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    check_index_dtype(ctx.input(1), "indices");
    axis_ = elements_axis(node_, ctx.shape(0), ctx.shape(1), "indices");
    return {{ctx.dtype(0), ctx.shape(1), ctx.input(0).dynamic || ctx.input(1).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const std::vector<int64_t> off =
        element_offsets(ctx.input(1), data.shape(), axis_, fmt::format("axis {} of data {}", axis_, data.describe()));
    visit_element_size(dtype_size(data.dtype()), [&](auto tag) {
      using U = decltype(tag);
      const U* src = static_cast<const U*>(data.raw_data());
      U* dst = static_cast<U*>(ctx.output(0).raw_data());
      parallel_for(static_cast<int64_t>(off.size()), 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = src[off[i]];
      });
    });
  }

 private:
  int64_t axis_ = 0;
};

class ScatterElementsKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    check_index_dtype(ctx.input(1), "indices");
    if (ctx.shape(1) != ctx.shape(2))
      throw ShapeError(fmt::format("updates {} must have the shape of indices {}", to_string(ctx.shape(2)),
                                   to_string(ctx.shape(1))));
    if (ctx.dtype(2) != ctx.dtype(0))
      throw TypeError(fmt::format("updates are {} but data is {}", dtype_name(ctx.dtype(2)), dtype_name(ctx.dtype(0))));
    axis_ = elements_axis(node_, ctx.shape(0), ctx.shape(1), "indices");
    reduction_ = node_.op_type == "Scatter" ? Reduction::None : parse_reduction(node_, ctx.opset);
    return {{ctx.dtype(0), ctx.shape(0), ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& updates = ctx.input(2);
    Tensor& out = ctx.output(0);
    const std::vector<int64_t> off =
        element_offsets(ctx.input(1), data.shape(), axis_, fmt::format("axis {} of data {}", axis_, data.describe()));
    if (out.raw_data() != data.raw_data() && data.nbytes() > 0)
      std::memcpy(out.raw_data(), data.raw_data(), data.nbytes());
    // Serial: indices may repeat, and repeats must apply in order (last write wins for none).
    visit_dtype(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* u = static_cast<const T*>(updates.raw_data());
      T* dst = static_cast<T*>(out.raw_data());
      for (size_t i = 0; i < off.size(); ++i) combine(dst[off[i]], u[i], reduction_);
    });
  }
  std::optional<size_t> inplace_input() const override { return 0; }

 private:
  int64_t axis_ = 0;
  Reduction reduction_ = Reduction::None;
};

class GatherNDKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.dtype(1) != DType::Int64)
      throw TypeError(
          fmt::format("indices must be int64, got {}{}", dtype_name(ctx.dtype(1)), to_string(ctx.shape(1))));
    const Shape& data = ctx.shape(0);
    const Shape& indices = ctx.shape(1);
    batch_dims_ = ctx.opset >= 12 ? node_.attr_int("batch_dims", 0) : 0;
    const int64_t k = tuple_length(data, indices, batch_dims_);
    Shape out(indices.begin(), indices.end() - 1);
    out.insert(out.end(), data.begin() + batch_dims_ + k, data.end());
    return {{ctx.dtype(0), out, ctx.input(0).dynamic || ctx.input(1).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tuples t = index_tuples(ctx.input(1), data.shape(), batch_dims_);
    const int64_t esize = static_cast<int64_t>(dtype_size(data.dtype()));
    const int64_t bytes = t.slice * esize;
    if (bytes == 0) return;
    const char* src = static_cast<const char*>(data.raw_data());
    char* dst = static_cast<char*>(ctx.output(0).raw_data());
    const int64_t n = static_cast<int64_t>(t.offsets.size());
    parallel_for(n, std::max<int64_t>(1, 64 * 1024 / bytes), [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t batch = t.per_batch > 0 ? j / t.per_batch : 0;
        std::memcpy(dst + j * bytes, src + (batch * t.batch_stride + t.offsets[j]) * esize, static_cast<size_t>(bytes));
      }
    });
  }

 private:
  int64_t batch_dims_ = 0;
};

class ScatterNDKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.dtype(1) != DType::Int64)
      throw TypeError(
          fmt::format("indices must be int64, got {}{}", dtype_name(ctx.dtype(1)), to_string(ctx.shape(1))));
    if (ctx.dtype(2) != ctx.dtype(0))
      throw TypeError(fmt::format("updates are {} but data is {}", dtype_name(ctx.dtype(2)), dtype_name(ctx.dtype(0))));
    const Shape& data = ctx.shape(0);
    const Shape& indices = ctx.shape(1);
    const int64_t k = tuple_length(data, indices, 0);
    Shape want(indices.begin(), indices.end() - 1);
    want.insert(want.end(), data.begin() + k, data.end());
    if (ctx.shape(2) != want)
      throw ShapeError(
          fmt::format("updates {} must have shape {} (indices {} without its last dim, then data {} "
                      "after its first {})",
                      to_string(ctx.shape(2)), to_string(want), to_string(indices), to_string(data), k));
    reduction_ = parse_reduction(node_, ctx.opset);
    return {{ctx.dtype(0), data, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& updates = ctx.input(2);
    Tensor& out = ctx.output(0);
    const Tuples t = index_tuples(ctx.input(1), data.shape(), 0);
    if (out.raw_data() != data.raw_data() && data.nbytes() > 0)
      std::memcpy(out.raw_data(), data.raw_data(), data.nbytes());
    // Serial over tuples: repeated tuples must apply in order.
    visit_dtype(data.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* u = static_cast<const T*>(updates.raw_data());
      T* dst = static_cast<T*>(out.raw_data());
      for (size_t j = 0; j < t.offsets.size(); ++j) {
        T* row = dst + t.offsets[j];
        const T* urow = u + static_cast<int64_t>(j) * t.slice;
        for (int64_t i = 0; i < t.slice; ++i) combine(row[i], urow[i], reduction_);
      }
    });
  }
  std::optional<size_t> inplace_input() const override { return 0; }

 private:
  Reduction reduction_ = Reduction::None;
};

template <class K>
KernelRegistrar reg(const char* op, int64_t since, int64_t end = kMaxOpset) {
  return KernelRegistrar({"", op, since, end, {}}, [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar reg_gather_elements = reg<GatherElementsKernel>("GatherElements", 11);
const KernelRegistrar reg_gather_nd = reg<GatherNDKernel>("GatherND", 11);
const KernelRegistrar reg_scatter_elements = reg<ScatterElementsKernel>("ScatterElements", 11);
const KernelRegistrar reg_scatter = reg<ScatterElementsKernel>("Scatter", 9);  // deprecated alias
const KernelRegistrar reg_scatter_nd = reg<ScatterNDKernel>("ScatterND", 11);

}  // namespace
}  // namespace kiln
