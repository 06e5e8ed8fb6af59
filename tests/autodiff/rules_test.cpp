// Finite-difference checks of every gradient rule, in float64 (<= 1e-6) and float32 (<= 1e-3).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

TEST(GradientRules, BinaryArithmeticWithBroadcastingBothWays) {
  for (const char* type : {"Add", "Sub", "Mul", "Div"}) {
    uint64_t seed = 10;
    for (auto [a, b] : std::vector<std::pair<Shape, Shape>>{
             {{2, 3}, {2, 3}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{4}, {2, 3, 4}}, {{}, {2, 2}}}) {
      const double lo = std::string(type) == "Div" ? 0.5 : -1.0;
      both({op(type, 2), {random_tensor(a, ++seed), random_tensor(b, ++seed, lo, 2.0)}, {0, 1}, 17, seed});
    }
  }
}

TEST(GradientRules, PowBothInputs) {
  both({op("Pow", 2), {random_tensor({2, 3}, 5, 0.5, 2.0), random_tensor({3}, 6, -1.5, 1.5)}, {0, 1}, 17, 5});
}

TEST(GradientRules, UnaryMath) {
  uint64_t seed = 20;
  for (const char* type : {"Neg", "Exp", "Abs", "Erf", "Relu", "Sigmoid", "Tanh", "Softplus", "Identity"})
    both({op(type, 1), {random_tensor({3, 4}, ++seed, -2.0, 2.0)}, {0}, 17, seed});
  for (const char* type : {"Log", "Sqrt", "Reciprocal"})
    both({op(type, 1), {random_tensor({3, 4}, ++seed, 0.5, 2.0)}, {0}, 17, seed});
  both({op("LeakyRelu", 1, 1, {{"alpha", Attribute::of_float(0.2f)}}), {random_tensor({3, 4}, ++seed)}, {0}, 17, seed});
  both({op("Elu", 1, 1, {{"alpha", Attribute::of_float(0.7f)}}), {random_tensor({3, 4}, ++seed)}, {0}, 17, seed});
}

// Piecewise-constant ops: a zero gradient, as PyTorch's (the finite differences are zero away from
// the steps, where the inputs are).
TEST(GradientRules, FloorCeilRoundAndSignHaveZeroGradients) {
  uint64_t seed = 40;
  for (const char* type : {"Floor", "Ceil", "Round", "Sign"})
    both({op(type, 1), {floats({-1.75, -0.4, 0.3, 1.2, 1.65, 2.35})}, {0}, 17, ++seed});
}

TEST(GradientRules, ClipWithBoundsAsInputs) {
  GradCheck c{op("Clip", 3),
              {random_tensor({4, 5}, 30, -2.0, 2.0), Tensor::scalar<double>(-0.5), Tensor::scalar<double>(0.7)},
              {0},
              17,
              30};
  both(c);
}

TEST(GradientRules, VariadicSumMeanMax) {
  for (const char* type : {"Sum", "Mean", "Max", "Min"})
    both({op(type, 3),
          {random_tensor({2, 3}, 40), random_tensor({3}, 41), random_tensor({2, 1}, 42)},
          {0, 1, 2},
          17,
          40});
}

TEST(GradientRules, MatMulShapes) {
  uint64_t seed = 50;
  for (auto [a, b] : std::vector<std::pair<Shape, Shape>>{{{3, 4}, {4, 5}},
                                                          {{2, 3, 4}, {4, 5}},
                                                          {{3, 4}, {2, 4, 5}},
                                                          {{2, 1, 3, 4}, {3, 4, 2}},
                                                          {{4}, {4, 5}},
                                                          {{3, 4}, {4}}})
    both({op("MatMul", 2), {random_tensor(a, ++seed), random_tensor(b, ++seed)}, {0, 1}, 17, seed});
}

TEST(GradientRules, FusedMatMulEveryTransposeAndBatchShape) {
  uint64_t seed = 60;
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1})
      for (auto [a, b] :
           std::vector<std::pair<Shape, Shape>>{{{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}}}) {
        if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
        if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
        Node n = op("FusedMatMul", 2, 1, {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}});
        n.domain = kKilnDomain;
        both({n, {random_tensor(a, ++seed), random_tensor(b, ++seed)}, {0, 1}, 17, seed});
      }
}

TEST(GradientRules, GemmAllTransposesAndBiasShapes) {
  uint64_t seed = 70;
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1})
      for (Shape c_shape : {Shape{5}, Shape{3, 5}, Shape{3, 1}, Shape{}}) {
        Shape a = ta ? Shape{4, 3} : Shape{3, 4};
        Shape b = tb ? Shape{5, 4} : Shape{4, 5};
        Node n = op("Gemm", 3, 1,
                    {{"transA", Attribute::of_int(ta)},
                     {"transB", Attribute::of_int(tb)},
                     {"alpha", Attribute::of_float(0.5f)},
                     {"beta", Attribute::of_float(1.5f)}});
        both({n,
              {random_tensor(a, ++seed), random_tensor(b, ++seed), random_tensor(c_shape, ++seed)},
              {0, 1, 2},
              17,
              seed});
      }
}

TEST(GradientRules, ShapeOps) {
  both({op("Reshape", 2), {random_tensor({2, 6}, 80), ints({3, -1})}, {0}, 17, 80});
  both({op("Flatten", 1, 1, {{"axis", Attribute::of_int(2)}}), {random_tensor({2, 3, 2}, 81)}, {0}, 17, 81});
  both({op("Squeeze", 2), {random_tensor({2, 1, 3}, 82), ints({1})}, {0}, 17, 82});
  both({op("Unsqueeze", 2), {random_tensor({2, 3}, 83), ints({0, 3})}, {0}, 17, 83});
  both({op("Transpose", 1, 1, {{"perm", Attribute::of_ints({2, 0, 1})}}), {random_tensor({2, 3, 4}, 84)}, {0}, 17, 84});
  both({op("Transpose", 1), {random_tensor({2, 3, 4}, 85)}, {0}, 17, 85});
  both({op("Concat", 3, 1, {{"axis", Attribute::of_int(1)}}),
        {random_tensor({2, 1}, 86), random_tensor({2, 3}, 87), random_tensor({2, 2}, 88)},
        {0, 1, 2},
        17,
        86});
  both({op("Split", 2, 2, {{"axis", Attribute::of_int(1)}}), {random_tensor({2, 5}, 89), ints({2, 3})}, {0}, 17, 89});
}

TEST(GradientRules, Reductions) {
  both({op("ReduceSum", 2, 1, {{"keepdims", Attribute::of_int(0)}}),
        {random_tensor({2, 3, 4}, 90), ints({0, 2})},
        {0},
        17,
        90});
  both({op("ReduceSum", 2), {random_tensor({2, 3, 4}, 91), ints({-1})}, {0}, 17, 91});
  both({op("ReduceSum", 1, 1, {{"keepdims", Attribute::of_int(0)}}), {random_tensor({2, 3}, 92)}, {0}, 17, 92});
  both({op("ReduceMean", 1, 1, {{"axes", Attribute::of_ints({1})}, {"keepdims", Attribute::of_int(0)}}),
        {random_tensor({2, 3, 4}, 93)},
        {0},
        17,
        93});
  both({op("ReduceMean", 1), {random_tensor({2, 3}, 94)}, {0}, 17, 94});
}

// Cast between float types hands the gradient back in the input's dtype. The checker's loss is in
// the output's dtype, so the cast targets double (the float64 check).
TEST(GradientRules, CastAndCastLikeBetweenFloatTypes) {
  check_gradient({op("Cast", 1, 1, {{"to", Attribute::of_int(dtype_to_onnx(DType::Float64))}}),
                  {random_tensor({3, 4}, 110)},
                  {0},
                  17,
                  110});
  check_gradient({op("CastLike", 2), {random_tensor({3, 4}, 111), random_tensor({1}, 112)}, {0}, 17, 111});
}

TEST(GradientRules, SoftmaxAndLogSoftmax) {
  for (int64_t axis : {-1, 1, 0}) {
    both({op("Softmax", 1, 1, {{"axis", Attribute::of_int(axis)}}),
          {random_tensor({2, 3, 4}, 100, -2, 2)},
          {0},
          17,
          100});
    both({op("LogSoftmax", 1, 1, {{"axis", Attribute::of_int(axis)}}),
          {random_tensor({2, 3, 4}, 101, -2, 2)},
          {0},
          17,
          101});
  }
}

}  // namespace
}  // namespace kiln::testing
