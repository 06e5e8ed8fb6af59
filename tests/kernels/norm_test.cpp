// BatchNormalization (inference) against the formula evaluated in double on random inputs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/kernel.h"

namespace kiln {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

Node bn_node(std::map<std::string, Attribute> attrs = {}, std::vector<std::string> outputs = {"y"}) {
  Node n;
  n.name = "bn";
  n.op_type = "BatchNormalization";
  n.inputs = {"x", "scale", "b", "mean", "var"};
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

TEST(BatchNormalization, MatchesFormulaForEveryRank) {
  uint32_t seed = 1;
  for (const Shape& s : {Shape{4, 3}, Shape{2, 3, 7}, Shape{2, 5, 4, 6}, Shape{1, 4, 2, 3, 5}}) {
    SCOPED_TRACE(to_string(s));
    const int64_t c = s[1];
    Tensor x = random_tensor(s, seed++, -3.f, 3.f), scale = random_tensor({c}, seed++),
           b = random_tensor({c}, seed++), mean = random_tensor({c}, seed++),
           var = random_tensor({c}, seed++, 0.1f, 2.f);
    const float eps = 1e-3f;
    Tensor y = run_node(bn_node({{"epsilon", Attribute::of_float(eps)}}), {x, scale, b, mean, var}, 15).at(0);
    ASSERT_EQ(y.shape(), s);
    const int64_t inner = x.numel() / (s[0] * c);
    double err = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t ch = (i / inner) % c;
      const double ref = scale.item_as_double(ch) * (x.item_as_double(i) - mean.item_as_double(ch)) /
                             std::sqrt(var.item_as_double(ch) + double(eps)) +
                         b.item_as_double(ch);
      err = std::max(err, std::abs(y.item_as_double(i) - ref));
    }
    EXPECT_LE(err, 1e-5);  // |ref| stays below ~15 here, so this is a relative 1e-6
  }
}

TEST(BatchNormalization, TrainingModeAndBadShapesAreNamed) {
  Tensor x = random_tensor({2, 3, 4}, 1), p = random_tensor({3}, 2);
  try {
    run_node(bn_node({{"training_mode", Attribute::of_int(1)}}), {x, p, p, p, p}, 15);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("training_mode=1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_node(bn_node({}, {"y", "running_mean", "running_var"}), {x, p, p, p, p}, 15), Unsupported);
  try {
    run_node(bn_node(), {x, p, random_tensor({4}, 3), p, p}, 15);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("B float[4] must be [3], one value per channel of X float[2, 3, 4]"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("node 'bn' (BatchNormalization)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
