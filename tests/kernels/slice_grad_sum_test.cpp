// ai.kiln.SliceGradSum against the sum of the SliceGrads it stands for, computed here: parts that
// partition the axis (copied side by side), parts that overlap and leave some of it out (added
// into zeros), negative and clamped bounds, float64; and the inputs it refuses, by message.
#include <gtest/gtest.h>

#include <limits>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

struct Piece {
  int64_t start, end;
};

Node sum_node(size_t parts) {
  Node n;
  n.name = "join";
  n.domain = kKilnDomain;
  n.op_type = "SliceGradSum";
  for (size_t k = 0; k < parts; ++k)
    for (const char* v : {"dY", "start", "end"}) n.inputs.push_back(v + std::to_string(k));
  n.inputs.push_back("shape");
  n.inputs.push_back("axis");
  n.outputs = {"dX"};
  return n;
}

// dX of shape [2, 7, 3] from parts on axis 1 (given as `axis`), each a slice [start, end) after
// Slice's clamping (`clamped`), against the sum written out here.
void check(DType dt, const std::vector<Piece>& pieces, const std::vector<Piece>& clamped, int64_t axis) {
  const Shape shape{2, 7, 3};
  std::vector<Tensor> in;
  std::vector<double> want(42, 0.0);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const int64_t len = clamped[k].end - clamped[k].start;
    const Tensor dy = random_real(dt, {2, len, 3}, static_cast<uint32_t>(k + 1), -1.0, 1.0);
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t j = 0; j < len; ++j)
        for (int64_t c = 0; c < 3; ++c)
          want[static_cast<size_t>((a * 7 + clamped[k].start + j) * 3 + c)] += dy.item_as_double((a * len + j) * 3 + c);
    in.insert(in.end(), {dy, ints({pieces[k].start}), ints({pieces[k].end})});
  }
  in.insert(in.end(), {ints(shape), ints({axis})});
  const Tensor got = run_node(sum_node(pieces.size()), in, 17).at(0);
  ASSERT_EQ(got.shape(), shape);
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.item_as_double(i), want[static_cast<size_t>(i)], dt == DType::Float32 ? 1e-6 : 1e-15) << i;
}

TEST(SliceGradSum, IsTheSumOfTheSliceGradients) {
  const int64_t end = std::numeric_limits<int64_t>::max();
  for (DType dt : {DType::Float32, DType::Float64}) {
    check(dt, {{4, 7}, {0, 2}, {2, 4}}, {{4, 7}, {0, 2}, {2, 4}}, 1);       // a partition, unsorted
    check(dt, {{0, 5}, {3, -1}, {-2, end}}, {{0, 5}, {3, 6}, {5, 7}}, -2);  // overlaps, negative bounds
    check(dt, {{1, 3}, {5, 100}}, {{1, 3}, {5, 7}}, 1);                     // gaps, clamped
  }
}

TEST(SliceGradSum, RefusesWhatIsNotASumOfSlices) {
  const Tensor dy = Tensor::zeros(DType::Float32, {2, 3, 3});
  const Tensor shape = ints({2, 7, 3});
  expect_error<ShapeError>(
      [&] {
        run_node(sum_node(1), {dy, ints({0}), ints({4}), shape, ints({1})}, 17);
      },
      "dY of part 0 is float [2, 3, 3]; the slice [0, 4) of [2, 7, 3] on axis 1 is float [2, 4, 3]");
  expect_error<ShapeError>(
      [&] {
        run_node(sum_node(1), {dy, ints({0}), ints({3}), shape, ints({3})}, 17);
      },
      "axis [3] must be one axis of shape [2, 7, 3]");
  expect_error<ShapeError>(
      [&] {
        run_node(sum_node(1), {dy, ints({0, 1}), ints({3}), shape, ints({1})}, 17);
      },
      "start [0, 1] and end [3] of part 0 must have one element each");
  Node short_node = sum_node(1);
  short_node.inputs.pop_back();
  expect_error<InvalidModel>(
      [&] {
        run_node(short_node, {dy, ints({0}), ints({3}), shape}, 17);
      },
      "SliceGradSum takes (dY, start, end) per part, then shape and axis: 4 inputs");
}

}  // namespace
}  // namespace kiln
