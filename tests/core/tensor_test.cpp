#include "kiln/tensor.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kiln {

using kiln::test::expect_error;

TEST(Tensor, AllocationIsAligned) {
  for (int64_t n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty(DType::Float32, {n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kAlignment, 0u);
  }
}

TEST(Tensor, ReshapeIsAViewAndPermuteIsStrided) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor r = t.reshape({3, 2});
  EXPECT_EQ(r.raw_data(), t.raw_data());
  Tensor p = t.permute({1, 0});
  EXPECT_FALSE(p.is_contiguous());
  Tensor c = p.contiguous();
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  const float* d = c.data<float>();
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(d[1], 3);
  EXPECT_EQ(d[2], 1);
  EXPECT_EQ(d[5], 5);
}

TEST(Tensor, WrongDtypeAccessNamesBothTypes) {
  Tensor t = Tensor::zeros(DType::Int64, {2});
  expect_error<TypeError>([&] { (void)t.data<float>(); }, "int64[2] read as float");
}

TEST(Tensor, WrapDoesNotOwn) {
  std::vector<double> buf = {1, 2, 3, 4};
  Tensor t = Tensor::wrap(buf.data(), DType::Float64, {2, 2});
  EXPECT_FALSE(t.storage()->owned());
  EXPECT_EQ(t.item_as_double(3), 4.0);
}

TEST(Tensor, ReshapeToWrongSizeIsAShapeError) {
  Tensor t = Tensor::zeros(DType::Float32, {2, 3});
  EXPECT_THROW(t.reshape({4}), ShapeError);
}

TEST(DType, HalfRoundTripsExactValuesAndRoundsToNearestEven) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.960464477539063e-08f, -0.f}) {
    EXPECT_EQ(half_to_float(float_to_half(f)), f) << f;
  }
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 1.0f / 4096)), 1.0f);  // halfway: ties to even
  EXPECT_EQ(float_to_half(1e6f).bits, 0x7c00);                        // overflow to +inf
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.5f)), 1.5f);
  EXPECT_EQ(sizeof(Half), 2u);
}

TEST(Shape, BroadcastFollowsNumpyAndNamesBothShapes) {
  EXPECT_EQ(broadcast_shapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_shapes({}, {5}), (Shape{5}));
  expect_error<ShapeError>([&] { broadcast_shapes({2, 3}, {4}); }, "[2, 3] and [4]");
}

}  // namespace kiln
