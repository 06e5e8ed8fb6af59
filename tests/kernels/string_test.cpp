// String tensors: elements are objects (constructed, copied one by one in any strides, never viewed
// in an arena); numbers written as numpy's str() writes them and read back; Cast both ways in a
// Session, with an unparsable string named by its index; StringNormalizer's stopwords and cases;
// and kernels not made for strings refuse them by name instead of copying their bytes.
#include <gtest/gtest.h>

#include "kernels/cpu/string_cast.h"
#include "kernels/kernel_test_util.h"
#include "kiln/session.h"
#include "runtime/graph_builders.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using kiln::test::info;
using kiln::test::model;
using kiln::test::node;
using strings::format_number;

const DType S = DType::String;

std::vector<std::string> items(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data<std::string>(), c.data<std::string>() + c.numel()};
}

TEST(StringTensors, ElementsAreObjects) {
  Tensor t = Tensor::from_vector<std::string>({2, 2}, {"a", std::string(100, 'x'), "", "d"});
  const Tensor c = t.clone();
  t.data<std::string>()[0] = "changed";
  EXPECT_EQ(items(c), (std::vector<std::string>{"a", std::string(100, 'x'), "", "d"}));
  EXPECT_EQ(items(t.permute({1, 0})), (std::vector<std::string>{"changed", "", std::string(100, 'x'), "d"}));
  EXPECT_EQ(items(Tensor::zeros(S, {3})), (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(t.describe(), "string[2, 2]");
  expect_error<TypeError>([&] { (void)t.item_as_double(0); }, {"string tensors have no numeric elements"});
  expect_error<Error>([&] { Tensor::view_of(Storage::allocate(64), 0, S, {1}); },
                      {"string tensors own their elements"});
}

TEST(StringTensors, NumbersAsNumpyWritesThem) {
  // Each expected string is numpy 1.24's str() of the value in that type.
  EXPECT_EQ(format_number(0.039187793f), "0.039187793");
  EXPECT_EQ(format_number(0.9767611f), "0.9767611");
  EXPECT_EQ(format_number(3.0f), "3.0");
  EXPECT_EQ(format_number(100000.0f), "100000.0");
  EXPECT_EQ(format_number(1e-5f), "1e-05");
  EXPECT_EQ(format_number(1.5e20f), "1.5e+20");
  EXPECT_EQ(format_number(-0.0f), "-0.0");
  EXPECT_EQ(format_number(0.1), "0.1");
  EXPECT_EQ(format_number(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(format_number(float_to_half(0.1f)), "0.1");
  EXPECT_EQ(format_number(std::numeric_limits<float>::quiet_NaN()), "nan");
  EXPECT_EQ(format_number(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(format_number(int64_t{-7}), "-7");
  EXPECT_EQ(format_number(uint8_t{200}), "200");
  EXPECT_EQ(format_number(true), "True");
}

TEST(StringTensors, CastBothWaysInASession) {
  Model m = model({node("Cast", {"x"}, {"s"}, {{"to", Attribute::of_int(8)}}),
                   node("Cast", {"s"}, {"back"}, {{"to", Attribute::of_int(1)}}),
                   node("Cast", {"text"}, {"n"}, {{"to", Attribute::of_int(7)}})},
                  {info("x", DType::Float32, {4}), info("text", S, {2})},
                  {info("s", S, {4}), info("back", DType::Float32, {4}), info("n", DType::Int64, {2})});
  Session session(m);
  const Tensor x = Tensor::from_vector<float>({4}, {0.25f, -1e-7f, 123456.5f, 0.1f});
  auto r = session.run({{"x", x}, {"text", Tensor::from_vector<std::string>({2}, {"42", "-9000000000"})}});
  EXPECT_EQ(items(r["s"]), (std::vector<std::string>{"0.25", "-1e-07", "123456.5", "0.1"}));
  EXPECT_EQ(test_util::as_doubles(r["back"]), test_util::as_doubles(x));  // shortest digits read back exactly
  EXPECT_EQ(test_util::as_doubles(r["n"]), (std::vector<double>{42, -9000000000.0}));
  expect_error<InvalidArgument>(
      [&] {
        session.run({{"x", x}, {"text", Tensor::from_vector<std::string>({2}, {"1", "1.5"})}});
      },
      {"input 'text' element 1: \"1.5\" is not a int64 value"});
  const auto parsed = run_node(node("Cast", {"t"}, {"f"}, {{"to", Attribute::of_int(1)}}),
                               {Tensor::from_vector<std::string>({4}, {"NaN", "INF", "+INF", "-inf"})});
  const auto f = test_util::as_doubles(parsed[0]);
  EXPECT_TRUE(std::isnan(f[0]));
  EXPECT_EQ(f[1], INFINITY);
  EXPECT_EQ(f[2], INFINITY);
  EXPECT_EQ(f[3], -INFINITY);
}

TEST(StringTensors, StringNormalizer) {
  const Tensor x = Tensor::from_vector<std::string>({1, 4}, {"Monday", "tuesday", "MONDAY", "Wed"});
  const auto run = [&](std::map<std::string, Attribute> attrs, const Tensor& in) {
    return run_node(node("StringNormalizer", {"x"}, {"y"}, std::move(attrs)), {in})[0];
  };
  const Attribute stop = Attribute::of_strings({"monday"});
  Tensor y = run({{"stopwords", stop}, {"case_change_action", Attribute::of_string("UPPER")}}, x);
  EXPECT_EQ(y.shape(), (Shape{1, 2}));
  EXPECT_EQ(items(y), (std::vector<std::string>{"TUESDAY", "WED"}));
  y = run({{"stopwords", stop}, {"is_case_sensitive", Attribute::of_int(1)}}, x);
  EXPECT_EQ(items(y), (std::vector<std::string>{"Monday", "tuesday", "MONDAY", "Wed"}));
  y = run({{"stopwords", Attribute::of_strings({"a", "b"})}}, Tensor::from_vector<std::string>({2}, {"A", "b"}));
  EXPECT_EQ(y.shape(), (Shape{1}));  // all dropped: one empty string
  EXPECT_EQ(items(y), (std::vector<std::string>{""}));
  expect_error<ShapeError>(
      [&] {
        run({}, Tensor::from_vector<std::string>({2, 1}, {"a", "b"}));
      },
      {"X is string[2, 1]; it must be [C] or [1, C]"});
  expect_error<InvalidModel>(
      [&] {
        run({{"case_change_action", Attribute::of_string("TITLE")}}, x);
      },
      {"case_change_action 'TITLE'"});
}

TEST(StringTensors, KernelsNotMadeForStringsRefuseThem) {
  // A numeric kernel asked for a string output (ConstantOfShape of a string value).
  expect_error<Unsupported>(
      [] {
        run_node(node("ConstantOfShape", {"shape"}, {"y"},
                      {{"value", Attribute::of_tensor(Tensor::from_vector<std::string>({1}, {"a"}))}}),
                 {Tensor::from_vector<int64_t>({1}, {3})});
      },
      {"ConstantOfShape makes output 0 a string tensor, which it does not support"});
  const Tensor s = Tensor::from_vector<std::string>({2}, {"a", "b"});
  for (const char* op : {"Identity", "Reshape", "Concat"}) {
    std::vector<Tensor> in{s};
    if (std::string(op) == "Reshape") in.push_back(Tensor::from_vector<int64_t>({1}, {2}));
    expect_error<Unsupported>(
        [&] {
          run_node(node(op, {"a", "b"}, {"y"}, {{"axis", Attribute::of_int(0)}}), in);
        },
        {op, "string"});
  }
}

}  // namespace
}  // namespace kiln
