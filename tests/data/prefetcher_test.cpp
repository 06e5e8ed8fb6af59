// data::Prefetcher: batches loaded on worker threads come out in the loader's order with the
// loader's contents, for any worker count and prefetch factor, across epochs on the same threads;
// a failing batch rethrows from next() naming the batch and its first item, and the batches before
// it arrive intact.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>

#include "kiln/data.h"
#include "kiln/error.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using kiln::test::expect_error;

// Item i: {"x": [i] float32}; item `bad` throws.
class Items : public Dataset {
 public:
  Items(size_t n, size_t bad) : n_(n), bad_(bad) {}
  size_t size() const override { return n_; }
  Example get(size_t i) const override {
    if (i == bad_) throw CorruptFile(fmt::format("item {} is damaged", i));
    return {{"x", Tensor::from_vector<float>({1}, {static_cast<float>(i)})}};
  }

 private:
  size_t n_, bad_;
};

TEST(Prefetcher, GivesTheLoadersBatchesInOrderAcrossEpochs) {
  auto data = std::make_shared<Items>(103, 1000);
  const DataLoader loader(data, 8, std::make_shared<RandomSampler>(7));
  for (const auto& [workers, factor] : {std::pair{1, 1}, {2, 2}, {4, 1}}) {
    Prefetcher p(loader, workers, factor);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      const size_t first = epoch == 0 ? 3 : 0;  // a resumed epoch starts past its first batches
      p.start(epoch, first, loader.num_batches());
      for (size_t b = first; b < loader.num_batches(); ++b) {
        const Example got = p.next(), want = loader.batch(epoch, b);
        ASSERT_EQ(got.at("x").numel(), want.at("x").numel());
        for (int64_t i = 0; i < want.at("x").numel(); ++i)
          EXPECT_EQ(got.at("x").data<float>()[i], want.at("x").data<float>()[i]) << workers << " " << b;
      }
      expect_error<InvalidArgument>([&] { p.next(); }, "past the end");
    }
  }
}

TEST(Prefetcher, AFailingBatchRethrowsNamingIt) {
  auto data = std::make_shared<Items>(40, 21);  // batch 2 of a sequential loader of 8
  const DataLoader loader(data, 8);
  Prefetcher p(loader, 3, 2);
  p.start(0, 0, loader.num_batches());
  p.next();
  p.next();
  expect_error<CorruptFile>([&] { p.next(); },
                            "loading batch 2 of epoch 0 (items 16, ...) on a worker thread: item 21");
  EXPECT_EQ(p.next().at("x").data<float>()[0], 24.f);  // the next batch is fine
  expect_error<InvalidArgument>([&] { Prefetcher(loader, 0, 2); }, "0 workers");
}

}  // namespace
}  // namespace kiln::data
