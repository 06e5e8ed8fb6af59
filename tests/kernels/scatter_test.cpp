// GatherElements, GatherND, ScatterElements (and Scatter), ScatterND through run_node: the spec's
// examples by hand, an index-walk reference over every axis and dtype, reductions, and errors.
#include <gtest/gtest.h>

#include <functional>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

void expect_near_all(const Tensor& y, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y.item_as_double(static_cast<int64_t>(i)), want[i], tol) << i;
}

Attribute axis(int64_t a) { return Attribute::of_int(a); }

TEST(GatherElements, SpecExamplesByHand) {
  const Tensor d = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  const Tensor y = run_node(make_node("GatherElements", 2, {{"axis", axis(1)}}),
                            {d, Tensor::from_vector<int64_t>({2, 2}, {0, 0, 1, 0})}, 13)[0];
  EXPECT_EQ(as_doubles(y), (std::vector<double>{1, 1, 4, 3}));
  const Tensor d3 = Tensor::from_vector<int32_t>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Tensor z = run_node(make_node("GatherElements", 2, {{"axis", axis(0)}}),
                            {d3, Tensor::from_vector<int32_t>({2, 3}, {1, 2, 0, 2, 0, -3})}, 13)[0];
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(as_doubles(z), (std::vector<double>{4, 8, 3, 7, 2, 3}));
}

TEST(GatherElements, MatchesIndexWalkOnEveryAxisAndDtype) {
  const Shape ds = {3, 4, 5}, is = {2, 4, 3};  // indices smaller than data off the axis
  for (DType dt : kAllDTypes)
    for (int64_t ax = 0; ax < 3; ++ax) {
      const Tensor d = filled(dt, ds);
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < numel(is); ++i) idx.push_back((i * 5 + 1) % ds[ax] - (i % 2 ? ds[ax] : 0));
      const Tensor y = run_node(make_node("GatherElements", 2, {{"axis", axis(ax)}}),
                                {d, Tensor::from_vector<int64_t>(is, idx)}, 13)[0];
      ASSERT_EQ(y.shape(), is);
      for (int64_t a = 0; a < is[0]; ++a)
        for (int64_t b = 0; b < is[1]; ++b)
          for (int64_t c = 0; c < is[2]; ++c) {
            const int64_t flat = (a * is[1] + b) * is[2] + c;
            int64_t pos[3] = {a, b, c};
            pos[ax] = (idx[flat] + ds[ax]) % ds[ax];
            ASSERT_EQ(y.item_as_double(flat), d.item_as_double((pos[0] * ds[1] + pos[1]) * ds[2] + pos[2]))
                << dtype_name(dt) << " axis " << ax;
          }
    }
}

TEST(GatherElements, RejectsOutOfRangeIndexAndOversizedIndices) {
  const Tensor d = Tensor::zeros(DType::Float32, {2, 3});
  expect_error<InvalidArgument>(
      [&] {
        run_node(make_node("GatherElements", 2, {{"axis", axis(1)}}), {d, Tensor::from_vector<int64_t>({1, 2}, {0, 3})},
                 13);
      },
      "index 3 (at [0, 1] of indices int64[1, 2]) is out of range for axis 1 of data float[2, 3] of size 3");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("GatherElements", 2), {d, Tensor::zeros(DType::Int64, {1, 4})}, 13);
      },
      "indices [1, 4] is larger than data [2, 3] in dimension 1");
}

TEST(GatherND, SpecExamplesByHand) {
  const Tensor d = Tensor::from_vector<int32_t>({2, 2}, {0, 1, 2, 3});
  EXPECT_EQ(
      as_doubles(run_node(make_node("GatherND", 2), {d, Tensor::from_vector<int64_t>({2, 2}, {0, 0, 1, 1})}, 13)[0]),
      (std::vector<double>{0, 3}));
  const Tensor rows = run_node(make_node("GatherND", 2), {d, Tensor::from_vector<int64_t>({2, 1}, {1, 0})}, 13)[0];
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(as_doubles(rows), (std::vector<double>{2, 3, 0, 1}));
  const Tensor d3 = Tensor::from_vector<float>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor t =
      run_node(make_node("GatherND", 2), {d3, Tensor::from_vector<int64_t>({2, 1, 2}, {0, 1, 1, 0})}, 13)[0];
  EXPECT_EQ(t.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(as_doubles(t), (std::vector<double>{2, 3, 4, 5}));
  // batch_dims = 1: each batch indexes its own slice; -1 counts from the end.
  const Tensor b = run_node(make_node("GatherND", 2, {{"batch_dims", axis(1)}}),
                            {d3, Tensor::from_vector<int64_t>({2, 1}, {1, -2})}, 13)[0];
  EXPECT_EQ(b.shape(), (Shape{2, 2}));
  EXPECT_EQ(as_doubles(b), (std::vector<double>{2, 3, 4, 5}));
  const Tensor full = run_node(make_node("GatherND", 2, {{"batch_dims", axis(1)}}),
                               {d3, Tensor::from_vector<int64_t>({2, 2, 2}, {0, 1, 1, 1, 1, 0, 0, 0})}, 13)[0];
  EXPECT_EQ(full.shape(), (Shape{2, 2}));
  EXPECT_EQ(as_doubles(full), (std::vector<double>{1, 3, 6, 4}));
}

TEST(GatherND, RejectsTooLongTuplesAndOutOfRange) {
  const Tensor d = Tensor::zeros(DType::Float32, {2, 2});
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("GatherND", 2), {d, Tensor::zeros(DType::Int64, {1, 3})}, 13);
      },
      "the last dimension of indices [1, 3] is 3, but must be in [1, 2] for data [2, 2] with batch_dims 0");
  expect_error<InvalidArgument>(
      [&] {
        run_node(make_node("GatherND", 2), {d, Tensor::from_vector<int64_t>({1, 2}, {0, -3})}, 13);
      },
      "index -3 (at [0, 1] of indices int64[1, 2]) is out of range for axis 1 of data [2, 2] of size 2");
}

TEST(ScatterElements, SpecExampleAndDeprecatedScatter) {
  const Tensor d = Tensor::zeros(DType::Float32, {3, 3});
  const Tensor idx = Tensor::from_vector<int64_t>({2, 3}, {1, 0, 2, 0, 2, 1});
  const Tensor upd = Tensor::from_vector<float>({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f});
  const std::vector<double> want = {2.0, 1.1, 0, 1.0, 0, 2.2, 0, 2.1, 1.2};
  expect_near_all(run_node(make_node("ScatterElements", 3), {d, idx, upd}, 13)[0], want);
  expect_near_all(run_node(make_node("Scatter", 3), {d, idx, upd}, 10)[0], want);
  // Axis 1 with a negative index.
  const Tensor row = Tensor::from_vector<int64_t>({1, 5}, {1, 2, 3, 4, 5});
  const Tensor y = run_node(
      make_node("ScatterElements", 3, {{"axis", axis(1)}}),
      {row, Tensor::from_vector<int64_t>({1, 2}, {1, -2}), Tensor::from_vector<int64_t>({1, 2}, {11, 22})}, 13)[0];
  EXPECT_EQ(as_doubles(y), (std::vector<double>{1, 11, 3, 22, 5}));
}

TEST(ScatterElements, ReductionsApplyRepeatsInOrder) {
  const Tensor d = Tensor::from_vector<float>({1, 5}, {1, 2, 3, 4, 5});
  const Tensor idx = Tensor::from_vector<int64_t>({1, 3}, {1, 1, 3});
  const Tensor upd = Tensor::from_vector<float>({1, 3}, {1.5f, 2.5f, -7});
  auto run = [&](const char* r, int64_t opset) {
    return run_node(make_node("ScatterElements", 3, {{"axis", axis(1)}, {"reduction", Attribute::of_string(r)}}),
                    {d, idx, upd}, opset)[0];
  };
  expect_near_all(run("add", 16), {1, 6, 3, -3, 5});
  expect_near_all(run("mul", 16), {1, 7.5, 3, -28, 5});
  expect_near_all(run("max", 18), {1, 2.5, 3, 4, 5});
  expect_near_all(run("min", 18), {1, 1.5, 3, -7, 5});
  expect_near_all(run("none", 16), {1, 2.5, 3, -7, 5});  // last write wins
  // Integer add is exact.
  const Tensor di = Tensor::from_vector<int64_t>({3}, {int64_t{1} << 60, 0, 0});
  const Tensor yi =
      run_node(make_node("ScatterElements", 3, {{"reduction", Attribute::of_string("add")}}),
               {di, Tensor::from_vector<int64_t>({2}, {0, 0}), Tensor::from_vector<int64_t>({2}, {1, 2})}, 16)[0];
  EXPECT_EQ(yi.data<int64_t>()[0], (int64_t{1} << 60) + 3);
}

TEST(ScatterElements, RejectsReductionBeforeItsOpsetAndMismatchedUpdates) {
  const Tensor d = Tensor::zeros(DType::Float32, {3});
  const Tensor idx = Tensor::from_vector<int64_t>({1}, {0});
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("ScatterElements", 3, {{"reduction", Attribute::of_string("max")}}),
                 {d, idx, Tensor::zeros(DType::Float32, {1})}, 16);
      },
      "reduction 'max' is not valid at opset 16");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("ScatterElements", 3), {d, idx, Tensor::zeros(DType::Float32, {2})}, 13);
      },
      "updates [2] must have the shape of indices [1]");
  expect_error<InvalidArgument>(
      [&] {
        run_node(make_node("ScatterElements", 3),
                 {d, Tensor::from_vector<int64_t>({1}, {3}), Tensor::zeros(DType::Float32, {1})}, 13);
      },
      "index 3 (at [0] of indices int64[1]) is out of range for axis 0 of data float[3] of size 3");
}

TEST(ScatterND, SpecExamplesAndReductions) {
  const Tensor d = Tensor::from_vector<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor idx = Tensor::from_vector<int64_t>({4, 1}, {4, 3, 1, 7});
  const Tensor upd = Tensor::from_vector<float>({4}, {9, 10, 11, 12});
  expect_near_all(run_node(make_node("ScatterND", 3), {d, idx, upd}, 13)[0], {1, 11, 3, 10, 9, 6, 7, 12});
  // Slices: data [2, 2, 2], tuples of length 1 replace [2, 2] blocks; -1 counts from the end.
  const Tensor d3 = filled(DType::Int32, {2, 2, 2});
  const Tensor y3 = run_node(
      make_node("ScatterND", 3),
      {d3, Tensor::from_vector<int64_t>({1, 1}, {-1}), Tensor::from_vector<int32_t>({1, 2, 2}, {-1, -2, -3, -4})},
      13)[0];
  std::vector<double> want = as_doubles(d3);
  for (int i = 0; i < 4; ++i) want[4 + i] = -1 - i;
  EXPECT_EQ(as_doubles(y3), want);
  // Repeated tuples with add and mul.
  const Tensor rep = Tensor::from_vector<int64_t>({3, 1}, {0, 0, 2});
  const Tensor u = Tensor::from_vector<float>({3}, {2, 3, 4});
  expect_near_all(run_node(make_node("ScatterND", 3, {{"reduction", Attribute::of_string("add")}}), {d, rep, u}, 16)[0],
                  {6, 2, 7, 4, 5, 6, 7, 8});
  expect_near_all(run_node(make_node("ScatterND", 3, {{"reduction", Attribute::of_string("mul")}}), {d, rep, u}, 16)[0],
                  {6, 2, 12, 4, 5, 6, 7, 8});
}

TEST(ScatterND, RejectsUpdatesOfTheWrongShape) {
  const Tensor d = Tensor::zeros(DType::Float32, {4, 3});
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("ScatterND", 3),
                 {d, Tensor::zeros(DType::Int64, {2, 1}), Tensor::zeros(DType::Float32, {2})}, 13);
      },
      "updates [2] must have shape [2, 3]");
}

}  // namespace
}  // namespace kiln
