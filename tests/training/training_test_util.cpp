#include "training/training_test_util.h"

#include <gtest/gtest.h>

#include <random>

#include "graph_builder.h"
#include "test_util.h"

namespace kiln::testing {

Model make_bn_mlp(uint64_t seed) {
  GraphBuilder b("bn_mlp", seed);
  std::string x = b.input("x", DType::Float32, {-1, 4});
  x = b.linear(x, 4, 6, "fc1");
  const Tensor ones = Tensor::from_vector<float>({6}, std::vector<float>(6, 1.f));
  const Tensor zeros = Tensor::zeros(DType::Float32, {6});
  x = b.op("BatchNormalization",
           {x, b.initializer("bn.weight", ones), b.initializer("bn.bias", zeros),
            b.initializer("bn.running_mean", zeros), b.initializer("bn.running_var", ones)},
           {{"epsilon", Attribute::of_float(1e-5f)},
            {"momentum", Attribute::of_float(0.9f)},
            {"training_mode", Attribute::of_int(1)}},
           "bn");
  x = b.op("Relu", {x});
  // A constant mask that only feeds a comparison: no gradient can reach it.
  const std::string mask = b.initializer("mask", Tensor::from_vector<float>({3}, {1.f, 0.f, 1.f}));
  const std::string keep = b.op("Equal", {mask, b.initializer("one", Tensor::scalar<float>(1.f))});
  x = b.linear(x, 6, 3, "fc2");
  x = b.op("Where", {keep, x, b.op("Mul", {x, b.initializer("half", Tensor::scalar<float>(0.5f))})});
  b.output(x, "logits", DType::Float32, {-1, 3});
  Model m = b.build();
  for (Node& n : m.graph.nodes)
    if (n.op_type == "BatchNormalization") n.outputs = {n.outputs[0], "bn.mean_out", "bn.var_out"};
  return m;
}

std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = kiln::test::process_temp_root() / ("training_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::filesystem::path write_bn_mlp_artifacts(const std::string& name, training::OptimType optim,
                                             training::ArtifactOptions options) {
  const std::filesystem::path dir = fresh_dir(name);
  options.loss = training::LossType::CrossEntropyLoss;
  options.optimizer = optim;
  training::generate_artifacts(make_bn_mlp(), options, dir.string());
  return dir;
}

Tensor random_tensor(Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor class_labels(int64_t n, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::empty(DType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
  return t;
}

Tensor token_ids(int64_t batch, int64_t seq, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + 3) % static_cast<size_t>(vocab));
  return Tensor::from_vector<int64_t>({batch, seq}, ids);
}

}  // namespace kiln::testing
