// plan_memory on its own: buffers alive at the same time never share a byte, buffers whose
// lifetimes are disjoint do, offsets are aligned and the arena is exactly as large as its highest
// buffer. Hand-made request sets and random ones (fixed seeds), every pair checked.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {
namespace {

size_t align_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

std::string describe(const std::vector<BufferRequest>& requests, const MemoryPlan& plan, size_t i) {
  const BufferRequest& r = requests[i];
  return "buffer " + std::to_string(i) + " (" + std::to_string(r.bytes) + " bytes, steps " + std::to_string(r.first) +
         ".." + std::to_string(r.last) + ") at " + std::to_string(plan.offsets[i]);
}

// Every property a plan must have, whatever the requests.
void expect_valid(const std::vector<BufferRequest>& requests, const MemoryPlan& plan) {
  ASSERT_EQ(plan.offsets.size(), requests.size());
  size_t end = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % kAlignment, 0u) << describe(requests, plan, i);
    if (requests[i].bytes > 0) end = std::max(end, plan.offsets[i] + requests[i].bytes);
  }
  EXPECT_EQ(plan.arena_bytes, align_up(end));  // as large as the highest buffer, no larger
  for (size_t i = 0; i < requests.size(); ++i)
    for (size_t j = i + 1; j < requests.size(); ++j) {
      if (!lifetimes_overlap(requests[i], requests[j])) continue;
      const size_t a = plan.offsets[i], b = plan.offsets[j];
      const bool bytes_overlap = a < b + requests[j].bytes && b < a + requests[i].bytes;
      EXPECT_FALSE(bytes_overlap) << describe(requests, plan, i) << " and " << describe(requests, plan, j)
                                  << " are alive together but share bytes";
    }
}

// 1 to `most` buffers of 0-5000 bytes, each alive for up to 13 steps from one of the first 41.
std::vector<BufferRequest> random_requests(uint32_t seed, size_t most) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> count(1, most), bytes(0, 5000), start(0, 40), length(0, 12);
  std::vector<BufferRequest> r(count(rng));
  for (BufferRequest& b : r) {
    b.bytes = bytes(rng);
    b.first = start(rng);
    b.last = b.first + length(rng);
  }
  return r;
}

size_t total_bytes(const std::vector<BufferRequest>& requests) {
  size_t sum = 0;
  for (const BufferRequest& r : requests) sum += align_up(r.bytes);
  return sum;
}

TEST(MemoryPlan, EmptyRequestsGiveAnEmptyArena) {
  const MemoryPlan p = plan_memory({});
  EXPECT_TRUE(p.offsets.empty());
  EXPECT_EQ(p.arena_bytes, 0u);
}

TEST(MemoryPlan, ZeroByteBuffersTakeNoSpace) {
  const std::vector<BufferRequest> r{{0, 0, 3}, {128, 1, 2}, {0, 2, 2}};
  const MemoryPlan p = plan_memory(r);
  expect_valid(r, p);
  EXPECT_EQ(p.arena_bytes, 128u);
}

TEST(MemoryPlan, OneBufferStartsAtZeroAndIsRoundedUp) {
  const std::vector<BufferRequest> r{{100, 0, 0}};
  const MemoryPlan p = plan_memory(r);
  EXPECT_EQ(p.offsets[0], 0u);
  EXPECT_EQ(p.arena_bytes, 128u);
}

TEST(MemoryPlan, AChainReusesBytes) {
  // a -> b -> c: each step reads the previous buffer and writes the next, so a and c never live
  // together and share bytes; the arena is two buffers, not three.
  const std::vector<BufferRequest> r{{4096, 0, 1}, {4096, 1, 2}, {4096, 2, 3}};
  const MemoryPlan p = plan_memory(r);
  expect_valid(r, p);
  EXPECT_EQ(p.offsets[0], p.offsets[2]);
  EXPECT_LT(p.arena_bytes, total_bytes(r));
  EXPECT_EQ(p.arena_bytes, 2 * 4096u);
}

TEST(MemoryPlan, ReusesBytesOnlyAcrossDisjointLifetimes) {
  // a [0,1], b [1,2], c [2,3]: a and c may share; b overlaps both.
  const std::vector<BufferRequest> r{{100, 0, 1}, {100, 1, 2}, {100, 2, 3}};
  const MemoryPlan p = plan_memory(r);
  expect_valid(r, p);
  EXPECT_EQ(p.offsets[0], p.offsets[2]);
  EXPECT_NE(p.offsets[0], p.offsets[1]);
  EXPECT_EQ(p.arena_bytes, 256u);
}

TEST(MemoryPlan, BuffersAliveTogetherAllGetTheirOwnBytes) {
  // Every lifetime covers step 2: nothing can share, the arena is the sum of the aligned sizes.
  const std::vector<BufferRequest> r{{10, 0, 2}, {700, 1, 4}, {64, 2, 2}, {65, 2, 9}};
  const MemoryPlan p = plan_memory(r);
  expect_valid(r, p);
  EXPECT_EQ(p.arena_bytes, total_bytes(r));
}

TEST(MemoryPlan, FitsSmallBuffersIntoGaps) {
  const std::vector<BufferRequest> r{{1000, 0, 5}, {64, 0, 1}, {64, 2, 3}, {1000, 6, 7}};
  const MemoryPlan p = plan_memory(r);
  expect_valid(r, p);
  EXPECT_EQ(p.offsets[0], 0u);
  EXPECT_EQ(p.offsets[3], 0u);  // reuses the first big buffer's bytes after it dies
  EXPECT_EQ(p.arena_bytes, 1024u + 64u);
}

TEST(MemoryPlan, RandomRequestsNeverShareLiveBytes) {
  for (uint32_t seed : {1u, 2u, 3u, 17u, 2024u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<BufferRequest> r = random_requests(seed, 60);
    const MemoryPlan p = plan_memory(r);
    expect_valid(r, p);
    EXPECT_LE(p.arena_bytes, total_bytes(r));
  }
}

TEST(MemoryPlan, RandomChainsReuseBytes) {
  // Long chains of same-sized buffers, each alive for two steps: however long the chain, two
  // buffers' worth of bytes suffice.
  for (uint32_t seed : {5u, 6u, 7u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const size_t bytes = std::uniform_int_distribution<size_t>(1, 10000)(rng);
    const size_t n = std::uniform_int_distribution<size_t>(3, 50)(rng);
    std::vector<BufferRequest> r;
    for (size_t i = 0; i < n; ++i) r.push_back({bytes, i, i + 1});
    const MemoryPlan p = plan_memory(r);
    expect_valid(r, p);
    EXPECT_EQ(p.arena_bytes, 2 * align_up(bytes));
  }
}

// memory_plan_fits, the check a plan read from the plan cache passes before it is used: every plan
// plan_memory makes fits; a plan that puts two live buffers on one byte, misaligns one, passes the
// arena's end or has another number of offsets does not, and says which buffers.
TEST(MemoryPlanFits, PlansFromPlanMemoryFit) {
  for (uint32_t seed : {1u, 2u, 3u, 17u, 2024u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<BufferRequest> r = random_requests(seed, 80);
    std::string why;
    EXPECT_TRUE(memory_plan_fits(r, plan_memory(r), &why)) << why;
  }
}

TEST(MemoryPlanFits, EveryUnsoundPlanIsRefusedWithItsReason) {
  // 0 and 1 alive together (steps 1-2), 2 after both: 2 may share 0's bytes.
  const std::vector<BufferRequest> r = {{100, 0, 2}, {100, 1, 3}, {100, 4, 5}, {0, 0, 5}};
  const MemoryPlan good{{0, 128, 0, 0}, 256};
  std::string why;
  EXPECT_TRUE(memory_plan_fits(r, good, &why)) << why;
  auto refused = [&](MemoryPlan p, const std::string& reason) {
    std::string w;
    EXPECT_FALSE(memory_plan_fits(r, p, &w));
    EXPECT_NE(w.find(reason), std::string::npos) << w;
  };
  refused({{0, 64, 0, 0}, 256}, "buffers 0 and 1 are alive at once and share bytes");  // 1 starts inside 0
  refused({{128, 64, 0, 0}, 256}, "share bytes");                                      // 1 ends inside 0
  refused({{0, 130, 0, 0}, 256}, "not aligned");
  refused({{0, 192, 0, 0}, 256}, "passes the arena's end");
  refused({{0, 128, 0}, 256}, "3 offsets for 4 buffers");
  // Lifetimes touching at one step overlap: buffer 2 alive from step 2 would meet buffer 0.
  std::vector<BufferRequest> touching = r;
  touching[2].first = 2;
  EXPECT_FALSE(memory_plan_fits(touching, good, &why));
}

}  // namespace
}  // namespace kiln
