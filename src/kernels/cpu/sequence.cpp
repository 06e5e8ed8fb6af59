// Sequence ops (opset 11 on): SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase,
// SequenceAt, SequenceLength, SplitToSequence and ConcatFromSequence. A sequence is a Tensor handle
// over an immutable list (include/kiln/tensor.h): each op that changes one makes a new list, and
// the tensors it puts in are its own copies (an input may be an arena buffer the next step reuses).
// What a sequence holds is known only when it runs, so every step reading one infers at run time.
#include <fmt/format.h>

#include <cstring>
#include <numeric>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class SequenceKernel : public Kernel {
 public:
  using Kernel::Kernel;
  bool takes_non_tensors() const override { return true; }
  bool foldable() const override { return false; }  // sequences live at run time only
  // Writes the sequence infer() made (the ops that give a tensor override this).
  void compute(ComputeContext& ctx) override {
    ctx.output(0) = result_;
    result_ = Tensor();
  }

 protected:
  // Input i's value, which must be a sequence.
  const Tensor& sequence_input(const InferContext& ctx, size_t i) const {
    const Tensor& s = ctx.value(i);
    if (!s.is_sequence())
      throw TypeError(fmt::format("{}: input {} ('{}') must be a sequence, got {}", node_.op_type, i,
                                  node_.inputs.at(i), s.describe()));
    return s;
  }
  // The position in input i (a scalar int32 / int64) as an index into a sequence of `size` tensors:
  // [-size, size - 1], or [-size, size] where `end_allowed` (inserting at the back).
  int64_t position(const InferContext& ctx, size_t i, int64_t size, bool end_allowed) const {
    const TensorMeta& p = ctx.input(i);
    if ((p.dtype != DType::Int32 && p.dtype != DType::Int64) || numel(p.shape) != 1 || p.shape.size() > 1)
      throw TypeError(fmt::format("{}: position must be a scalar int32 or int64, got {}{}", node_.op_type,
                                  dtype_name(p.dtype), to_string(p.shape)));
    const int64_t pos = ctx.value(i).to_int64_vector()[0];
    const int64_t last = end_allowed ? size : size - 1;
    if (pos < -size || pos > last)
      throw InvalidArgument(fmt::format("{}: position {} is out of range [{}, {}] for a sequence of {} tensors",
                                        node_.op_type, pos, -size, last, size));
    return pos < 0 ? pos + size : pos;
  }
  // Sets the sequence output from results computed in infer().
  std::vector<TensorMeta> sequence_output(DType dtype, std::vector<Tensor> elements) {
    result_ = Tensor::sequence(dtype, std::move(elements));
    return {TensorMeta::of_kind(ValueKind::Sequence, dtype)};
  }

 private:
  Tensor result_;
};

class SequenceEmptyKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext&) override {
    const int64_t code = node_.attr_int("dtype", 1);  // TensorProto.FLOAT
    const std::optional<DType> dtype = dtype_from_onnx(code);
    if (!dtype) throw Unsupported(fmt::format("SequenceEmpty: dtype {} has no Kiln tensor type", code));
    return sequence_output(*dtype, {});
  }
};

class SequenceConstructKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() == 0) throw InvalidModel("SequenceConstruct needs at least one input");
    std::vector<Tensor> elements;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.dtype(i) != ctx.dtype(0))
        throw TypeError(fmt::format("SequenceConstruct: input {} is {}, input 0 {}: a sequence holds one dtype", i,
                                    dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(0))));
      elements.push_back(ctx.value(i).clone());
    }
    return sequence_output(ctx.dtype(0), std::move(elements));
  }
};

class SequenceInsertKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor& s = sequence_input(ctx, 0);
    const TensorMeta& t = ctx.input(1);
    if (t.kind != ValueKind::Tensor || t.dtype != s.dtype())
      throw TypeError(fmt::format("SequenceInsert: cannot insert {} into {}", ctx.value(1).describe(), s.describe()));
    std::vector<Tensor> elements = s.elements();
    const auto size = static_cast<int64_t>(elements.size());
    const int64_t at = ctx.has_input(2) ? position(ctx, 2, size, true) : size;
    elements.insert(elements.begin() + at, ctx.value(1).clone());
    return sequence_output(s.dtype(), std::move(elements));
  }
};

class SequenceEraseKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor& s = sequence_input(ctx, 0);
    std::vector<Tensor> elements = s.elements();
    const auto size = static_cast<int64_t>(elements.size());
    if (size == 0) throw InvalidArgument("SequenceErase: the sequence is empty");
    const int64_t at = ctx.has_input(1) ? position(ctx, 1, size, false) : size - 1;
    elements.erase(elements.begin() + at);
    return sequence_output(s.dtype(), std::move(elements));
  }
};

// SequenceAt and SequenceLength give tensors: the planned output is written.
class SequenceAtKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor& s = sequence_input(ctx, 0);
    const auto size = static_cast<int64_t>(s.elements().size());
    element_ = s.elements()[static_cast<size_t>(position(ctx, 1, size, false))];
    return {TensorMeta::of(element_)};
  }
  void compute(ComputeContext& ctx) override {
    ctx.output(0).copy_from(element_);
    element_ = Tensor();
  }

 private:
  Tensor element_;
};

class SequenceLengthKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    length_ = static_cast<int64_t>(sequence_input(ctx, 0).elements().size());
    return {TensorMeta{DType::Int64, {}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override { *ctx.output(0).data<int64_t>() = length_; }

 private:
  int64_t length_ = 0;
};

// Rows of `t` along `axis`: [outer, dim, inner] with its byte strides.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
  size_t es = 1;
  AxisView(const Shape& shape, int64_t axis, DType dtype) : es(dtype_size(dtype)) {
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      if (d < axis) outer *= shape[static_cast<size_t>(d)];
      if (d > axis) inner *= shape[static_cast<size_t>(d)];
    }
    dim = shape.empty() ? 1 : shape[static_cast<size_t>(axis)];
  }
};

// The chunk lengths SplitToSequence cuts axis `dim` into, from its optional `split` input.
std::vector<int64_t> split_lengths(const InferContext& ctx, int64_t dim) {
  if (!ctx.has_input(1)) return std::vector<int64_t>(static_cast<size_t>(dim), 1);
  const Tensor& split = ctx.value(1);
  std::vector<int64_t> v = split.to_int64_vector();
  if (split.rank() == 0) {  // one length: equal chunks, the last one shorter
    if (v[0] <= 0) throw InvalidArgument(fmt::format("SplitToSequence: split {} must be positive", v[0]));
    std::vector<int64_t> lengths;
    for (int64_t at = 0; at < dim; at += v[0]) lengths.push_back(std::min(v[0], dim - at));
    return lengths;
  }
  if (split.rank() != 1)
    throw ShapeError(fmt::format("SplitToSequence: split {} must be a scalar or 1-D", split.describe()));
  for (int64_t len : v)
    if (len < 0)
      throw InvalidArgument(fmt::format("SplitToSequence: split [{}] has a negative length", fmt::join(v, ", ")));
  if (std::accumulate(v.begin(), v.end(), int64_t{0}) != dim)
    throw ShapeError(
        fmt::format("SplitToSequence: split [{}] does not add up to the axis length {}", fmt::join(v, ", "), dim));
  return v;
}

class SplitToSequenceKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor input = ctx.value(0).contiguous();
    const int64_t axis = normalize_axis(node_.attr_int("axis", 0), input.rank(), "SplitToSequence axis");
    // keepdims = 0 drops the split axis, but only where the chunks have length 1 (no split input).
    const bool drop_axis = !ctx.has_input(1) && node_.attr_int("keepdims", 1) == 0;
    const AxisView v(input.shape(), axis, input.dtype());
    std::vector<Tensor> elements;
    int64_t start = 0;
    for (const int64_t len : split_lengths(ctx, v.dim)) {
      Shape shape = input.shape();
      shape[static_cast<size_t>(axis)] = len;
      Tensor chunk = Tensor::empty(input.dtype(), shape);
      const size_t row = static_cast<size_t>(len * v.inner) * v.es;
      const auto* src = static_cast<const char*>(input.raw_data());
      for (int64_t o = 0; o < v.outer; ++o)
        std::memcpy(static_cast<char*>(chunk.raw_data()) + static_cast<size_t>(o) * row,
                    src + static_cast<size_t>((o * v.dim + start) * v.inner) * v.es, row);
      if (drop_axis) shape.erase(shape.begin() + axis);
      elements.push_back(chunk.reshape(shape));
      start += len;
    }
    return sequence_output(input.dtype(), std::move(elements));
  }
};

// ConcatFromSequence: the tensors joined along `axis`, or stacked along a new one (new_axis = 1).
class ConcatFromSequenceKernel final : public SequenceKernel {
 public:
  using SequenceKernel::SequenceKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor& s = sequence_input(ctx, 0);
    const std::vector<Tensor>& elements = s.elements();
    if (elements.empty()) throw InvalidArgument("ConcatFromSequence: the sequence is empty");
    const bool new_axis = node_.attr_int("new_axis", 0) != 0;
    const Shape& first = elements[0].shape();
    const auto rank = static_cast<int64_t>(first.size()) + (new_axis ? 1 : 0);
    if (rank == 0) throw ShapeError("ConcatFromSequence: cannot concatenate scalars without new_axis = 1");
    axis_ = normalize_axis(node_.attr_int("axis"), rank, "ConcatFromSequence axis");
    Shape out = first;
    if (new_axis) out.insert(out.begin() + axis_, 0);
    out[static_cast<size_t>(axis_)] = 0;  // the sum of the elements' lengths
    for (size_t k = 0; k < elements.size(); ++k) {
      Shape e = elements[k].shape();
      if (new_axis) e.insert(e.begin() + axis_, 1);
      Shape rest = e, want = out;
      rest[static_cast<size_t>(axis_)] = want[static_cast<size_t>(axis_)] = 0;
      if (rest != want)
        throw ShapeError(fmt::format("ConcatFromSequence: element {} is {}, element 0 {}: only axis {} may differ", k,
                                     elements[k].describe(), elements[0].describe(), axis_));
      out[static_cast<size_t>(axis_)] += e[static_cast<size_t>(axis_)];
    }
    elements_ = elements;
    new_axis_ = new_axis;
    return {TensorMeta{s.dtype(), out, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& out = ctx.output(0);
    const AxisView v(out.shape(), axis_, out.dtype());
    int64_t start = 0;
    for (const Tensor& e : elements_) {
      const Tensor c = e.contiguous();
      const int64_t len = new_axis_ ? 1 : c.dim(axis_);
      const size_t row = static_cast<size_t>(len * v.inner) * v.es;
      for (int64_t o = 0; o < v.outer; ++o)
        std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<size_t>((o * v.dim + start) * v.inner) * v.es,
                    static_cast<const char*>(c.raw_data()) + static_cast<size_t>(o) * row, row);
      start += len;
    }
    elements_.clear();
  }

 private:
  int64_t axis_ = 0;
  bool new_axis_ = false;
  std::vector<Tensor> elements_;
};

template <class K>
KernelRegistrar reg(const char* op) {
  return KernelRegistrar({"", op, 11, kMaxOpset, {}}, [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar reg_empty = reg<SequenceEmptyKernel>("SequenceEmpty");
const KernelRegistrar reg_construct = reg<SequenceConstructKernel>("SequenceConstruct");
const KernelRegistrar reg_insert = reg<SequenceInsertKernel>("SequenceInsert");
const KernelRegistrar reg_erase = reg<SequenceEraseKernel>("SequenceErase");
const KernelRegistrar reg_at = reg<SequenceAtKernel>("SequenceAt");
const KernelRegistrar reg_length = reg<SequenceLengthKernel>("SequenceLength");
const KernelRegistrar reg_split = reg<SplitToSequenceKernel>("SplitToSequence");
const KernelRegistrar reg_concat = reg<ConcatFromSequenceKernel>("ConcatFromSequence");

}  // namespace
}  // namespace kiln
