// Constant and ConstantOfShape through run_node, against hand-written values.
#include <gtest/gtest.h>

#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

Node make_node(const std::string& op, size_t inputs, std::map<std::string, Attribute> attrs) {
  Node n;
  n.name = "c";
  n.op_type = op;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back("x" + std::to_string(i));
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  return n;
}

Tensor constant(const std::string& key, Attribute a) {
  return run_node(make_node("Constant", 0, {{key, std::move(a)}}), {}, 13)[0];
}

Tensor ints(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v); }

TEST(Constant, EveryValueAttribute) {
  const Tensor v = constant("value", Attribute::of_tensor(Tensor::from_vector<int16_t>({2, 2}, {1, -2, 3, -4})));
  EXPECT_EQ(v.dtype(), DType::Int16);
  EXPECT_EQ(v.shape(), (Shape{2, 2}));
  EXPECT_EQ(v.item_as_double(3), -4.0);

  const Tensor f = constant("value_float", Attribute::of_float(2.5f));
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(f.shape(), Shape{});
  EXPECT_EQ(*f.data<float>(), 2.5f);

  const Tensor fs = constant("value_floats", Attribute::of_floats({1.5f, -3.f}));
  EXPECT_EQ(fs.shape(), (Shape{2}));
  EXPECT_EQ(fs.data<float>()[1], -3.f);

  const Tensor i = constant("value_int", Attribute::of_int(INT64_MAX));
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(*i.data<int64_t>(), INT64_MAX);

  const Tensor is = constant("value_ints", Attribute::of_ints({4, 5, 6}));
  EXPECT_EQ(is.shape(), (Shape{3}));
  EXPECT_EQ(is.data<int64_t>()[2], 6);

  const Tensor e = constant("value_ints", Attribute::of_ints({}));
  EXPECT_EQ(e.shape(), (Shape{0}));
}

TEST(Constant, InferGivesTheValueForFolding) {
  Node n = make_node("Constant", 0, {{"value_ints", Attribute::of_ints({2, 3})}});
  auto kernel = KernelRegistry::global().resolve("", "Constant", 13, DType::Float32).create(n);
  InferContext ctx{n, 13, {}};
  const auto metas = kernel->infer(ctx);
  ASSERT_EQ(metas.size(), 1u);
  ASSERT_TRUE(metas[0].value.defined());
  EXPECT_EQ(metas[0].value.to_int64_vector(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(metas[0].shape, (Shape{2}));
}

TEST(Constant, MissingExtraAndStringValuesAreErrors) {
  EXPECT_THROW(run_node(make_node("Constant", 0, {}), {}, 13), InvalidModel);
  expect_error<InvalidModel>(
      [] {
        const std::map<std::string, Attribute> two{{"value_int", Attribute::of_int(1)},
                                                   {"value_float", Attribute::of_float(1)}};
        run_node(make_node("Constant", 0, two), {}, 13);
      },
      "it has value_float, value_int");
  EXPECT_THROW(constant("value_string", Attribute::of_string("hi")), Unsupported);
}

TEST(ConstantOfShape, DefaultIsFloatZero) {
  const Tensor y = run_node(make_node("ConstantOfShape", 1, {}), {ints({2, 3})}, 13)[0];
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.data<float>()[i], 0.f);
}

TEST(ConstantOfShape, ValueSetsDtypeAndEveryElement) {
  auto fill = [](Tensor value, const std::vector<int64_t>& shape) {
    return run_node(make_node("ConstantOfShape", 1, {{"value", Attribute::of_tensor(std::move(value))}}), {ints(shape)},
                    13)[0];
  };
  const Tensor a = fill(Tensor::from_vector<int64_t>({1}, {-7}), {3, 1, 5});
  EXPECT_EQ(a.dtype(), DType::Int64);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(a.data<int64_t>()[i], -7);
  const Tensor h = fill(Tensor::from_vector<Half>({1}, {float_to_half(1.5f)}), {1000});
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(h.item_as_double(i), 1.5) << i;
  const Tensor b = fill(Tensor::from_vector<bool>({1}, {true}), {7});
  for (int64_t i = 0; i < 7; ++i) EXPECT_TRUE(b.data<bool>()[i]);
  const Tensor s = fill(Tensor::from_vector<double>({1}, {0.25}), {});
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item_as_double(), 0.25);
  EXPECT_EQ(fill(Tensor::from_vector<int32_t>({1}, {1}), {4, 0}).shape(), (Shape{4, 0}));
}

TEST(ConstantOfShape, BadShapeOrValueIsAnError) {
  const Node n = make_node("ConstantOfShape", 1, {});
  expect_error<ShapeError>(
      [&] {
        run_node(n, {ints({2, -1})}, 13);
      },
      "the shape input [2, -1] has a negative dimension");
  const Node two =
      make_node("ConstantOfShape", 1, {{"value", Attribute::of_tensor(Tensor::from_vector<float>({2}, {1, 2}))}});
  EXPECT_THROW(run_node(two, {ints({2})}, 13), InvalidModel);
}

}  // namespace
}  // namespace kiln
