#include "tiny_run.h"

#include <map>
#include <random>
#include <string>

namespace kiln::fuzz {

std::shared_ptr<data::TensorDataset> tiny_dataset(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Tensor x = Tensor::empty(DType::Float32, {n, 6});
  Tensor y = Tensor::empty(DType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 6; ++k) x.data<float>()[i * 6 + k] = normal(rng);
    y.data<int64_t>()[i] = i % 3;
  }
  return std::make_shared<data::TensorDataset>(std::map<std::string, Tensor>{{"input", x}, {"labels", y}});
}

trainer::ModelSource tiny_mlp() {
  return trainer::ModelSource::builtin(
      "mlp", {{"input_size", 6}, {"input_shape", {6}}, {"hidden_sizes", {4}}, {"num_labels", 3}});
}

}  // namespace kiln::fuzz
