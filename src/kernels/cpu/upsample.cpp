// Upsample (opsets 7-9, deprecated since 10) and Resize-10: output dims floor(in * scale), nearest
// (the floor of out / scale) or linear interpolation at asymmetric coordinates. Both are Resize-11
// with coordinate_transformation_mode "asymmetric" and nearest_mode "floor": this kernel adapts the
// node (scales from opset 7's attribute or the second input) and runs Resize's kernel (resize.cpp).
#include <fmt/format.h>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class LegacyResizeKernel final : public Kernel {
 public:
  explicit LegacyResizeKernel(const Node& n) : Kernel(n) {
    adapted_.name = n.name;
    adapted_.op_type = "Resize";
    adapted_.inputs = {n.inputs.empty() ? "" : n.inputs[0], "", "scales"};
    adapted_.outputs = n.outputs;
    const std::string mode = n.attr_string("mode", "nearest");
    if (mode != "nearest" && mode != "linear" && mode != "bilinear")
      throw InvalidModel(fmt::format("{}: mode '{}' must be 'nearest' or 'linear'", n.op_type, mode));
    adapted_.attrs["mode"] = Attribute::of_string(mode == "nearest" ? "nearest" : "linear");
    adapted_.attrs["coordinate_transformation_mode"] = Attribute::of_string("asymmetric");
    adapted_.attrs["nearest_mode"] = Attribute::of_string("floor");
  }
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    Tensor scales;
    if (ctx.opset < 9 && node_.op_type == "Upsample") {
      const std::vector<float> s = node_.attr_floats("scales", {});
      scales = Tensor::from_vector<float>({int64_t(s.size())}, s);
    } else {
      const Tensor& given = ctx.value(1);
      if (!is_floating(given.dtype()))
        throw TypeError(fmt::format("{}: scales {} must be a float tensor", node_.op_type, given.describe()));
      std::vector<float> s;
      for (int64_t i = 0; i < given.numel(); ++i) s.push_back(float(given.item_as_double(i)));
      scales = Tensor::from_vector<float>({int64_t(s.size())}, s);
    }
    if (scales.numel() != int64_t(x.shape.size()))
      throw ShapeError(fmt::format("{}: scales {} must have one value per dim of X {}{}", node_.op_type,
                                   scales.describe(), dtype_name(x.dtype), to_string(x.shape)));
    scales_ = scales;
    if (!inner_) inner_ = KernelRegistry::global().resolve("", "Resize", 11, x.dtype).create(adapted_);
    return inner_->infer(inner_context(ctx));
  }
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>& outputs) override {
    inner_->prepare(inner_context(ctx), outputs);
  }
  void compute(ComputeContext& ctx) override {
    ComputeContext inner{adapted_, {&ctx.input(0), nullptr, &scales_}, ctx.outputs, ctx.run_index};
    inner_->compute(inner);
  }

 private:
  InferContext inner_context(const InferContext& ctx) const {
    TensorMeta s = TensorMeta::of(scales_);
    s.value = scales_;
    return InferContext{adapted_, 11, {ctx.input(0), std::nullopt, s}};
  }

  Node adapted_;
  Tensor scales_;
  std::unique_ptr<Kernel> inner_;
};

const KernelRegistrar upsample_reg({"", "Upsample", 7, 9, {}},
                                   [](const Node& n) { return std::make_unique<LegacyResizeKernel>(n); });
const KernelRegistrar resize10_reg({"", "Resize", 10, 10, {}},
                                   [](const Node& n) { return std::make_unique<LegacyResizeKernel>(n); });

}  // namespace
}  // namespace kiln
