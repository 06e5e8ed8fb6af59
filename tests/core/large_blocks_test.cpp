// The cache of large freed tensor blocks (core/large_blocks.h): a freed tensor of 4 MiB or more
// gives its block to the next tensor of the same rounded size; other sizes and small tensors do not
// take it; the cache never holds more than 256 MiB.
#include "core/large_blocks.h"

#include <gtest/gtest.h>

#include <vector>

#include "kiln/tensor.h"

namespace kiln {
namespace {

TEST(LargeBlocks, AFreedLargeTensorsBlockServesTheNextOfItsSize) {
  const Shape big{3, 1024, 1024};  // 12 MiB of float32
  void* first = nullptr;
  {
    Tensor t = Tensor::empty(DType::Float32, big);
    first = t.raw_data();
  }
  EXPECT_GE(cached_large_block_bytes(), size_t{12} << 20);
  {
    Tensor other = Tensor::empty(DType::Float32, {5, 1024, 1024});  // another size: a block of its own
    EXPECT_NE(other.raw_data(), first);
    Tensor again = Tensor::empty(DType::Float32, big);
    EXPECT_EQ(again.raw_data(), first);
  }
  Tensor small = Tensor::empty(DType::Float32, {16});
  EXPECT_NE(small.raw_data(), first);
}

TEST(LargeBlocks, TheCacheIsBounded) {
  for (int64_t mib = 4; mib <= 100; mib += 8) {
    Tensor t = Tensor::empty(DType::Uint8, {mib << 20});
    EXPECT_LE(cached_large_block_bytes(), size_t{256} << 20);
  }
  EXPECT_LE(cached_large_block_bytes(), size_t{256} << 20);
  EXPECT_GT(cached_large_block_bytes(), size_t{0});
}

}  // namespace
}  // namespace kiln
