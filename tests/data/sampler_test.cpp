#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <thread>

#include "data_test_util.h"
#include "kiln/data.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using kiln::test::expect_error;

bool is_permutation_of_iota(std::vector<size_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != i) return false;
  return true;
}

TEST(Sampler, SequentialIsIdentityInEveryEpoch) {
  SequentialSampler s;
  EXPECT_EQ(s.order(4, 0), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.order(4, 7), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(s.order(0, 0).empty());
}

TEST(Sampler, RandomGivesPermutations) {
  RandomSampler s(42);
  for (size_t n : {0, 1, 2, 7, 1000, 60000})
    for (int64_t epoch : {0, 1, 5}) EXPECT_TRUE(is_permutation_of_iota(s.order(n, epoch))) << n << " " << epoch;
  // A shuffle of 1000 items that left them in order would be a broken sampler.
  std::vector<size_t> iota(1000);
  std::iota(iota.begin(), iota.end(), size_t{0});
  EXPECT_NE(s.order(1000, 0), iota);
}

TEST(Sampler, RandomIsDeterministicPerSeedAndEpoch) {
  const RandomSampler a(42), b(42), c(43);
  EXPECT_EQ(a.order(500, 3), b.order(500, 3));  // same seed and epoch: same order
  EXPECT_NE(a.order(500, 3), a.order(500, 4));  // another epoch: another order
  EXPECT_NE(a.order(500, 3), c.order(500, 3));  // another seed: another order
  // Epoch 9 computed cold equals epoch 9 computed after drawing 0..8 (exact resume).
  const std::vector<size_t> cold = RandomSampler(42).order(500, 9);
  for (int64_t e = 0; e < 9; ++e) a.order(500, e);
  EXPECT_EQ(a.order(500, 9), cold);
  // Pinned values: a change here breaks resuming runs checkpointed by an earlier Kiln.
  EXPECT_EQ(RandomSampler(42).order(10, 0), (std::vector<size_t>{5, 1, 6, 0, 8, 2, 3, 4, 9, 7}));
}

TEST(Sampler, RandomIsIndependentOfThreads) {
  const RandomSampler s(7);
  std::vector<std::vector<size_t>> parallel(8);
  std::vector<std::thread> threads;
  for (int64_t e = 0; e < 8; ++e) threads.emplace_back([&, e] { parallel[e] = s.order(2000, e); });
  for (auto& t : threads) t.join();
  for (int64_t e = 0; e < 8; ++e) EXPECT_EQ(parallel[e], s.order(2000, e)) << "epoch " << e;
}

TEST(Sampler, RandomIsUniformOverPermutations) {
  // 24000 epochs of 4 items: each of the 24 permutations is expected 1000 times (sd ~31); the
  // bounds are about 5 sd, and the draws are fixed by the seed, so this never flakes.
  const RandomSampler s(2024);
  std::map<std::vector<size_t>, int> counts;
  for (int64_t e = 0; e < 24000; ++e) ++counts[s.order(4, e)];
  EXPECT_EQ(counts.size(), 24u);
  for (const auto& [perm, count] : counts) {
    EXPECT_GT(count, 845);
    EXPECT_LT(count, 1155);
  }
  // Each of 10 items comes first a tenth of the time (position bias check; sd ~30).
  std::vector<int> first(10, 0);
  for (int64_t e = 0; e < 10000; ++e) ++first[s.order(10, e)[0]];
  for (int c : first) EXPECT_NEAR(c, 1000, 150);
}

// HF's get_length_grouped_indices (transformers' trainer_pt_utils), in Python, over the same
// permutation: the mega-batches, their sort and the longest-first swap must match exactly.
TEST(LengthGroupedSampler, MatchesHuggingFacesGrouping) {
  const kiln::test::TempDir dir;
  for (const size_t n : {7u, 100u, 1003u}) {
    std::vector<int64_t> lengths(n);
    for (size_t i = 0; i < n; ++i) lengths[i] = static_cast<int64_t>((i * 37) % 23 + (i % 5 == 0 ? 40 : 1));
    const size_t batch = 4;
    const LengthGroupedSampler sampler(lengths, batch, 11);
    const std::vector<size_t> perm = RandomSampler(11).order(n, 2);
    const std::vector<size_t> got = sampler.order(n, 2);
    std::string in = "{\"bs\": 4, \"lengths\": [";
    for (size_t i = 0; i < n; ++i) in += (i ? "," : "") + std::to_string(lengths[i]);
    in += "], \"perm\": [";
    for (size_t i = 0; i < n; ++i) in += (i ? "," : "") + std::to_string(perm[i]);
    in += "]}";
    const std::string path = testing::write_file(dir / "in.json", in), out = (dir / "out.txt").string();
    testing::run_python(
        "import json\n"
        "d = json.load(open('" +
        path +
        "'))\n"
        "lengths, bs, indices = d['lengths'], d['bs'], d['perm']\n"
        "mult = min(len(lengths) // (bs * 4), 50) or 1\n"
        "size = mult * bs\n"
        "mb = [indices[i:i + size] for i in range(0, len(lengths), size)]\n"
        "mb = [sorted(m, key=lambda i: lengths[i], reverse=True) for m in mb]\n"
        "first = [lengths[m[0]] for m in mb]\n"
        "k = first.index(max(first))\n"
        "mb[0][0], mb[k][0] = mb[k][0], mb[0][0]\n"
        "open('" +
        out + "', 'w').write(' '.join(str(i) for m in mb for i in m))\n");
    std::string want_text = testing::read_bytes(out), got_text;
    for (size_t i = 0; i < n; ++i) got_text += (i ? " " : "") + std::to_string(got[i]);
    EXPECT_EQ(got_text, want_text) << n;
    EXPECT_TRUE(is_permutation_of_iota(got));
    EXPECT_EQ(got, sampler.order(n, 2));  // a pure function of the epoch
    EXPECT_NE(got, sampler.order(n, 3));
  }
}

TEST(LengthGroupedSampler, BadArgumentsAreErrors) {
  expect_error<InvalidArgument>([] { LengthGroupedSampler({1, 2}, 0, 1); }, "batch_size");
  expect_error<InvalidArgument>([] { LengthGroupedSampler({1, -2}, 1, 1); }, "item 1");
  expect_error<InvalidArgument>([] { LengthGroupedSampler({1, 2}, 1, 1).order(3, 0); }, "2 lengths");
  const TensorDataset ds({{"input", Tensor::zeros(DType::Float32, {3, 2})}});
  expect_error<ShapeError>([&] { item_lengths(ds, "length", "input_ids"); }, "neither a 'length' column");
}

TEST(Sampler, HuggingFaceSeedRule) {
  // data_seed wins when set; otherwise the training seed drives shuffling.
  EXPECT_EQ(data_sampler_seed(42, std::nullopt), 42u);
  EXPECT_EQ(data_sampler_seed(42, 7), 7u);
}

TEST(Sampler, NegativeEpochIsAnError) {
  expect_error<InvalidArgument>([] { RandomSampler(1).order(3, -1); }, "epoch -1");
}

// torch's DistributedSampler: the same order on every rank, padded by repeating its start (or cut
// with drop_last), rank r taking every N-th index from r; the shares cover the order exactly.
TEST(DistributedSampler, ShardsTheSameOrderAsTorchDoes) {
  const auto inner = std::make_shared<RandomSampler>(5);
  const std::vector<size_t> all = inner->order(10, 2);
  std::vector<size_t> seen;
  for (int r = 0; r < 3; ++r) {
    const DistributedSampler s(inner, r, 3);
    const std::vector<size_t> mine = s.order(10, 2);
    ASSERT_EQ(mine.size(), 4u);  // ceil(10 / 3)
    EXPECT_EQ(s.length(10), 4u);
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t i = static_cast<size_t>(r) + k * 3;  // position in the padded order
      EXPECT_EQ(mine[k], all[i % 10]) << "rank " << r << " item " << k;
    }
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen.size(), 12u);  // two repeated to fill the last round
  for (size_t i = 0; i < 10; ++i) EXPECT_TRUE(std::binary_search(seen.begin(), seen.end(), i)) << i;
  // drop_last: the tail that does not divide is dropped.
  const DistributedSampler cut(inner, 2, 3, true);
  EXPECT_EQ(cut.length(10), 3u);
  EXPECT_EQ(cut.order(10, 2), (std::vector<size_t>{all[2], all[5], all[8]}));
  // No padding (evaluation): shares of 4, 3 and 3 items, nothing repeated.
  const auto seq = std::make_shared<SequentialSampler>();
  EXPECT_EQ(DistributedSampler(seq, 0, 3, false, false).order(10, 0), (std::vector<size_t>{0, 3, 6, 9}));
  EXPECT_EQ(DistributedSampler(seq, 2, 3, false, false).order(10, 0), (std::vector<size_t>{2, 5, 8}));
  EXPECT_EQ(DistributedSampler(seq, 2, 3, false, false).length(10), 3u);
  EXPECT_EQ(DistributedSampler(seq, 3, 5, false, false).length(2), 0u);
  // A loader over a share: batches of that share.
  Tensor x = Tensor::zeros(DType::Float32, {10, 1});
  DataLoader loader(std::make_shared<TensorDataset>(std::map<std::string, Tensor>{{"x", x}}), 2,
                    std::make_shared<DistributedSampler>(seq, 1, 2), false);
  EXPECT_EQ(loader.num_batches(), 3u);  // items 1, 3, 5, 7, 9
  EXPECT_EQ(loader.batch_indices(0, 2), (std::vector<size_t>{9}));
}

TEST(DistributedSampler, BadArgumentsAreErrors) {
  const auto inner = std::make_shared<SequentialSampler>();
  expect_error<InvalidArgument>([&] { DistributedSampler(nullptr, 0, 1); }, "needs a sampler");
  expect_error<InvalidArgument>([&] { DistributedSampler(inner, 0, 0); }, "num_replicas 0 < 1");
  expect_error<InvalidArgument>([&] { DistributedSampler(inner, 2, 2); }, "rank 2 is not in [0, 2)");
}

}  // namespace
}  // namespace kiln::data
