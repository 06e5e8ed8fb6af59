#include "trainer/trainer_fixtures.h"

#include <gtest/gtest.h>

#include <random>

#include "graph_builder.h"
#include "kiln/onnx_io.h"
#include "test_util.h"

namespace kiln::trainer::testing {

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  const fs::path dir = kiln::test::process_temp_root() / ("trainer_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path write_model(const fs::path& dir, bool dropout) {
  GraphBuilder b("net", 5);
  std::string x = b.input("input", DType::Float32, {-1, 6});
  x = b.op("Relu", {b.linear(x, 6, 16, "fc1")});
  if (dropout)
    x = b.op("Dropout",
             {x, b.initializer("p", Tensor::scalar<float>(0.25f)), b.initializer("train", Tensor::scalar<bool>(true))});
  x = b.linear(x, 16, 3, "fc2");
  b.output(x, "logits", DType::Float32, {-1, 3});
  Model m = b.build();
  for (Node& n : m.graph.nodes)
    if (n.op_type == "Dropout") n.outputs.push_back("dropout_mask");  // as torch exports it
  const fs::path path = dir / "net.onnx";
  save_model(m, path.string());
  return path;
}

std::shared_ptr<data::TensorDataset> dataset(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Tensor x = Tensor::empty(DType::Float32, {n, 6});
  Tensor y = Tensor::empty(DType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int k = 0; k < 6; ++k) s += (x.data<float>()[i * 6 + k] = normal(rng)) * static_cast<float>(k - 2);
    y.data<int64_t>()[i] = s > 1 ? 2 : (s < -1 ? 0 : 1);
  }
  return std::make_shared<data::TensorDataset>(std::map<std::string, Tensor>{{"input", x}, {"labels", y}});
}

TrainingArguments base_args(const fs::path& out) {
  TrainingArguments a =
      TrainingArguments::parse_args({"--output_dir", out.string(), "--learning_rate", "0.01", "--logging_steps", "1",
                                     "--save_strategy", "no", "--report_to", "none"});
  return a;
}

}  // namespace kiln::trainer::testing
