// concat_padded: an evaluation's per-batch predictions and labels as one tensor, padded with -100
// where batches were padded to their own lengths (HF's nested_concat).
#include "trainer/loop/gather.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kiln::trainer {
namespace {

using kiln::test::expect_error;

TEST(ConcatPadded, SameShapesAreConcatenatedAlongTheBatch) {
  const Tensor a = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  const Tensor b = Tensor::from_vector<float>({1, 2}, {5, 6});
  const Tensor out = concat_padded({a, b});
  ASSERT_EQ(out.shape(), (Shape{3, 2}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.data<float>()[i], i + 1.f);
  const Tensor v = concat_padded({Tensor::from_vector<int64_t>({2}, {7, 8}), Tensor::from_vector<int64_t>({1}, {9})});
  EXPECT_EQ(v.to_int64_vector(), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_FALSE(concat_padded({}).defined());
}

TEST(ConcatPadded, RaggedBatchesArePaddedWithMinus100AtTheEndOfEachAxis) {
  // Labels [B, T] of two batches padded to T = 3 and T = 1.
  const Tensor a = Tensor::from_vector<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = Tensor::from_vector<int64_t>({1, 1}, {7});
  EXPECT_EQ(concat_padded({b, a}).to_int64_vector(), (std::vector<int64_t>{7, -100, -100, 1, 2, 3, 4, 5, 6}));
  // Logits [B, T, V]: T differs, V too (every trailing axis is padded to its largest size).
  const Tensor l1 = Tensor::from_vector<float>({1, 2, 2}, {1, 2, 3, 4});
  const Tensor l2 = Tensor::from_vector<float>({1, 1, 3}, {5, 6, 7});
  const Tensor out = concat_padded({l1, l2});
  ASSERT_EQ(out.shape(), (Shape{2, 2, 3}));
  const std::vector<float> expected{1, 2, -100, 3, 4, -100, 5, 6, 7, -100, -100, -100};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(out.data<float>()[i], expected[i]) << i;
  // A non-contiguous part is read through its strides.
  const Tensor t = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4}).permute({1, 0});
  const Tensor tt = concat_padded({t, Tensor::from_vector<float>({1, 1}, {9})});
  const std::vector<float> want{1, 3, 2, 4, 9, -100};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(tt.data<float>()[i], want[i]) << i;
}

TEST(ConcatPadded, MixedDTypesRanksAndScalarsAreErrors) {
  const Tensor f = Tensor::from_vector<float>({1, 2}, {1, 2});
  expect_error<TypeError>(
      [&] {
        concat_padded({f, Tensor::from_vector<int64_t>({1, 2}, {1, 2})});
      },
      {"float[1, 2]", "int64[1, 2]"});
  expect_error<ShapeError>([&] { concat_padded({f, Tensor::from_vector<float>({2}, {1, 2})}); }, {"ranks differ"});
  expect_error<ShapeError>([&] { concat_padded({Tensor::scalar<float>(1.f)}); }, {"scalar"});
}

}  // namespace
}  // namespace kiln::trainer
