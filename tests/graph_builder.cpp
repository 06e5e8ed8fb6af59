#include "graph_builder.h"

#include <fmt/format.h>

#include <cmath>

namespace kiln {

GraphBuilder::GraphBuilder(std::string name, uint64_t seed, int64_t opset) : rng_(seed) {
  model_.graph.name = std::move(name);
  model_.opsets[""] = opset;
  model_.ir_version = 8;
  model_.producer_name = "kiln";
}

namespace {
ValueInfo make_info(const std::string& name, DType dtype, const std::vector<int64_t>& dims) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_type = v.has_shape = true;
  for (int64_t d : dims) v.dims.push_back(d < 0 ? Dim{-1, "batch"} : Dim{d, ""});
  return v;
}
}  // namespace

std::string GraphBuilder::input(const std::string& name, DType dtype, const std::vector<int64_t>& dims) {
  model_.graph.inputs.push_back(make_info(name, dtype, dims));
  return name;
}

void GraphBuilder::output(const std::string& value, const std::string& name, DType dtype,
                          const std::vector<int64_t>& dims) {
  op("Identity", {value}, {}, name + "_identity");
  model_.graph.nodes.back().outputs = {name};
  model_.graph.outputs.push_back(make_info(name, dtype, dims));
}

std::string GraphBuilder::initializer(const std::string& name, Tensor value) {
  model_.graph.initializers[name] = std::move(value);
  return name;
}

std::string GraphBuilder::ints(const std::string& name, const std::vector<int64_t>& values) {
  return initializer(name, Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values));
}

std::string GraphBuilder::normal(const std::string& name, const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return initializer(name, std::move(t));
}

std::string GraphBuilder::op(const std::string& op_type, std::vector<std::string> inputs,
                             std::map<std::string, Attribute> attrs, const std::string& name) {
  Node n;
  n.op_type = op_type;
  n.name = name.empty() ? fmt::format("{}_{}", op_type, counter_++) : name;
  n.inputs = std::move(inputs);
  n.outputs = {n.name + "_out"};
  n.attrs = std::move(attrs);
  return edit_.add_node(std::move(n)).outputs[0];
}

Tensor GraphBuilder::uniform(Shape shape, float bound) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  std::uniform_real_distribution<float> dist(-bound, bound);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng_);
  return t;
}

// torch.nn.Linear / Conv2d reset_parameters: kaiming_uniform(a=sqrt(5)) gives bound 1/sqrt(fan_in)
// for the weight, and the bias is uniform in the same bound.
std::string GraphBuilder::linear(const std::string& x, int64_t in, int64_t out, const std::string& prefix) {
  const float bound = 1.f / std::sqrt(static_cast<float>(in));
  const std::string w = initializer(prefix + ".weight", uniform({out, in}, bound));
  const std::string b = initializer(prefix + ".bias", uniform({out}, bound));
  return op("Gemm", {x, w, b}, {{"transB", Attribute::of_int(1)}}, prefix);
}

std::string GraphBuilder::conv2d(const std::string& x, int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad,
                                 const std::string& prefix) {
  const float bound = 1.f / std::sqrt(static_cast<float>(in * k * k));
  const std::string w = initializer(prefix + ".weight", uniform({out, in, k, k}, bound));
  const std::string b = initializer(prefix + ".bias", uniform({out}, bound));
  return op("Conv", {x, w, b},
            {{"kernel_shape", Attribute::of_ints({k, k})},
             {"strides", Attribute::of_ints({stride, stride})},
             {"pads", Attribute::of_ints({pad, pad, pad, pad})}},
            prefix);
}

Model GraphBuilder::build() const { return model_; }

Model make_small_cnn(uint64_t seed) {
  GraphBuilder b("small_cnn", seed);
  std::string x = b.input("images", DType::Float32, {-1, 1, 28, 28});
  x = b.conv2d(x, 1, 16, 3, 1, 1, "conv1");
  const Tensor ones = Tensor::from_vector<float>({16}, std::vector<float>(16, 1.f));
  const Tensor zeros = Tensor::zeros(DType::Float32, {16});
  x = b.op("BatchNormalization",
           {x, b.initializer("bn1.weight", ones), b.initializer("bn1.bias", zeros),
            b.initializer("bn1.running_mean", zeros), b.initializer("bn1.running_var", ones)},
           {{"epsilon", Attribute::of_float(1e-5f)}}, "bn1");
  x = b.op("Relu", {x});
  x = b.op("MaxPool", {x}, {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})}});
  x = b.conv2d(x, 16, 32, 3, 1, 1, "conv2");
  x = b.op("Relu", {x});
  x = b.op("MaxPool", {x}, {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})}});
  x = b.op("Flatten", {x}, {{"axis", Attribute::of_int(1)}});
  x = b.linear(x, 32 * 7 * 7, 128, "fc1");
  x = b.op("Relu", {x});
  x = b.linear(x, 128, 10, "fc2");
  b.output(x, "logits", DType::Float32, {-1, 10});
  return b.build();
}

}  // namespace kiln
