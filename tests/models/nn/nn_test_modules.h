// Minimal modules for the nn core tests, written against module.h alone so that the core is tested
// without the layer library: a Linear (Gemm), a Relu, a BatchNorm1d that emits training-mode
// BatchNormalization as torch's exporter does, a module using a constant and buffers, Dropout.
#pragma once

#include <cmath>

#include "kiln/nn/module.h"

namespace kiln::nn::testing {

class TLinear : public Module {
 public:
  TLinear(int64_t in, int64_t out) : in_(in), out_(out) {
    Tensor w = Tensor::empty(DType::Float32, {out, in});
    kaiming_uniform_(w, std::sqrt(5.0));
    register_parameter("weight", w);
    Tensor b = Tensor::empty(DType::Float32, {out});
    const double bound = 1.0 / std::sqrt(double(in));
    uniform_(b, -bound, bound);
    register_parameter("bias", b);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& x) override {
    return {t.op("Gemm", {x[0], t.parameter(*this, "weight"), t.parameter(*this, "bias")},
                 {{"transB", Attribute::of_int(1)}}, x[0].dtype, {x[0].dim(0), out_})};
  }
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override {
    return "in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) + ", bias=True";
  }

 private:
  int64_t in_, out_;
};

class TRelu : public Module {
 public:
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& x) override {
    return {t.op("Relu", {x[0]}, {}, x[0].dtype, x[0].shape)};
  }
  std::string type_name() const override { return "ReLU"; }
};

class TBatchNorm1d : public Module {
 public:
  explicit TBatchNorm1d(int64_t c, double momentum = 0.1) : c_(c), momentum_(momentum) {
    Tensor ones = Tensor::empty(DType::Float32, {c});
    constant_(ones, 1.0);
    register_parameter("weight", ones.clone());
    register_parameter("bias", Tensor::zeros(DType::Float32, {c}));
    register_buffer("running_mean", Tensor::zeros(DType::Float32, {c}));
    register_buffer("running_var", ones.clone());
    register_buffer("num_batches_tracked", Tensor::scalar<int64_t>(0));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& x) override {
    std::vector<Var> in{x[0], t.parameter(*this, "weight"), t.parameter(*this, "bias"),
                        t.parameter(*this, "running_mean"), t.parameter(*this, "running_var")};
    std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(1e-5f)},
                                           {"momentum", Attribute::of_float(float(1.0 - momentum_))}};
    if (!training()) return {t.op("BatchNormalization", in, attrs, x[0].dtype, x[0].shape)};
    attrs["training_mode"] = Attribute::of_int(1);
    return {t.op_multi("BatchNormalization", in, attrs,
                       {{x[0].dtype, x[0].shape}, {x[0].dtype, {c_}}, {x[0].dtype, {c_}}})[0]};
  }
  std::string type_name() const override { return "BatchNorm1d"; }

 private:
  int64_t c_;
  double momentum_;
};

// y = x * 2 + offset (a persistent float buffer) + shift (a non-persistent buffer).
class TShift : public Module {
 public:
  explicit TShift(int64_t n) {
    register_buffer("offset", Tensor::from_vector<float>({n}, std::vector<float>(size_t(n), 0.5f)));
    register_buffer("shift", Tensor::from_vector<float>({n}, std::vector<float>(size_t(n), 0.25f)), false);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& x) override {
    Var y = t.op("Mul", {x[0], t.constant_scalar(2.0, x[0].dtype, "two")}, {}, x[0].dtype, x[0].shape);
    y = t.op("Add", {y, t.parameter(*this, "offset")}, {}, x[0].dtype, x[0].shape);
    return {t.op("Add", {y, t.parameter(*this, "shift")}, {}, x[0].dtype, x[0].shape)};
  }
  std::string type_name() const override { return "Shift"; }
};

class TDropout : public Module {
 public:
  explicit TDropout(double p) : p_(p) {}
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& x) override {
    if (!training()) return {x[0]};
    return {t.op("Dropout",
                 {x[0], t.constant_scalar(p_, x[0].dtype, "ratio"), t.constant_scalar(1, DType::Bool, "training")}, {},
                 x[0].dtype, x[0].shape)};
  }
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override { return "p=0.5, inplace=False"; }

 private:
  double p_;
};

}  // namespace kiln::nn::testing
