#include <gtest/gtest.h>

#include "data_test_util.h"
#include "kiln/data.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using kiln::test::expect_error;

std::shared_ptr<TensorDataset> small_dataset(int64_t n, float offset = 0.0f) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {offset + float(i), offset + float(i) + 0.5f});
    y.push_back(i % 3);
  }
  return std::make_shared<TensorDataset>(std::map<std::string, Tensor>{
      {"input", Tensor::from_vector<float>({n, 2}, x)}, {"labels", Tensor::from_vector<int64_t>({n}, y)}});
}

TEST(TensorDataset, ItemsAreViewsOfRows) {
  auto ds = small_dataset(5);
  EXPECT_EQ(ds->size(), 5u);
  EXPECT_EQ(ds->columns(), (std::vector<std::string>{"input", "labels"}));
  const Example item = ds->get(3);
  const Tensor& x = item.at("input");
  EXPECT_EQ(x.shape(), (Shape{2}));
  EXPECT_EQ(x.data<float>()[0], 3.0f);
  EXPECT_EQ(x.data<float>()[1], 3.5f);
  EXPECT_EQ(item.at("labels").shape(), Shape{});
  EXPECT_EQ(item.at("labels").data<int64_t>()[0], 0);
  // No copy: the item shares the column's buffer at row 3's offset.
  EXPECT_EQ(x.storage(), ds->column("input").storage());
  EXPECT_EQ(x.raw_data(), ds->column("input").data<float>() + 6);
}

TEST(TensorDataset, NonContiguousColumnsArePacked) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5}).permute({1, 0});  // [3, 2] strided
  TensorDataset ds({{"x", t}});
  EXPECT_EQ(ds.size(), 3u);
  const Tensor row = ds.get(1).at("x");
  EXPECT_EQ(row.data<float>()[0], 1.0f);
  EXPECT_EQ(row.data<float>()[1], 4.0f);
}

TEST(TensorDataset, Errors) {
  expect_error<ShapeError>(
      [] {
        TensorDataset({{"input", Tensor::zeros(DType::Float32, {4, 2})}, {"labels", Tensor::zeros(DType::Int64, {3})}});
      },
      {"column 'labels' has 3 items (shape [3])", "column 'input' has 4 (shape [4, 2])"});
  expect_error<ShapeError>([] { TensorDataset({{"s", Tensor::scalar<float>(1.0f)}}); }, "column 's' is a scalar");
  expect_error<InvalidArgument>([] { TensorDataset(std::map<std::string, Tensor>{}); }, "no columns");
  auto ds = small_dataset(2);
  expect_error<InvalidArgument>([&] { ds->get(2); }, "index 2 is out of range for 2 items");
  expect_error<KeyError>([&] { ds->column("image"); }, {"no column 'image'", "input, labels"});
}

TEST(Subset, PicksIndices) {
  auto ds = small_dataset(5);
  Subset sub(ds, {4, 0});
  EXPECT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub.get(0).at("input").data<float>()[0], 4.0f);
  EXPECT_EQ(sub.get(1).at("input").data<float>()[0], 0.0f);
  EXPECT_EQ(sub.columns(), ds->columns());
  expect_error<InvalidArgument>([&] { Subset(ds, {1, 5}); }, {"index 5 (position 1)", "5 items"});
}

TEST(ConcatDataset, ChainsDatasets) {
  ConcatDataset cat({small_dataset(2), small_dataset(0), small_dataset(3, 100.0f)});
  EXPECT_EQ(cat.size(), 5u);
  const std::vector<float> firsts{0, 1, 100, 101, 102};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(cat.get(i).at("input").data<float>()[0], firsts[i]) << i;
  expect_error<InvalidArgument>([&] { cat.get(5); }, "index 5 is out of range for 5 items");
  auto other =
      std::make_shared<TensorDataset>(std::map<std::string, Tensor>{{"x", Tensor::zeros(DType::Float32, {1})}});
  expect_error<ShapeError>(
      [&] {
        ConcatDataset({small_dataset(1), other});
      },
      {"dataset 1 has columns [x]", "dataset 0 has [input, labels]"});
}

}  // namespace
}  // namespace kiln::data
