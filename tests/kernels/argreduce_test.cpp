// ArgMax, ArgMin, TopK and CumSum through run_node against references computed here: every axis,
// keepdims, ties (first or last index), NaN, empty inputs and rejected attributes and inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

Node make_node(const std::string& op, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {},
               std::vector<std::string> outputs = {"Y"}) {
  Node n;
  n.name = "a";
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

// Small integers as floats so that ties are common.
Tensor tie_heavy(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, 4);
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(d(gen));
  return t;
}

// (outer, len, inner) of a shape split at axis.
std::array<int64_t, 3> split(const Shape& s, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) inner *= s[i];
  return {outer, s[static_cast<size_t>(axis)], inner};
}

TEST(ArgReduce, EveryAxisWithTiesFirstAndLast) {
  const Tensor x = tie_heavy({3, 4, 5}, 1);
  for (const std::string op : {"ArgMax", "ArgMin"})
    for (int64_t axis = -3; axis < 3; ++axis)
      for (int64_t keep : {0, 1})
        for (int64_t last : {0, 1}) {
          const Node n = make_node(op, {"X"},
                                   {{"axis", Attribute::of_int(axis)},
                                    {"keepdims", Attribute::of_int(keep)},
                                    {"select_last_index", Attribute::of_int(last)}});
          const Tensor y = run_node(n, {x}, 13).at(0);
          const int64_t a = axis < 0 ? axis + 3 : axis;
          Shape want_shape = x.shape();
          if (keep) want_shape[static_cast<size_t>(a)] = 1;
          else want_shape.erase(want_shape.begin() + a);
          ASSERT_EQ(y.shape(), want_shape);
          ASSERT_EQ(y.dtype(), DType::Int64);
          const auto [outer, len, inner] = split(x.shape(), a);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t j = 0; j < inner; ++j) {
              int64_t best = 0;
              for (int64_t k = 1; k < len; ++k) {
                const float v = x.data<float>()[(o * len + k) * inner + j],
                            b = x.data<float>()[(o * len + best) * inner + j];
                const bool better = op == "ArgMax" ? v > b : v < b;
                if (better || (last && v == b)) best = k;
              }
              ASSERT_EQ(y.data<int64_t>()[o * inner + j], best) << op << " axis " << axis << " last " << last;
            }
        }
}

TEST(ArgReduce, NaNIsPickedIntegersAndErrors) {
  const Tensor x = Tensor::from_vector<float>({5}, {1.f, std::nanf(""), 9.f, std::nanf(""), -3.f});
  const Node amax = make_node("ArgMax", {"X"}, {{"keepdims", Attribute::of_int(0)}});
  const Node amin_last =
      make_node("ArgMin", {"X"}, {{"keepdims", Attribute::of_int(0)}, {"select_last_index", Attribute::of_int(1)}});
  EXPECT_EQ(run_node(amax, {x}, 13).at(0).data<int64_t>()[0], 1);
  EXPECT_EQ(run_node(amin_last, {x}, 13).at(0).data<int64_t>()[0], 3);
  EXPECT_EQ(run_node(amax, {Tensor::from_vector<int64_t>({3}, {INT64_MIN, INT64_MAX, INT64_MAX})}, 13)
                .at(0)
                .data<int64_t>()[0],
            1);
  // Empty along a kept axis: an empty result, not an error.
  EXPECT_EQ(run_node(amax, {Tensor::zeros(DType::Float32, {3, 0})}, 13).at(0).shape(), (Shape{0}));
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("ArgMax", {"X"}, {{"axis", Attribute::of_int(1)}}), {Tensor::zeros(DType::Float32, {2, 0})},
                 13);
      },
      "input 'X' [2, 0] has no elements along axis 1");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("ArgMin", {"X"}, {{"axis", Attribute::of_int(2)}}), {Tensor::zeros(DType::Float32, {2, 3})},
                 13);
      },
      "attribute axis of input 'X' [2, 3]");
  EXPECT_THROW(run_node(amax, {Tensor::zeros(DType::Bool, {2})}, 13), Unsupported);
}

Tensor k_tensor(int64_t k) { return Tensor::from_vector<int64_t>({1}, {k}); }

TEST(TopK, LargestAndSmallestOnEveryAxisWithTies) {
  const Tensor x = tie_heavy({4, 6, 5}, 2);
  for (int64_t largest : {0, 1})
    for (int64_t axis = 0; axis < 3; ++axis)
      for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{3}, x.shape()[static_cast<size_t>(axis)]}) {
        const Node n =
            make_node("TopK", {"X", "K"}, {{"axis", Attribute::of_int(axis)}, {"largest", Attribute::of_int(largest)}},
                      {"V", "I"});
        const auto out = run_node(n, {x, k_tensor(k)}, 11);
        Shape want_shape = x.shape();
        want_shape[static_cast<size_t>(axis)] = k;
        ASSERT_EQ(out.at(0).shape(), want_shape);
        ASSERT_EQ(out.at(1).shape(), want_shape);
        const auto [outer, len, inner] = split(x.shape(), axis);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            // Reference: a stable sort by value keeps equal values in index order, as ONNX's reference.
            std::vector<int64_t> idx(static_cast<size_t>(len));
            std::iota(idx.begin(), idx.end(), 0);
            const auto at = [&, len = len, inner = inner](int64_t m) {
              return x.data<float>()[(o * len + m) * inner + j];
            };
            std::stable_sort(idx.begin(), idx.end(),
                             [&](int64_t a, int64_t b) { return largest ? at(a) > at(b) : at(a) < at(b); });
            for (int64_t m = 0; m < k; ++m) {
              const int64_t pos = (o * k + m) * inner + j;
              ASSERT_EQ(out[1].data<int64_t>()[pos], idx[static_cast<size_t>(m)]) << "axis " << axis << " k " << k;
              ASSERT_EQ(out[0].data<float>()[pos], at(idx[static_cast<size_t>(m)]));
            }
          }
      }
}

TEST(TopK, NaNIsLargestAndOpset1ReadsKAttribute) {
  const Tensor x = Tensor::from_vector<double>({4}, {1.0, std::nan(""), 3.0, -1.0});
  const auto big = run_node(make_node("TopK", {"X", "K"}, {}, {"V", "I"}), {x, k_tensor(2)}, 11);
  EXPECT_EQ(big[1].to_int64_vector(), (std::vector<int64_t>{1, 2}));
  const auto small =
      run_node(make_node("TopK", {"X", "K"}, {{"largest", Attribute::of_int(0)}}, {"V", "I"}), {x, k_tensor(4)}, 11);
  EXPECT_EQ(small[1].to_int64_vector(), (std::vector<int64_t>{3, 0, 2, 1}));
  const auto v1 = run_node(make_node("TopK", {"X"}, {{"k", Attribute::of_int(1)}}, {"V", "I"}),
                           {Tensor::from_vector<int32_t>({3}, {5, 9, 2})}, 1);
  EXPECT_EQ(v1[0].to_int64_vector(), (std::vector<int64_t>{9}));
  EXPECT_EQ(v1[1].to_int64_vector(), (std::vector<int64_t>{1}));
}

TEST(TopK, RejectsBadK) {
  const Node n = make_node("TopK", {"X", "K"}, {}, {"V", "I"});
  expect_error<ShapeError>(
      [&] {
        run_node(n, {Tensor::zeros(DType::Float32, {2, 3}), k_tensor(4)}, 11);
      },
      "K = 4 is outside [0, 3], the size of axis 1 of input 'X' [2, 3]");
  expect_error<TypeError>(
      [&] {
        run_node(n, {Tensor::zeros(DType::Float32, {3}), Tensor::from_vector<int32_t>({1}, {1})}, 11);
      },
      "K 'K' must be a 1-D int64 tensor of one element, got int32[1]");
  EXPECT_THROW(run_node(n, {Tensor::zeros(DType::Float32, {3}), k_tensor(-1)}, 11), ShapeError);
}

TEST(CumSum, EveryAxisExclusiveAndReverse) {
  const Tensor x = tie_heavy({3, 4, 300}, 3);
  for (int64_t axis = -3; axis < 3; ++axis)
    for (int64_t excl : {0, 1})
      for (int64_t rev : {0, 1}) {
        const Node n = make_node("CumSum", {"X", "axis"},
                                 {{"exclusive", Attribute::of_int(excl)}, {"reverse", Attribute::of_int(rev)}});
        const Tensor y = run_node(n, {x, Tensor::scalar<int64_t>(axis)}, 14).at(0);
        ASSERT_EQ(y.shape(), x.shape());
        const auto [outer, len, inner] = split(x.shape(), axis < 0 ? axis + 3 : axis);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            double acc = 0;
            for (int64_t step = 0; step < len; ++step) {
              const int64_t k = rev ? len - 1 - step : step;
              const int64_t pos = (o * len + k) * inner + j;
              if (!excl) acc += x.data<float>()[pos];
              ASSERT_EQ(y.data<float>()[pos], acc) << "axis " << axis << " excl " << excl << " rev " << rev;
              if (excl) acc += x.data<float>()[pos];
            }
          }
      }
}

TEST(CumSum, IntegersAndErrors) {
  const Node n = make_node("CumSum", {"X", "axis"});
  const Tensor y =
      run_node(n, {Tensor::from_vector<int32_t>({4}, {INT32_MAX, 1, -5, 2}), Tensor::from_vector<int32_t>({1}, {0})},
               14)
          .at(0);
  EXPECT_EQ(y.to_int64_vector(),
            (std::vector<int64_t>{INT32_MAX, INT32_MIN, INT32_MIN - int64_t{5} + (int64_t{1} << 32), INT32_MAX - 2}));
  expect_error<ShapeError>(
      [&] {
        run_node(n, {Tensor::zeros(DType::Float32, {2, 3}), Tensor::scalar<int64_t>(2)}, 14);
      },
      "axis 'axis' for input 'X' [2, 3]");
  EXPECT_THROW(run_node(n, {Tensor::zeros(DType::Float32, {2}), Tensor::scalar<float>(0.f)}, 14), TypeError);
  EXPECT_THROW(run_node(n, {Tensor::zeros(DType::Int8, {2}), Tensor::scalar<int64_t>(0)}, 14), Unsupported);
}

}  // namespace
}  // namespace kiln
