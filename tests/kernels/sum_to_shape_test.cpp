// ai.kiln.SumToShapeOf against sums computed in the test: equal shapes (a copy), leading dims
// reduced (row sums), inner dims reduced (the general path), and a target that does not broadcast.
#include <gtest/gtest.h>

#include "kiln/autodiff.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

Tensor iota(Shape shape) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % 7) - 2.5f;
  return t;
}

Tensor sum_to(const Tensor& g, const Shape& like) {
  Node n;
  n.domain = kKilnDomain;
  n.op_type = "SumToShapeOf";
  n.inputs = {"g", "x"};
  n.outputs = {"y"};
  return run_node(n, {g, Tensor::zeros(DType::Float32, like)}, 1)[0];
}

// Reference: y[j] = sum of g[i] over every i whose broadcast index maps to j.
std::vector<double> reference(const Tensor& g, const Shape& like) {
  const Shape& gs = g.shape();
  const size_t lead = gs.size() - like.size();
  std::vector<double> y(static_cast<size_t>(numel(like)), 0.0);
  const Strides ls = contiguous_strides(like);
  std::vector<int64_t> idx(gs.size(), 0);
  for (int64_t k = 0; k < g.numel(); ++k) {
    int64_t off = 0;
    for (size_t d = lead; d < gs.size(); ++d) off += (like[d - lead] == 1 ? 0 : idx[d]) * ls[d - lead];
    y[static_cast<size_t>(off)] += g.data<float>()[k];
    for (size_t d = gs.size(); d-- > 0;) {
      if (++idx[d] < gs[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

TEST(SumToShapeOf, MatchesBroadcastSums) {
  for (const auto& [gs, like] : std::vector<std::pair<Shape, Shape>>{{{2, 3}, {2, 3}},
                                                                     {{4, 2, 3}, {3}},
                                                                     {{4, 2, 3}, {2, 3}},
                                                                     {{4, 2, 3}, {1, 1, 3}},
                                                                     {{2, 3, 5}, {2, 1, 5}},
                                                                     {{2, 3}, {2, 1}},
                                                                     {{3, 4}, {}},
                                                                     // row blocks per thread
                                                                     {{600, 300}, {300}},
                                                                     {{130, 7}, {7}},
                                                                     {{2, 64, 1000}, {1000}},
                                                                     // columns per thread: too few rows
                                                                     // for blocks, rows too wide
                                                                     {{40, 1000}, {1000}},
                                                                     {{130, 17000}, {17000}}}) {
    const Tensor g = iota(gs);
    const Tensor y = sum_to(g, like);
    ASSERT_EQ(y.shape(), like);
    const std::vector<double> want = reference(g, like);
    for (int64_t j = 0; j < y.numel(); ++j)
      EXPECT_NEAR(y.data<float>()[j], want[static_cast<size_t>(j)], 1e-4) << to_string(gs) << " -> " << to_string(like);
  }
}

TEST(SumToShapeOf, RejectsATargetThatDoesNotBroadcast) {
  expect_error<ShapeError>([&] { sum_to(iota({2, 3}), {4}); }, "gradient [2, 3] does not broadcast from target [4]");
}

}  // namespace
}  // namespace kiln
