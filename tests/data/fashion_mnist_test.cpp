// Smoke test on Debian's dataset-fashion-mnist package (installed by scripts/setup.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kiln/data.h"

namespace kiln::data {
namespace {

const std::string kDir = "/usr/share/datasets/fashion-mnist";

std::string require(const std::string& name) {
  const std::string path = kDir + "/" + name;
  if (!std::filesystem::exists(path))
    ADD_FAILURE() << path << " is missing: install Debian's dataset-fashion-mnist (run scripts/setup.sh)";
  return path;
}

TEST(FashionMnist, TrainAndTestSets) {
  auto train = load_idx(require("train-images-idx3-ubyte.gz"), require("train-labels-idx1-ubyte.gz"));
  auto test = load_idx(require("t10k-images-idx3-ubyte.gz"), require("t10k-labels-idx1-ubyte.gz"));
  ASSERT_EQ(train->size(), 60000u);
  ASSERT_EQ(test->size(), 10000u);
  EXPECT_EQ(train->column("input").shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(test->column("labels").shape(), (Shape{10000}));
  // First labels, as numpy reads them from the same files.
  const std::vector<int64_t> train_first{9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  const std::vector<int64_t> test_first{9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(train->column("labels").data<int64_t>()[i], train_first[i]) << i;
    EXPECT_EQ(test->column("labels").data<int64_t>()[i], test_first[i]) << i;
  }
  // Every test class has 1000 images.
  std::vector<int> counts(10, 0);
  for (int64_t i = 0; i < 10000; ++i) ++counts.at(static_cast<size_t>(test->column("labels").data<int64_t>()[i]));
  for (int c : counts) EXPECT_EQ(c, 1000);
  // Pixel statistics of the training set: numpy gives mean 0.28604060, std 0.35302424 (float64).
  const Tensor& x = train->column("input");
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    sum += x.data<float>()[i];
    sq += double(x.data<float>()[i]) * x.data<float>()[i];
  }
  const double mean = sum / double(x.numel());
  EXPECT_NEAR(mean, 0.28604060, 1e-7);
  EXPECT_NEAR(std::sqrt(sq / double(x.numel()) - mean * mean), 0.35302424, 1e-6);
  // Image 0 of the training set: 433 nonzero pixels summing to 299.00784 (numpy).
  double first_sum = 0;
  int nonzero = 0;
  for (int64_t i = 0; i < 784; ++i) {
    first_sum += x.data<float>()[i];
    nonzero += x.data<float>()[i] > 0;
  }
  EXPECT_EQ(nonzero, 433);
  EXPECT_NEAR(first_sum, 299.0078431, 1e-4);
}

TEST(FashionMnist, NormalizedStatistics) {
  IdxOptions o;
  o.normalize = kFashionMnistNormalization;
  auto test = load_idx(require("t10k-images-idx3-ubyte.gz"), require("t10k-labels-idx1-ubyte.gz"), o);
  const Tensor& x = test->column("input");
  double sum = 0;
  for (int64_t i = 0; i < x.numel(); ++i) sum += x.data<float>()[i];
  // numpy: test mean 0.28684928 -> (0.28684928 - 0.2860) / 0.3530 = 0.00240590.
  EXPECT_NEAR(sum / double(x.numel()), 0.00240590, 1e-6);
  // A batch of the loader is the stacked items.
  DataLoader loader(test, 64, std::make_shared<RandomSampler>(42), true);
  EXPECT_EQ(loader.num_batches(), 156u);
  const Example b = loader.batch(0, 155);
  EXPECT_EQ(b.at("input").shape(), (Shape{64, 1, 28, 28}));
  EXPECT_EQ(b.at("labels").dtype(), DType::Int64);
  const size_t first = loader.batch_indices(0, 155)[0];
  EXPECT_EQ(b.at("labels").data<int64_t>()[0], test->column("labels").data<int64_t>()[first]);
}

}  // namespace
}  // namespace kiln::data
