// Reshape, Flatten, Squeeze, Unsqueeze, Identity, Shape, Size through run_node, against
// hand-computed shapes and values.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

// A tensor of `dtype` holding 1, 2, 3, ... (bool: alternating), so every element is distinct
// where the dtype allows it.
Tensor counting(DType dtype, const Shape& shape) {
  Tensor t = Tensor::empty(dtype, shape);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = from_double<T>(static_cast<double>((i + 1) % (dtype == DType::Bool ? 2 : 100)));
  });
  return t;
}

bool aliases(const std::string& op, int64_t opset = 17) {
  Node n = make_node(op, 1);
  return KernelRegistry::global().resolve("", op, opset, DType::Float32).create(n)->output_aliases_input();
}

TEST(Reshape, ZeroCopiesAndMinusOneInfersForEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor x = counting(dt, {2, 3, 4});
    const auto out = run_node(make_node("Reshape", 2), {x, ints({0, -1, 2})}, 14);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{2, 6, 2})) << dtype_name(dt);
    expect_bytes_equal(out[0], x.reshape({2, 6, 2}));
  }
}

TEST(Reshape, AllowZeroKeepsZeroAsADimension) {
  const Tensor x = Tensor::empty(DType::Float32, {0, 3});
  Node az = make_node("Reshape", 2, {{"allowzero", Attribute::of_int(1)}});
  EXPECT_EQ(run_node(az, {x, ints({3, 0})}, 14)[0].shape(), (Shape{3, 0}));
  // Without allowzero the 0 copies input dim 1 (3): [3, 3] has 9 elements, not 0.
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Reshape", 2), {x, ints({3, 0})}, 14);
      },
      "cannot reshape float[0, 3] (0 elements) to [3, 0]");
  // -1 next to a literal 0 cannot be inferred.
  EXPECT_THROW(run_node(az, {x, ints({-1, 0})}, 14), ShapeError);
  // Before opset 14 the attribute does not exist, so 0 copies.
  const Tensor y = counting(DType::Int32, {2, 3});
  EXPECT_EQ(run_node(az, {y, ints({0, 3})}, 13)[0].shape(), (Shape{2, 3}));
}

TEST(Reshape, EmptyTensorInfersMinusOneAsZero) {
  const Tensor x = Tensor::empty(DType::Float16, {0, 3});
  EXPECT_EQ(run_node(make_node("Reshape", 2), {x, ints({-1, 3})}, 13)[0].shape(), (Shape{0, 3}));
  EXPECT_EQ(run_node(make_node("Reshape", 2), {x, ints({0, 1, 3})}, 13)[0].shape(), (Shape{0, 1, 3}));
  // A 0 past the input's rank has nothing to copy.
  EXPECT_THROW(run_node(make_node("Reshape", 2), {x, ints({3, 1, 0})}, 13), ShapeError);
}

TEST(Reshape, ScalarToOneAndBack) {
  const Tensor s = Tensor::scalar<double>(7.5);
  const Tensor one = run_node(make_node("Reshape", 2), {s, ints({1})}, 13)[0];
  EXPECT_EQ(one.shape(), (Shape{1}));
  EXPECT_EQ(one.item_as_double(), 7.5);
  EXPECT_EQ(run_node(make_node("Reshape", 2), {one, Tensor::empty(DType::Int64, {0})}, 13)[0].shape(), Shape{});
}

TEST(Reshape, MismatchNamesShapes) {
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Reshape", 2), {counting(DType::Float32, {2, 3}), ints({4, -1})}, 13);
      },
      "node 'n' (Reshape): cannot reshape float[2, 3] (6 elements) to [4, -1]");
  EXPECT_THROW(run_node(make_node("Reshape", 2), {counting(DType::Float32, {6}), ints({-1, -1})}, 13), ShapeError);
  EXPECT_THROW(run_node(make_node("Reshape", 2), {counting(DType::Float32, {6}), ints({-2, 3})}, 13), ShapeError);
}

TEST(Flatten, AxisSplitsOuterAndInner) {
  const Tensor x = counting(DType::Int8, {2, 3, 4});
  auto flat = [&](int64_t axis) {
    return run_node(make_node("Flatten", 1, {{"axis", Attribute::of_int(axis)}}), {x}, 13)[0];
  };
  EXPECT_EQ(flat(0).shape(), (Shape{1, 24}));
  EXPECT_EQ(flat(2).shape(), (Shape{6, 4}));
  EXPECT_EQ(flat(3).shape(), (Shape{24, 1}));
  EXPECT_EQ(flat(-1).shape(), (Shape{6, 4}));
  EXPECT_EQ(flat(-3).shape(), (Shape{1, 24}));
  expect_bytes_equal(flat(1), x.reshape({2, 12}));
  EXPECT_EQ(run_node(make_node("Flatten", 1), {x}, 13)[0].shape(), (Shape{2, 12}));  // default axis 1
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Flatten", 1, {{"axis", Attribute::of_int(4)}}), {x}, 13);
      },
      "axis 4 is out of range for rank 3");
}

TEST(Squeeze, AxesFromAttributeBeforeOpset13AndInputFrom13) {
  const Tensor x = counting(DType::BFloat16, {1, 3, 1, 2});
  const Tensor a = run_node(make_node("Squeeze", 1, {{"axes", Attribute::of_ints({0})}}), {x}, 11)[0];
  EXPECT_EQ(a.shape(), (Shape{3, 1, 2}));
  expect_bytes_equal(a, x.reshape({3, 1, 2}));
  EXPECT_EQ(run_node(make_node("Squeeze", 2), {x, ints({-2})}, 13)[0].shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run_node(make_node("Squeeze", 1), {x}, 13)[0].shape(), (Shape{3, 2}));  // every 1
  EXPECT_EQ(run_node(make_node("Squeeze", 1), {Tensor::scalar<int64_t>(4)}, 13)[0].shape(), Shape{});
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Squeeze", 2), {x, ints({1})}, 13);
      },
      "cannot squeeze axis 1 of shape [1, 3, 1, 2]: its size is 3");
  EXPECT_THROW(run_node(make_node("Squeeze", 2), {x, ints({0, -4})}, 13), InvalidModel);  // axis 0 twice
}

TEST(Unsqueeze, AxesIndexTheOutputInAnyOrder) {
  const Tensor x = counting(DType::Uint16, {3, 4});
  const Tensor a = run_node(make_node("Unsqueeze", 1, {{"axes", Attribute::of_ints({2, 0})}}), {x}, 11)[0];
  EXPECT_EQ(a.shape(), (Shape{1, 3, 1, 4}));
  expect_bytes_equal(a, x.reshape({1, 3, 1, 4}));
  EXPECT_EQ(run_node(make_node("Unsqueeze", 2), {x, ints({-1})}, 13)[0].shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run_node(make_node("Unsqueeze", 2), {x, ints({1, -1})}, 13)[0].shape(), (Shape{3, 1, 4, 1}));
  EXPECT_EQ(run_node(make_node("Unsqueeze", 2), {Tensor::scalar<float>(1), ints({0})}, 13)[0].shape(), (Shape{1}));
  EXPECT_THROW(run_node(make_node("Unsqueeze", 2), {x, ints({1, 1})}, 13), InvalidModel);
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Unsqueeze", 2), {x, ints({3})}, 13);
      },
      "axis 3 is out of range for rank 3");
  EXPECT_THROW(run_node(make_node("Unsqueeze", 1), {x}, 13), InvalidModel);  // axes missing
}

TEST(Identity, CopiesEveryDtypeAndEmptyTensors) {
  for (DType dt : kAllDTypes) {
    const Tensor x = counting(dt, {5, 2});
    expect_bytes_equal(run_node(make_node("Identity", 1), {x}, 16)[0], x);
  }
  EXPECT_EQ(run_node(make_node("Identity", 1), {Tensor::empty(DType::Bool, {0, 4})}, 16)[0].shape(), (Shape{0, 4}));
}

TEST(ShapeOps, ViewOpsAliasTheirInputAndShapeDoesNot) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) EXPECT_TRUE(aliases(op)) << op;
  EXPECT_FALSE(aliases("Shape"));
  EXPECT_FALSE(aliases("Size"));
}

TEST(Shape, StartAndEndFromOpset15ClampLikeTheSpec) {
  const Tensor x = Tensor::empty(DType::Uint8, {2, 3, 4, 5});
  auto shape_of = [&](std::map<std::string, Attribute> attrs, int64_t opset) {
    const Tensor t = run_node(make_node("Shape", 1, std::move(attrs)), {x}, opset)[0];
    EXPECT_EQ(t.dtype(), DType::Int64);
    return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(shape_of({}, 13), (V{2, 3, 4, 5}));
  EXPECT_EQ(shape_of({{"start", Attribute::of_int(1)}, {"end", Attribute::of_int(-1)}}, 15), (V{3, 4}));
  EXPECT_EQ(shape_of({{"start", Attribute::of_int(-100)}}, 15), (V{2, 3, 4, 5}));
  EXPECT_EQ(shape_of({{"end", Attribute::of_int(100)}, {"start", Attribute::of_int(-2)}}, 15), (V{4, 5}));
  EXPECT_EQ(shape_of({{"start", Attribute::of_int(3)}, {"end", Attribute::of_int(1)}}, 15), V{});
  // Before opset 15 the attributes do not exist.
  EXPECT_EQ(shape_of({{"start", Attribute::of_int(1)}}, 14), (V{2, 3, 4, 5}));
  EXPECT_EQ(shape_of({}, 15).size(), 4u);
  EXPECT_EQ(run_node(make_node("Shape", 1), {Tensor::scalar<float>(1)}, 15)[0].shape(), (Shape{0}));
}

TEST(Shape, InferGivesTheValueUnlessTheShapeIsDynamic) {
  Node n = make_node("Shape", 1, {{"start", Attribute::of_int(-2)}});
  auto kernel = KernelRegistry::global().resolve("", "Shape", 15, DType::Float32).create(n);
  InferContext ctx{n, 15, {TensorMeta{DType::Float32, {7, 8, 9}, false, Tensor()}}};
  const auto metas = kernel->infer(ctx);
  ASSERT_EQ(metas.size(), 1u);
  EXPECT_EQ(metas[0].shape, (Shape{2}));
  ASSERT_TRUE(metas[0].value.defined());
  EXPECT_EQ(metas[0].value.to_int64_vector(), (std::vector<int64_t>{8, 9}));
  ctx.inputs[0]->dynamic = true;
  EXPECT_FALSE(kernel->infer(ctx)[0].value.defined());
}

TEST(Size, CountsElementsAndInferGivesTheValue) {
  const Tensor t = run_node(make_node("Size", 1), {Tensor::empty(DType::Int16, {3, 5, 2})}, 13)[0];
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.shape(), Shape{});
  EXPECT_EQ(*t.data<int64_t>(), 30);
  EXPECT_EQ(*run_node(make_node("Size", 1), {Tensor::empty(DType::Float32, {3, 0})}, 13)[0].data<int64_t>(), 0);
  EXPECT_EQ(*run_node(make_node("Size", 1), {Tensor::scalar<bool>(true)}, 13)[0].data<int64_t>(), 1);
  Node n = make_node("Size", 1);
  auto kernel = KernelRegistry::global().resolve("", "Size", 13, DType::Float32).create(n);
  InferContext ctx{n, 13, {TensorMeta{DType::Float32, {4, 6}, false, Tensor()}}};
  const auto metas = kernel->infer(ctx);
  ASSERT_TRUE(metas[0].value.defined());
  EXPECT_EQ(metas[0].value.item_as_double(), 24.0);
}

TEST(Reshape, InferPassesAKnownValueThrough) {
  // Shape arithmetic (Shape -> Reshape/Unsqueeze -> ...) must stay foldable at plan time.
  Node n = make_node("Unsqueeze", 2);
  auto kernel = KernelRegistry::global().resolve("", "Unsqueeze", 13, DType::Int64).create(n);
  const Tensor v = ints({5, 6});
  InferContext ctx{n, 13, {TensorMeta{DType::Int64, {2}, false, v}, TensorMeta{DType::Int64, {1}, false, ints({0})}}};
  const auto metas = kernel->infer(ctx);
  ASSERT_TRUE(metas[0].value.defined());
  EXPECT_EQ(metas[0].value.shape(), (Shape{1, 2}));
  EXPECT_EQ(metas[0].value.to_int64_vector(), (std::vector<int64_t>{5, 6}));
}

}  // namespace
}  // namespace kiln
