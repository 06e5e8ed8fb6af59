// GraphBuilder: the tests' small model builder. It assembles a kiln::Model node by node through the
// IR's GraphEditor, with seeded parameter initialisation following torch.nn's defaults
// (kaiming-uniform with a = sqrt(5)). Models for users come from kiln::nn (include/kiln/nn/).
//
//   GraphBuilder b("mlp", 42);
//   std::string x = b.input("x", DType::Float32, {-1, 784});
//   std::string h = b.linear(x, 784, 128, "fc1");
//   b.output(b.op("Relu", {h}), ...);
#pragma once

#include <random>
#include <string>
#include <vector>

#include "ir/graph_editor.h"
#include "kiln/graph.h"

namespace kiln {

class GraphBuilder {
 public:
  GraphBuilder(std::string name, uint64_t seed, int64_t opset = 17);
  GraphBuilder(const GraphBuilder&) = delete;  // the editor refers to this builder's model
  GraphBuilder& operator=(const GraphBuilder&) = delete;
  // A graph input; -1 dims become the symbolic dimension "batch".
  std::string input(const std::string& name, DType dtype, const std::vector<int64_t>& dims);
  void output(const std::string& value, const std::string& name, DType dtype, const std::vector<int64_t>& dims);
  std::string initializer(const std::string& name, Tensor value);
  // A 1-D int64 initializer (Slice's starts, a Reshape's shape).
  std::string ints(const std::string& name, const std::vector<int64_t>& values);
  // A float32 initializer of standard normal values drawn from `seed`.
  std::string normal(const std::string& name, const Shape& shape, uint32_t seed);
  // Adds a node; returns its first output's name (generated from the op type when empty).
  std::string op(const std::string& op_type, std::vector<std::string> inputs,
                 std::map<std::string, Attribute> attrs = {}, const std::string& name = "");
  // torch.nn.Linear(in, out) as Gemm(transB=1): weight [out, in], bias [out].
  std::string linear(const std::string& x, int64_t in, int64_t out, const std::string& prefix);
  // torch.nn.Conv2d(in, out, k, stride, padding).
  std::string conv2d(const std::string& x, int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad,
                     const std::string& prefix);
  Model build() const;

 private:
  Tensor uniform(Shape shape, float bound);
  Model model_;
  GraphEditor edit_{model_};
  std::mt19937_64 rng_;
  int counter_ = 0;
};

// How many nodes of the model run op `op` (any domain).
inline size_t count(const Model& m, const std::string& op) {
  size_t n = 0;
  for (const Node& node : m.graph.nodes) n += node.op_type == op;
  return n;
}

// A small CNN classifier for 1x28x28 images and 10 classes (LeNet-style, BatchNorm, pooling).
Model make_small_cnn(uint64_t seed);

}  // namespace kiln
