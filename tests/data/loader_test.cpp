#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "data_test_util.h"
#include "kiln/data.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using kiln::test::expect_error;

// Item i: {"x": [i, -i] float32, "y": i int64}; records every index it is asked for.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(size_t n) : n_(n) {}
  size_t size() const override { return n_; }
  Example get(size_t i) const override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      loaded_.push_back(i);
    }
    return {{"x", Tensor::from_vector<float>({2}, {float(i), -float(i)})}, {"y", Tensor::scalar<int64_t>(int64_t(i))}};
  }
  std::vector<size_t> take_loaded() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(loaded_, {});
  }

 private:
  size_t n_;
  mutable std::mutex mutex_;
  mutable std::vector<size_t> loaded_;
};

std::vector<int64_t> ys(const Example& batch) {
  const Tensor& y = batch.at("y");
  return std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + y.numel());
}

TEST(DataLoader, BatchCountsWithAndWithoutDropLast) {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoader keep(ds, 3);
  DataLoader drop(ds, 3, nullptr, true);
  EXPECT_EQ(keep.num_batches(), 4u);
  EXPECT_EQ(drop.num_batches(), 3u);
  EXPECT_EQ(keep.num_examples(), 10u);
  EXPECT_EQ(DataLoader(ds, 5, nullptr, true).num_batches(), 2u);  // exact multiple: nothing dropped
  EXPECT_EQ(DataLoader(ds, 11, nullptr, true).num_batches(), 0u);
  EXPECT_EQ(DataLoader(ds, 11).num_batches(), 1u);
  // The last batch of the kept loader is the one leftover item, stacked to [1, ...].
  const Example last = keep.batch(0, 3);
  EXPECT_EQ(last.at("x").shape(), (Shape{1, 2}));
  EXPECT_EQ(ys(last), (std::vector<int64_t>{9}));
  expect_error<InvalidArgument>([&] { drop.batch(0, 3); }, {"batch 3 is out of range", "3 batches"});
}

TEST(DataLoader, DefaultCollateStacks) {
  auto ds = std::make_shared<CountingDataset>(4);
  const Example b = DataLoader(ds, 4).batch(0, 0);
  ASSERT_EQ(b.at("x").shape(), (Shape{4, 2}));
  EXPECT_EQ(b.at("y").shape(), (Shape{4}));
  const float* x = b.at("x").data<float>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(x[2 * i], float(i));
    EXPECT_EQ(x[2 * i + 1], -float(i));
  }
}

TEST(DataLoader, RandomAccessEqualsSequentialIteration) {
  auto ds = std::make_shared<CountingDataset>(23);
  DataLoader loader(ds, 4, std::make_shared<RandomSampler>(11), false);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    // In order: every item exactly once, in the sampler's order.
    std::vector<std::vector<int64_t>> sequential;
    std::vector<int64_t> seen;
    for (size_t b = 0; b < loader.num_batches(); ++b) {
      sequential.push_back(ys(loader.batch(epoch, b)));
      seen.insert(seen.end(), sequential.back().begin(), sequential.back().end());
    }
    const std::vector<size_t> order = RandomSampler(11).order(23, epoch);
    EXPECT_EQ(seen, std::vector<int64_t>(order.begin(), order.end()));
    // Out of order, interleaved with another epoch (which evicts the cached order): same batches.
    for (size_t b : {5u, 0u, 3u, 1u}) {
      loader.batch(epoch + 10, 0);
      EXPECT_EQ(ys(loader.batch(epoch, b)), sequential[b]) << "epoch " << epoch << " batch " << b;
    }
  }
}

TEST(DataLoader, BatchLoadsOnlyItsItems) {
  auto ds = std::make_shared<CountingDataset>(100);
  DataLoader loader(ds, 8, std::make_shared<RandomSampler>(3), true);
  ds->take_loaded();
  const Example b = loader.batch(2, 7);  // resuming at batch 7 of epoch 2 loads 8 items, no more
  std::vector<size_t> loaded = ds->take_loaded();
  EXPECT_EQ(loaded, loader.batch_indices(2, 7));
  EXPECT_EQ(loaded.size(), 8u);
  EXPECT_TRUE(ds->take_loaded().empty());  // batch_indices loads nothing
}

TEST(DataLoader, ConcurrentBatchesMatchSerial) {
  auto ds = std::make_shared<CountingDataset>(64);
  DataLoader loader(ds, 8, std::make_shared<RandomSampler>(5));
  std::vector<std::vector<int64_t>> got(16);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 16; ++t) threads.emplace_back([&, t] { got[t] = ys(loader.batch(int64_t(t % 2), t / 2)); });
  for (auto& t : threads) t.join();
  for (size_t t = 0; t < 16; ++t) EXPECT_EQ(got[t], ys(loader.batch(int64_t(t % 2), t / 2)));
}

TEST(DataLoader, CustomCollator) {
  auto ds = std::make_shared<CountingDataset>(6);
  DataLoader loader(ds, 4, nullptr, false, [](const std::vector<Example>& items) {
    return Example{{"count", Tensor::scalar<int64_t>(int64_t(items.size()))}};
  });
  EXPECT_EQ(loader.batch(0, 1).at("count").data<int64_t>()[0], 2);
}

// A dataset that batches its items itself (as a Python dataset with its own data_collator does)
// gets the batch's indices; the loader's collator is not called.
class SelfBatching : public CountingDataset {
 public:
  using CountingDataset::CountingDataset;
  Example get_batch(const std::vector<size_t>& indices, const Collator& /*collate*/) const override {
    std::vector<int64_t> ids(indices.begin(), indices.end());
    return {{"ids", Tensor::from_vector<int64_t>({int64_t(ids.size())}, ids)}};
  }
};

TEST(DataLoader, ADatasetThatBatchesItselfGetsTheIndices) {
  auto ds = std::make_shared<SelfBatching>(10);
  bool collated = false;
  DataLoader loader(ds, 4, std::make_shared<RandomSampler>(1), false, [&](const std::vector<Example>& items) {
    collated = true;
    return default_collate(items);
  });
  const Example b = loader.batch(0, 2);
  const std::vector<size_t> want = loader.batch_indices(0, 2);
  EXPECT_EQ(b.at("ids").to_int64_vector(), std::vector<int64_t>(want.begin(), want.end()));
  EXPECT_FALSE(collated);
  EXPECT_TRUE(ds->take_loaded().empty());  // get() is not called either
}

TEST(DataLoader, BadArguments) {
  auto ds = std::make_shared<CountingDataset>(3);
  expect_error<InvalidArgument>([&] { DataLoader(ds, 0); }, "batch_size must be positive");
  expect_error<InvalidArgument>([&] { DataLoader(nullptr, 2); }, "dataset is null");
  expect_error<InvalidArgument>([&] { DataLoader(ds, 2).batch(-1, 0); }, "epoch -1");
}

TEST(DefaultCollate, MismatchesNameColumnAndItems) {
  const Example a{{"x", Tensor::zeros(DType::Float32, {2})}, {"y", Tensor::scalar<int64_t>(1)}};
  const Example wide{{"x", Tensor::zeros(DType::Float32, {3})}, {"y", Tensor::scalar<int64_t>(1)}};
  const Example doubled{{"x", Tensor::zeros(DType::Float64, {2})}, {"y", Tensor::scalar<int64_t>(1)}};
  const Example no_y{{"x", Tensor::zeros(DType::Float32, {2})}, {"z", Tensor::scalar<int64_t>(1)}};
  const Example extra{
      {"x", Tensor::zeros(DType::Float32, {2})}, {"y", Tensor::scalar<int64_t>(1)}, {"w", Tensor::scalar<int64_t>(1)}};
  expect_error<ShapeError>(
      [&] {
        default_collate({a, a, wide});
      },
      "column 'x' has shape [3] in item 2 but [2] in item 0");
  expect_error<TypeError>([&] { default_collate({a, doubled}); }, "column 'x' is double in item 1 but float in item 0");
  expect_error<ShapeError>([&] { default_collate({a, no_y}); }, "item 1 lacks column 'y' that item 0 has");
  expect_error<ShapeError>([&] { default_collate({a, extra}); }, "item 1 has column 'w' that item 0 lacks");
  expect_error<InvalidArgument>([&] { default_collate({}); }, "no items");
}

TEST(DefaultCollate, StridedItemsArePacked) {
  const Tensor t = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4}).permute({1, 0});  // [[1,3],[2,4]]
  const Example b = default_collate({{{"x", t}}, {{"x", t}}});
  EXPECT_EQ(b.at("x").shape(), (Shape{2, 2, 2}));
  const std::vector<float> want{1, 3, 2, 4, 1, 3, 2, 4};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(b.at("x").data<float>()[i], want[i]);
}

// A dataset whose items are whole batches (a Python Trainer's own DataLoader): the loader takes one
// item per batch whatever its batch_size, and hands the item over as the batch.
class Batches final : public Dataset {
 public:
  size_t size() const override { return 3; }
  bool is_batched() const override { return true; }
  Example get(size_t index) const override {
    return {{"x", Tensor::from_vector<float>({2}, {static_cast<float>(index), 0.0f})}};
  }
  Example get_batch(const std::vector<size_t>& indices, const Collator& /*collate*/) const override {
    EXPECT_EQ(indices.size(), 1u);
    return {{"x", Tensor::from_vector<float>({4, 2}, std::vector<float>(8, static_cast<float>(indices[0])))}};
  }
};

TEST(DataLoader, BatchedDatasetsGiveOneItemPerBatch) {
  DataLoader loader(std::make_shared<Batches>(), 64, nullptr, true);
  EXPECT_EQ(loader.num_batches(), 3u);
  EXPECT_EQ(loader.batch_indices(0, 2), (std::vector<size_t>{2}));
  EXPECT_EQ(loader.batch(0, 1).at("x").shape(), (Shape{4, 2}));
  EXPECT_EQ(loader.batch(0, 1).at("x").data<float>()[7], 1.0f);
}

}  // namespace
}  // namespace kiln::data
