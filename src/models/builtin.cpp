#include "models/builtin.h"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "kiln/error.h"
#include "models/graph_builder.h"

namespace kiln {

namespace {

// BatchNormalization in training mode over `channels`, with its running statistics as outputs
// (momentum 0.9 in ONNX's convention, torch's 0.1), as torch.onnx exports a training-mode module.
std::string batch_norm(GraphBuilder& b, const std::string& x, int64_t channels, const std::string& prefix) {
  const Tensor ones = Tensor::from_vector<float>({channels}, std::vector<float>(static_cast<size_t>(channels), 1.f));
  const Tensor zeros = Tensor::zeros(DType::Float32, {channels});
  return b.op("BatchNormalization",
              {x, b.initializer(prefix + ".weight", ones), b.initializer(prefix + ".bias", zeros),
               b.initializer(prefix + ".running_mean", zeros), b.initializer(prefix + ".running_var", ones)},
              {{"epsilon", Attribute::of_float(1e-5f)}, {"momentum", Attribute::of_float(0.9f)},
               {"training_mode", Attribute::of_int(1)}},
              prefix);
}

Model mlp(uint64_t seed) {
  GraphBuilder b("mlp", seed);
  std::string x = b.input("input", DType::Float32, {-1, 1, 28, 28});
  x = b.op("Flatten", {x}, {{"axis", Attribute::of_int(1)}});
  x = b.linear(x, 784, 128, "fc1");
  x = b.op("Relu", {x});
  x = b.linear(x, 128, 10, "fc2");
  b.output(x, "logits", DType::Float32, {-1, 10});
  return b.build();
}

Model lenet(uint64_t seed) {
  GraphBuilder b("lenet", seed);
  const auto pool = [&](const std::string& v) {
    return b.op("MaxPool", {v}, {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})}});
  };
  std::string x = b.input("input", DType::Float32, {-1, 1, 28, 28});
  x = pool(b.op("Relu", {batch_norm(b, b.conv2d(x, 1, 6, 5, 1, 2, "conv1"), 6, "bn1")}));
  x = pool(b.op("Relu", {batch_norm(b, b.conv2d(x, 6, 16, 5, 1, 0, "conv2"), 16, "bn2")}));
  x = b.op("Flatten", {x}, {{"axis", Attribute::of_int(1)}});
  x = b.op("Relu", {b.linear(x, 16 * 5 * 5, 120, "fc1")});
  x = b.op("Relu", {b.linear(x, 120, 84, "fc2")});
  x = b.linear(x, 84, 10, "fc3");
  b.output(x, "logits", DType::Float32, {-1, 10});
  Model m = b.build();
  // The running statistics as outputs, so that training updates them (GraphBuilder::op names one).
  for (Node& n : m.graph.nodes)
    if (n.op_type == "BatchNormalization") n.outputs = {n.outputs[0], n.name + ".mean_out", n.name + ".var_out"};
  return m;
}

const std::map<std::string, std::function<Model(uint64_t)>>& registry() {
  static const std::map<std::string, std::function<Model(uint64_t)>> r = {{"mlp", mlp}, {"lenet", lenet}};
  return r;
}

}  // namespace

Model make_builtin_model(const std::string& name, uint64_t seed) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [n, f] : registry()) known += (known.empty() ? "" : ", ") + n;
    throw InvalidArgument(fmt::format("unknown built-in model '{}'; built-in models: {}", name, known));
  }
  return it->second(seed);
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& [n, f] : registry()) names.push_back(n);
  return names;
}

}  // namespace kiln
