// Range, Trilu, EyeLike, OneHot, NonZero through run_node (hand-computed values and index-rule
// references), and NonZero/Range through a Session whose inputs are fed at run time, so that
// their shapes are inferred from the data.
#include <gtest/gtest.h>

#include <functional>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "kiln/session.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

template <class T>
Tensor range(T s, T l, T d) {
  return run_node(make_node("Range", 3), {Tensor::scalar<T>(s), Tensor::scalar<T>(l), Tensor::scalar<T>(d)}, 11)[0];
}

TEST(Range, CountsAndValuesPerDtype) {
  EXPECT_EQ(as_doubles(range<float>(1, 5, 2)), (std::vector<double>{1, 3}));
  EXPECT_EQ(as_doubles(range<int32_t>(10, 6, -3)), (std::vector<double>{10, 7}));
  EXPECT_EQ(as_doubles(range<int64_t>(0, 5, 1)), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(as_doubles(range<int16_t>(-3, 4, 3)), (std::vector<double>{-3, 0, 3}));
  EXPECT_EQ(range<int64_t>(5, 0, 1).shape(), (Shape{0}));  // wrong direction: empty
  const Tensor d = range<double>(0.5, 1.0, 0.125);
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_EQ(as_doubles(d), (std::vector<double>{0.5, 0.625, 0.75, 0.875}));
  // ceil(2.5 / 1) = 3 elements even though the last passes nothing.
  EXPECT_EQ(as_doubles(range<float>(0, 2.5f, 1)), (std::vector<double>{0, 1, 2}));
}

TEST(Range, RejectsZeroDeltaAndMixedDtypes) {
  expect_error<InvalidArgument>([] { range<int64_t>(0, 4, 0); }, "delta is 0 (start 0, limit 4)");
  expect_error<TypeError>(
      [] {
        run_node(make_node("Range", 3), {Tensor::scalar<float>(0), Tensor::scalar<double>(3), Tensor::scalar<float>(1)},
                 11);
      },
      "start, limit and delta must share a dtype: start is float, input 1 is double");
}

TEST(Trilu, UpperAndLowerWithKAgainstTheIndexRule) {
  Tensor x = Tensor::empty(DType::Float32, {2, 3, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  for (int upper = 0; upper < 2; ++upper)
    for (int64_t k : {-4, -1, 0, 2, 5}) {
      Node n = make_node("Trilu", 2, {{"upper", Attribute::of_int(upper)}});
      const Tensor y = run_node(n, {x, Tensor::scalar<int64_t>(k)}, 14)[0];
      ASSERT_EQ(y.shape(), x.shape());
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 4; ++j) {
            const int64_t at = (b * 3 + i) * 4 + j;
            const bool keep = upper ? j - i >= k : j - i <= k;
            ASSERT_EQ(y.item_as_double(at), keep ? x.item_as_double(at) : 0.0) << "upper " << upper << " k " << k;
          }
    }
  // Without k: the main diagonal, upper by default.
  const Tensor y = run_node(make_node("Trilu", 1), {Tensor::from_vector<int32_t>({2, 2}, {1, 2, 3, 4})}, 14)[0];
  EXPECT_EQ(as_doubles(y), (std::vector<double>{1, 2, 0, 4}));
}

TEST(Trilu, RejectsRankOne) {
  expect_error<ShapeError>([] { run_node(make_node("Trilu", 1), {Tensor::zeros(DType::Float32, {3})}, 14); },
                           "input must have rank >= 2, got [3]");
}

TEST(EyeLike, DiagonalsAndDtype) {
  const Tensor x = Tensor::zeros(DType::Int32, {3, 4});
  EXPECT_EQ(as_doubles(run_node(make_node("EyeLike", 1), {x}, 9)[0]),
            (std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}));
  const Tensor up =
      run_node(make_node("EyeLike", 1, {{"k", Attribute::of_int(2)}, {"dtype", Attribute::of_int(11)}}), {x}, 9)[0];
  EXPECT_EQ(up.dtype(), DType::Float64);
  EXPECT_EQ(as_doubles(up), (std::vector<double>{0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  const Tensor down = run_node(make_node("EyeLike", 1, {{"k", Attribute::of_int(-2)}}), {x}, 9)[0];
  EXPECT_EQ(as_doubles(down), (std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}));
}

TEST(EyeLike, RejectsNon2DAndUnknownDtype) {
  expect_error<ShapeError>(
      [] {
        run_node(make_node("EyeLike", 1), {Tensor::zeros(DType::Float32, {2, 2, 2})}, 9);
      },
      "input must be 2-D, got [2, 2, 2]");
  expect_error<Unsupported>(
      [] {
        run_node(make_node("EyeLike", 1, {{"dtype", Attribute::of_int(8)}}), {Tensor::zeros(DType::Float32, {2, 2})},
                 9);
      },
      "dtype 8 is not an ONNX element type Kiln supports");
}

TEST(OneHot, AxesNegativeAndOutOfRangeIndices) {
  const Tensor values = Tensor::from_vector<int32_t>({2}, {2, 5});
  // Default axis -1: [3] -> [3, 4]; -1 is class 3; 4 is out of range (all off).
  const Tensor y = run_node(make_node("OneHot", 3),
                            {Tensor::from_vector<int64_t>({3}, {0, -1, 4}), Tensor::scalar<float>(4), values}, 11)[0];
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_EQ(as_doubles(y), (std::vector<double>{5, 2, 2, 2, 2, 2, 2, 5, 2, 2, 2, 2}));
  // axis 0 on [2] indices: [depth, 2].
  const Tensor z = run_node(
      make_node("OneHot", 3, {{"axis", Attribute::of_int(0)}}),
      {Tensor::from_vector<int32_t>({2}, {1, 2}), Tensor::scalar<int64_t>(3), Tensor::from_vector<float>({2}, {0, 1})},
      11)[0];
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(as_doubles(z), (std::vector<double>{0, 0, 1, 0, 0, 1}));
}

TEST(OneHot, RejectsBadValuesAndDepth) {
  const Tensor idx = Tensor::from_vector<int64_t>({1}, {0});
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("OneHot", 3), {idx, Tensor::scalar<int64_t>(3), Tensor::zeros(DType::Float32, {3})}, 11);
      },
      "values must be [off_value, on_value] (shape [2]), got [3]");
  expect_error<InvalidArgument>(
      [&] {
        run_node(make_node("OneHot", 3), {idx, Tensor::scalar<float>(2.5f), Tensor::zeros(DType::Float32, {2})}, 11);
      },
      "depth must be a non-negative whole number, got 2.5");
}

TEST(NonZero, CoordinatesInRowMajorOrder) {
  const Tensor x = Tensor::from_vector<float>({2, 3}, {0, 1.5f, 0, -2, 0, 3});
  const Tensor y = run_node(make_node("NonZero", 1), {x}, 13)[0];
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(as_doubles(y), (std::vector<double>{0, 1, 1, 1, 0, 2}));
  const Tensor none = run_node(make_node("NonZero", 1), {Tensor::zeros(DType::Bool, {4})}, 13)[0];
  EXPECT_EQ(none.shape(), (Shape{1, 0}));
}

ValueInfo info(const std::string& name, DType dt, std::vector<int64_t> dims) {
  ValueInfo v;
  v.name = name;
  v.dtype = dt;
  v.has_type = v.has_shape = true;
  for (int64_t d : dims) v.dims.push_back(Dim{d, d < 0 ? "n" : ""});
  return v;
}

TEST(NonZero, ShapeFollowsTheDataFedAtRunTime) {
  // y = NonZero(x); r = Range(0, limit, 1): both shapes come from fed values.
  Model m;
  m.opsets = {{"", 17}};
  m.graph.inputs = {info("x", DType::Int32, {-1}), info("limit", DType::Int64, {})};
  m.graph.outputs = {info("y", DType::Int64, {1, -1}), info("r", DType::Int64, {-1})};
  Node nz = make_node("NonZero", 0);
  nz.inputs = {"x"};
  Node rg = make_node("Range", 0);
  rg.name = "range";
  rg.inputs = {"zero", "limit", "one"};
  rg.outputs = {"r"};
  m.graph.initializers["zero"] = Tensor::scalar<int64_t>(0);
  m.graph.initializers["one"] = Tensor::scalar<int64_t>(1);
  m.graph.nodes = {nz, rg};
  Session s(std::move(m));
  auto a = s.run({{"x", Tensor::from_vector<int32_t>({5}, {0, 3, 0, 0, 7})}, {"limit", Tensor::scalar<int64_t>(3)}});
  EXPECT_EQ(a["y"].shape(), (Shape{1, 2}));
  EXPECT_EQ(as_doubles(a["y"]), (std::vector<double>{1, 4}));
  EXPECT_EQ(as_doubles(a["r"]), (std::vector<double>{0, 1, 2}));
  auto b = s.run({{"x", Tensor::from_vector<int32_t>({5}, {1, 1, 1, 0, 1})}, {"limit", Tensor::scalar<int64_t>(1)}});
  EXPECT_EQ(as_doubles(b["y"]), (std::vector<double>{0, 1, 2, 4}));
  EXPECT_EQ(as_doubles(b["r"]), (std::vector<double>{0}));
}

}  // namespace
}  // namespace kiln
