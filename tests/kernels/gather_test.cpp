// Gather through run_node, against hand-computed values and an index-walk reference.
#include <gtest/gtest.h>

#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Node gather_node(int64_t axis) {
  Node n;
  n.name = "g";
  n.op_type = "Gather";
  n.inputs = {"data", "indices"};
  n.outputs = {"y"};
  n.attrs["axis"] = Attribute::of_int(axis);
  return n;
}

TEST(Gather, Axis0WithNegativeIndicesForEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor x = filled(dt, {3, 2}, 1);
    const Tensor idx = Tensor::from_vector<int64_t>({2, 2}, {0, -1, 2, 1});
    const Tensor y = run_node(gather_node(0), {x, idx}, 13)[0];
    ASSERT_EQ(y.shape(), (Shape{2, 2, 2})) << dtype_name(dt);
    const std::vector<int64_t> rows = {0, 2, 2, 1};
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 2; ++c)
        EXPECT_EQ(y.item_as_double(r * 2 + c), x.item_as_double(rows[r] * 2 + c)) << dtype_name(dt);
  }
}

TEST(Gather, InnerAxisWithInt32IndicesByHand) {
  const Tensor x = Tensor::from_vector<float>({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor idx = Tensor::from_vector<int32_t>({3}, {2, 0, -2});
  const Tensor y = run_node(gather_node(1), {x, idx}, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(as_doubles(y), (std::vector<double>{4, 5, 0, 1, 2, 3, 10, 11, 6, 7, 8, 9}));
  const Tensor z = run_node(gather_node(-1), {x, Tensor::from_vector<int64_t>({2}, {1, 1})}, 13)[0];
  EXPECT_EQ(z.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(as_doubles(z), (std::vector<double>{1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11}));
}

TEST(Gather, ScalarIndexDropsTheAxis) {
  const Tensor x = Tensor::from_vector<int64_t>({2, 3}, {0, 1, 2, 3, 4, 5});
  const Tensor y = run_node(gather_node(1), {x, Tensor::scalar<int64_t>(-1)}, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(as_doubles(y), (std::vector<double>{2, 5}));
  // Shape arithmetic's usual form: Gather(Shape(x), 0) -> a scalar.
  const Tensor s =
      run_node(gather_node(0), {Tensor::from_vector<int64_t>({3}, {7, 8, 9}), Tensor::scalar<int64_t>(0)}, 13)[0];
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item_as_double(), 7.0);
}

TEST(Gather, EmptyIndicesAndEmptyData) {
  EXPECT_EQ(
      run_node(gather_node(0), {filled(DType::Float32, {3, 4}, 1), Tensor::empty(DType::Int64, {0})}, 13)[0].shape(),
      (Shape{0, 4}));
  EXPECT_EQ(run_node(gather_node(1), {filled(DType::Float32, {0, 4}, 1), Tensor::from_vector<int64_t>({1}, {3})}, 13)[0]
                .shape(),
            (Shape{0, 1}));
}

TEST(Gather, LargeRandomGatherMatchesAnIndexWalk) {
  std::mt19937 rng(7);
  const Tensor x = filled(DType::Float32, {6, 50, 40}, 1);
  std::vector<int64_t> iv(700);
  for (int64_t& v : iv) v = static_cast<int64_t>(rng() % 100) - 50;
  const Tensor idx = Tensor::from_vector<int64_t>({35, 20}, iv);
  const Tensor y = run_node(gather_node(1), {x, idx}, 13)[0];
  ASSERT_EQ(y.shape(), (Shape{6, 35, 20, 40}));
  for (int64_t o = 0; o < 6; ++o)
    for (int64_t j = 0; j < 700; ++j) {
      const int64_t row = iv[j] < 0 ? iv[j] + 50 : iv[j];
      for (int64_t k = 0; k < 40; ++k)
        ASSERT_EQ(y.item_as_double((o * 700 + j) * 40 + k), x.item_as_double((o * 50 + row) * 40 + k));
    }
}

TEST(Gather, OutOfRangeIndexNamesIndexAxisAndDim) {
  const Tensor x = filled(DType::Float32, {3, 2}, 1);
  expect_error<InvalidArgument>(
      [&] {
        run_node(gather_node(0), {x, Tensor::from_vector<int64_t>({2, 2}, {0, 1, 3, 0})}, 13);
      },
      "node 'g' (Gather): index 3 (at [1, 0] of indices int64[2, 2]) is out of range for axis 0 of data float[3, 2], "
      "whose size is 3 (valid: -3..2)");
  EXPECT_THROW(run_node(gather_node(1), {x, Tensor::from_vector<int32_t>({1}, {-3})}, 13), InvalidArgument);
  EXPECT_THROW(run_node(gather_node(2), {x, Tensor::from_vector<int32_t>({1}, {0})}, 13), ShapeError);
  EXPECT_THROW(run_node(gather_node(0), {x, Tensor::from_vector<float>({1}, {0})}, 13), TypeError);
}

}  // namespace
}  // namespace kiln
