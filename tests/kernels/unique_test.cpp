// Unique through run_node on the ONNX specification's examples (sorted, first-occurrence order,
// slices along an axis), with every optional output and with only Y.
#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;

std::vector<Tensor> unique(const Tensor& x, std::map<std::string, Attribute> attrs, size_t outputs = 4) {
  return run_node(make_node("Unique", 1, std::move(attrs), outputs), {x}, 11);
}

std::vector<double> values(const Tensor& t) { return as_doubles(t); }

TEST(Unique, SortedAndFirstOccurrenceOrderWithEveryOutput) {
  const Tensor x = Tensor::from_vector<float>({6}, {2, 1, 1, 3, 4, 3});
  auto out = unique(x, {});
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(values(out[1]), (std::vector<double>{1, 0, 3, 4}));
  EXPECT_EQ(values(out[2]), (std::vector<double>{1, 0, 0, 2, 3, 2}));
  EXPECT_EQ(values(out[3]), (std::vector<double>{2, 1, 2, 1}));
  out = unique(x, {{"sorted", Attribute::of_int(0)}});
  EXPECT_EQ(values(out[0]), (std::vector<double>{2, 1, 3, 4}));
  EXPECT_EQ(values(out[1]), (std::vector<double>{0, 1, 3, 4}));
  EXPECT_EQ(values(out[2]), (std::vector<double>{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(values(out[3]), (std::vector<double>{1, 2, 2, 1}));
  EXPECT_EQ(values(unique(x, {}, 1)[0]), (std::vector<double>{1, 2, 3, 4}));
}

TEST(Unique, SlicesAlongAnAxis) {
  const Tensor a = Tensor::from_vector<int64_t>({3, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 4});
  const auto out = unique(a, {{"axis", Attribute::of_int(0)}});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, 0, 0, 2, 3, 4}));
  EXPECT_EQ(values(out[1]), (std::vector<double>{0, 2}));
  EXPECT_EQ(values(out[2]), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(values(out[3]), (std::vector<double>{2, 1}));
  // Columns: [1,1,2], [0,0,3], [0,0,4] are distinct; sorted lexicographically: col 1, col 2, col 0.
  const auto cols = unique(a, {{"axis", Attribute::of_int(-1)}});
  EXPECT_EQ(values(cols[0]), (std::vector<double>{0, 0, 1, 0, 0, 1, 3, 4, 2}));
  EXPECT_EQ(values(cols[2]), (std::vector<double>{2, 0, 1}));
}

}  // namespace
}  // namespace kiln
