// Issue 16, F1: models whose shapes wrap int64 (Expand or ConstantOfShape to [2^32, 2^32], a
// Reshape to [16, 2^60 + 5] that wraps back to 80 elements) are ShapeErrors naming the node at plan
// time: never a crash, leftover heap memory in an output, or a sum over a "empty" tensor.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "kiln/error.h"
#include "kiln/session.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

constexpr int64_t k2to32 = int64_t{1} << 32;

Session session_of(const std::string& op, const Shape& target, const Shape& input_shape) {
  GraphBuilder b("bad", 1);
  const std::string x = b.input("x", DType::Float32, input_shape);
  const std::string s =
      b.initializer("target", Tensor::from_vector<int64_t>({static_cast<int64_t>(target.size())}, target));
  const std::string y = op == "ConstantOfShape" ? b.op(op, {s}, {}, "make") : b.op(op, {x, s}, {}, "make");
  b.output(b.op("ReduceSum", {y}, {{"keepdims", Attribute::of_int(0)}}), "y", DType::Float32, {});
  return Session(b.build());
}

TEST(BadInputF1, ExpandToTwoTo64ElementsIsAShapeErrorNamingTheNode) {
  Session s = session_of("Expand", {k2to32, k2to32}, {1});
  expect_error<ShapeError>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {1})}});
      },
      {"node 'make' (Expand)", "[4294967296, 4294967296]", "64-bit count"});
}

TEST(BadInputF1, ConstantOfShapeToTwoTo64ElementsIsAShapeError) {
  Session s = session_of("ConstantOfShape", {k2to32, k2to32}, {1});
  expect_error<ShapeError>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {1})}});
      },
      {"node 'make' (ConstantOfShape)", "64-bit count"});
}

TEST(BadInputF1, AReshapeWhoseProductWrapsToTheInputSizeIsAShapeError) {
  // 16 * (2^60 + 5) = 80 modulo 2^64: unchecked, it passes for a reshape of 80 elements.
  Session s = session_of("Reshape", {16, (int64_t{1} << 60) + 5}, {80});
  expect_error<ShapeError>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {80})}});
      },
      {"node 'make' (Reshape)", "target's element count"});
}

TEST(BadInputF8, PlanningFromShapesAllocatesNothing) {
  // kiln inspect --training --dim batch=N used to allocate the inputs and the arena it reports.
  GraphBuilder b("wide", 1);
  const std::string x = b.input("x", DType::Float32, {-1, 4});
  b.output(b.op("Relu", {b.op("Relu", {x})}), "y", DType::Float32, {-1, 4});
  Session s(b.build());
  const int64_t batch = int64_t{1} << 40;  // 16 TiB per value: no machine here holds it
  const PlanStats stats = s.plan_shapes({{"x", TensorMeta{DType::Float32, {batch, 4}, false, Tensor()}}});
  EXPECT_EQ(stats.peak_bytes, static_cast<size_t>(batch) * 16);  // the two Relus share one buffer
  expect_error<ShapeError>(
      [&] {
        s.plan_shapes({{"x", TensorMeta{DType::Float32, {int64_t{1} << 62, 4}, false, Tensor()}}});
      },
      "64-bit count");
}

}  // namespace
}  // namespace kiln
