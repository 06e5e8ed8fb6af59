// Optional ops (opset 15 on): Optional, OptionalHasElement, OptionalGetElement. At run time a present
// optional is its value itself (a tensor or a sequence) and an empty one is Tensor::none
// (include/kiln/tensor.h), so these ops only test and pass handles; a tensor that becomes a
// graph's or a sequence's value is copied (an input may be an arena buffer the next step reuses).
#include <fmt/format.h>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class OptionalOpKernel : public Kernel {
 public:
  using Kernel::Kernel;
  bool takes_non_tensors() const override { return true; }
  bool foldable() const override { return false; }
};

// Optional(input?) with attribute `type`: an optional holding the input, or an empty one of `type`.
class OptionalKernel final : public OptionalOpKernel {
 public:
  using OptionalOpKernel::OptionalOpKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.has_input(0)) {
      const Tensor& in = ctx.value(0);
      if (in.is_none()) throw TypeError(fmt::format("Optional: input '{}' is itself an optional", node_.inputs[0]));
      result_ = in.is_tensor() ? in.clone() : in;
      return {
          TensorMeta::of_kind(in.is_tensor() ? ValueKind::OptionalTensor : ValueKind::OptionalSequence, in.dtype())};
    }
    const auto it = node_.attrs.find("type");
    if (it == node_.attrs.end() || it->second.kind != Attribute::Kind::Type || !it->second.type)
      throw InvalidModel("Optional without an input needs the attribute 'type'");
    const ValueInfo& type = *it->second.type;
    if (type.kind != ValueKind::Tensor && type.kind != ValueKind::Sequence)
      throw InvalidModel(
          fmt::format("Optional: attribute 'type' is {}; an optional holds a tensor or a sequence", type.describe()));
    const ValueKind kind = type.kind == ValueKind::Tensor ? ValueKind::OptionalTensor : ValueKind::OptionalSequence;
    result_ = Tensor::none(type.dtype, kind);
    return {TensorMeta::of_kind(kind, type.dtype)};
  }
  void compute(ComputeContext& ctx) override {
    ctx.output(0) = result_;
    result_ = Tensor();
  }

 private:
  Tensor result_;
};

// OptionalHasElement(input?): whether the optional holds a value (false for an omitted input, which
// opset 18 allows; a tensor or a sequence given directly holds one).
class OptionalHasElementKernel final : public OptionalOpKernel {
 public:
  using OptionalOpKernel::OptionalOpKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    has_ = ctx.has_input(0) && !ctx.value(0).is_none();
    return {TensorMeta{DType::Bool, {}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override { *ctx.output(0).data<bool>() = has_; }

 private:
  bool has_ = false;
};

// OptionalGetElement(input): the optional's value; an empty optional is an error.
class OptionalGetElementKernel final : public OptionalOpKernel {
 public:
  using OptionalOpKernel::OptionalOpKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    value_ = ctx.value(0);
    if (value_.is_none())
      throw InvalidArgument(fmt::format("OptionalGetElement: optional '{}' is empty", node_.inputs.at(0)));
    return {TensorMeta::of(value_)};
  }
  void compute(ComputeContext& ctx) override {
    if (value_.is_tensor()) ctx.output(0).copy_from(value_);
    else ctx.output(0) = value_;  // a sequence: its handle
    value_ = Tensor();
  }

 private:
  Tensor value_;
};

template <class K>
KernelRegistrar reg(const char* op) {
  return KernelRegistrar({"", op, 15, kMaxOpset, {}}, [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar reg_optional = reg<OptionalKernel>("Optional");
const KernelRegistrar reg_has = reg<OptionalHasElementKernel>("OptionalHasElement");
const KernelRegistrar reg_get = reg<OptionalGetElementKernel>("OptionalGetElement");

}  // namespace
}  // namespace kiln
