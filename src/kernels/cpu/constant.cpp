// Constant (a tensor from the node's attributes) and ConstantOfShape (a tensor filled with one
// value, its shape given by an input). Constant's output is known at plan time, so infer() gives
// its value and the planner can fold whatever consumes it.
#include <fmt/format.h>

#include <cstring>

#include "kiln/kernel.h"

namespace kiln {
namespace {

// The tensor a Constant node stands for; exactly one of its value attributes must be set.
Tensor constant_value(const Node& node) {
  static const char* const kKeys[] = {"value",      "value_float",  "value_floats",  "value_int",
                                      "value_ints", "value_string", "value_strings", "sparse_value"};
  std::vector<std::string> present;
  for (const char* k : kKeys)
    if (node.has_attr(k)) present.push_back(k);
  if (present.size() != 1)
    throw InvalidModel(
        fmt::format("Constant needs exactly one of value, value_float(s), value_int(s), "
                    "value_string(s), sparse_value; it has {}",
                    present.empty() ? std::string("none") : fmt::format("{}", fmt::join(present, ", "))));
  const std::string& key = present[0];
  if (key == "value") return node.attr_tensor("value");
  if (key == "value_float") return Tensor::scalar<float>(node.attr_float("value_float"));
  if (key == "value_int") return Tensor::scalar<int64_t>(node.attr_int("value_int"));
  if (key == "value_floats") {
    const std::vector<float> v = node.attr_floats("value_floats", {});
    return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v);
  }
  if (key == "value_ints") {
    const std::vector<int64_t> v = node.attr_ints("value_ints");
    return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
  }
  throw Unsupported(fmt::format("Constant attribute '{}' is not supported: Kiln has no string or sparse tensors", key));
}

void copy_value(const Tensor& value, Tensor& out) {
  if (out.raw_data() != value.raw_data() && value.nbytes() > 0)
    std::memcpy(out.raw_data(), value.raw_data(), value.nbytes());
}

class ConstantKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext&) override {
    value_ = constant_value(node_).contiguous();
    return {{value_.dtype(), value_.shape(), false, value_}};
  }
  void compute(ComputeContext& ctx) override {
    if (!value_.defined()) value_ = constant_value(node_).contiguous();
    copy_value(value_, ctx.output(0));
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor& spec = ctx.value(0);
    if (spec.dtype() != DType::Int64 || spec.rank() != 1)
      throw ShapeError(fmt::format("the shape input must be a 1-D int64 tensor, got {}", spec.describe()));
    const Shape shape(spec.data<int64_t>(), spec.data<int64_t>() + spec.numel());
    for (int64_t d : shape)
      if (d < 0) throw ShapeError(fmt::format("the shape input {} has a negative dimension", to_string(shape)));
    if (node_.has_attr("value")) {
      fill_ = node_.attr_tensor("value").contiguous();
      if (fill_.numel() != 1)
        throw InvalidModel(fmt::format("attribute 'value' must hold one element, got {}", fill_.describe()));
    } else {
      fill_ = Tensor::scalar<float>(0.f);  // the spec's default: float32 zero
    }
    return {{fill_.dtype(), shape, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& out = ctx.output(0);
    const size_t esize = dtype_size(out.dtype());
    const size_t total = out.nbytes();
    if (total == 0) return;
    char* p = static_cast<char*>(out.raw_data());
    std::memcpy(p, fill_.raw_data(), esize);
    // Doubling copies: log2(n) memcpy calls fill any element size.
    for (size_t done = esize; done < total;) {
      const size_t n = std::min(done, total - done);
      std::memcpy(p + done, p, n);
      done += n;
    }
  }

 private:
  Tensor fill_;
};

const KernelRegistrar reg_constant({"", "Constant", 1, kMaxOpset, {}},
                                   [](const Node& n) { return std::make_unique<ConstantKernel>(n); });
const KernelRegistrar reg_constant_of_shape({"", "ConstantOfShape", 9, kMaxOpset, {DType::Int64}},
                                            [](const Node& n) { return std::make_unique<ConstantOfShapeKernel>(n); });

}  // namespace
}  // namespace kiln
