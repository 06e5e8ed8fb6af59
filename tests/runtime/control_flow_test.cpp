// If, Loop and Scan in Sessions: subgraphs reading outer values (lifted as captures, ir/subgraph.h),
// nested control flow, loop-carried values whose shapes change, scan axes and directions, an If
// whose output dtype planning cannot know feeding an integer op, the lifted form written back as
// plain ONNX (the checker accepts it and it runs the same), and the errors for malformed bodies.
#include <gtest/gtest.h>

#include <memory>

#include "ir/subgraph.h"
#include "kernels/kernel_test_util.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "runtime/graph_builders.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;
using kiln::test::graph;
using kiln::test::info;
using kiln::test::model;
using kiln::test::node;

const DType F = DType::Float32;

// y = If(c; then: If(d; x * w, x + w), else: x - w): nested branches read x and w from the top.
Model nested_if() {
  const Attribute inner_then = graph({node("Mul", {"x", "w"}, {"p"})}, {}, {info("p", F)});
  const Attribute inner_else = graph({node("Add", {"x", "w"}, {"q"})}, {}, {info("q", F)});
  const Attribute then_b =
      graph({node("If", {"d"}, {"r"}, {{"then_branch", inner_then}, {"else_branch", inner_else}})}, {}, {info("r", F)});
  const Attribute else_b = graph({node("Sub", {"x", "w"}, {"s"})}, {}, {info("s", F)});
  return model(
      {node("Mul", {"x0", "two"}, {"x"}), node("If", {"c"}, {"y"}, {{"then_branch", then_b}, {"else_branch", else_b}})},
      {info("x0", F, {3}), info("w", F, {3}), info("c", DType::Bool, {}), info("d", DType::Bool, {})},
      {info("y", F, {3})});
}

TEST(ControlFlow, NestedIfReadsOuterValues) {
  Model m = nested_if();
  m.graph.initializers["two"] = Tensor::scalar<float>(2.0f);
  Session s(m);
  const Tensor x0 = Tensor::from_vector<float>({3}, {1, 2, 3}), w = Tensor::from_vector<float>({3}, {4, 5, 6});
  const auto run = [&](bool c, bool d) {
    return as_doubles(
        s.run({{"x0", x0}, {"w", w}, {"c", Tensor::scalar<bool>(c)}, {"d", Tensor::scalar<bool>(d)}})["y"]);
  };
  EXPECT_EQ(run(true, true), (std::vector<double>{8, 20, 36}));
  EXPECT_EQ(run(true, false), (std::vector<double>{6, 9, 12}));
  EXPECT_EQ(run(false, true), (std::vector<double>{-2, -1, 0}));
}

TEST(ControlFlow, LiftingAndWritingBackAsOnnx) {
  Model m = nested_if();
  m.graph.initializers["two"] = Tensor::scalar<float>(2.0f);
  EXPECT_EQ(free_values(*m.graph.nodes[1].attrs.at("then_branch").g), (std::vector<std::string>{"d", "x", "w"}));
  Graph lifted = m.graph;
  EXPECT_EQ(lift_captures(lifted), 1u);  // the outer If; the inner one is lifted by its branch's Session
  // Captures in attribute order (else_branch, then then_branch's), each once.
  EXPECT_EQ(lifted.nodes[1].inputs, (std::vector<std::string>{"c", "x", "w", "d"}));
  // A pass renames the captured x: writing ONNX drops the lifted inputs and points the branches at
  // the new name.
  lifted.nodes[0].outputs[0] = "x_renamed";
  for (size_t i = 1; i < lifted.nodes[1].inputs.size(); ++i)
    if (lifted.nodes[1].inputs[i] == "x") lifted.nodes[1].inputs[i] = "x_renamed";
  const Node plain = unlifted(lifted.nodes[1]);
  EXPECT_EQ(plain.inputs, (std::vector<std::string>{"c"}));
  EXPECT_FALSE(plain.has_attr(kCapturesAttr));
  EXPECT_EQ(free_values(*plain.attrs.at("then_branch").g), (std::vector<std::string>{"d", "x_renamed", "w"}));
  m.graph = lifted;
  test::TempDir dir;
  save_model(m, (dir / "if.onnx").string());
  Session s(load_model((dir / "if.onnx").string()));  // the ONNX checker accepts it
  const auto y = s.run({{"x0", Tensor::from_vector<float>({3}, {1, 2, 3})},
                        {"w", Tensor::from_vector<float>({3}, {4, 5, 6})},
                        {"c", Tensor::scalar<bool>(false)},
                        {"d", Tensor::scalar<bool>(true)}})["y"];
  EXPECT_EQ(as_doubles(y), (std::vector<double>{-2, -1, 0}));
}

TEST(ControlFlow, LoopCarriesGrowingValuesAndScansOutputs) {
  // v_{i+1} = Concat(v_i, [i * k]); scan output: Sum(v_i); stops at M or when i * k > limit.
  const Attribute body = graph(
      {node("Cast", {"i"}, {"fi"}, {{"to", Attribute::of_int(1)}}), node("Mul", {"fi", "k"}, {"ik"}),
       node("Unsqueeze", {"ik", "zero"}, {"ik1"}),
       node("Concat", {"v", "ik1"}, {"v2"}, {{"axis", Attribute::of_int(0)}}),
       node("ReduceSum", {"v"}, {"sum"}, {{"keepdims", Attribute::of_int(0)}}), node("Less", {"ik", "limit"}, {"go"})},
      {info("i", DType::Int64, {}), info("cond", DType::Bool, {}), info("v", F, {-1})},
      {info("go", DType::Bool, {}), info("v2", F, {-1}), info("sum", F, {})});
  Model m = model({node("Loop", {"M", "", "v0"}, {"v_final", "sums"}, {{"body", body}})},
                  {info("M", DType::Int64, {}), info("v0", F, {1}), info("k", F, {}), info("limit", F, {})},
                  {info("v_final", F, {-1}, false), info("sums", F, {-1}, false)});
  m.graph.initializers["zero"] = Tensor::from_vector<int64_t>({1}, {0});
  Session s(m);
  const auto run = [&](int64_t trips, float limit) {
    return s.run({{"M", Tensor::scalar<int64_t>(trips)},
                  {"v0", Tensor::from_vector<float>({1}, {1})},
                  {"k", Tensor::scalar<float>(2)},
                  {"limit", Tensor::scalar<float>(limit)}});
  };
  auto r = run(3, 100);
  EXPECT_EQ(as_doubles(r["v_final"]), (std::vector<double>{1, 0, 2, 4}));
  EXPECT_EQ(as_doubles(r["sums"]), (std::vector<double>{1, 1, 3}));
  r = run(10, 3);  // i * 2 < 3 fails at i = 2: three iterations ran
  EXPECT_EQ(as_doubles(r["v_final"]), (std::vector<double>{1, 0, 2, 4}));
  r = run(0, 100);
  EXPECT_EQ(as_doubles(r["v_final"]), (std::vector<double>{1}));
  EXPECT_EQ(r["sums"].numel(), 0);
}

TEST(ControlFlow, ScanAxesAndDirections) {
  // state += x_t; y_t = state * x_t. x scanned along axis 1, in reverse; y stacked on axis 1.
  const Attribute body = graph({node("Add", {"s", "xt"}, {"s2"}), node("Mul", {"s2", "xt"}, {"yt"})},
                               {info("s", F, {2}), info("xt", F, {2})}, {info("s2", F, {2}), info("yt", F, {2})});
  Model m = model({node("Scan", {"s0", "x"}, {"s_final", "y"},
                        {{"body", body},
                         {"num_scan_inputs", Attribute::of_int(1)},
                         {"scan_input_axes", Attribute::of_ints({1})},
                         {"scan_input_directions", Attribute::of_ints({1})},
                         {"scan_output_axes", Attribute::of_ints({1})}})},
                  {info("s0", F, {2}), info("x", F, {2, 3})}, {info("s_final", F, {2}), info("y", F, {2, 3})});
  Session s(m);
  auto r = s.run(
      {{"s0", Tensor::from_vector<float>({2}, {0, 0})}, {"x", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6})}});
  // Steps take columns 2, 1, 0: states (3, 6), (5, 11), (6, 15).
  EXPECT_EQ(as_doubles(r["s_final"]), (std::vector<double>{6, 15}));
  EXPECT_EQ(as_doubles(r["y"]), (std::vector<double>{9, 10, 6, 36, 55, 60}));
}

TEST(ControlFlow, AnIfOfUnknownDtypeFeedsAnIntegerOp) {
  // The If's output is int64, which planning cannot see: the Add after it resolves its kernel at run time.
  const Attribute then_b = graph({node("Identity", {"a"}, {"t"})}, {}, {info("t", DType::Int64)});
  const Attribute else_b = graph({node("Neg", {"a"}, {"e"})}, {}, {info("e", DType::Int64)});
  Model m = model(
      {node("If", {"c"}, {"z"}, {{"then_branch", then_b}, {"else_branch", else_b}}), node("Add", {"z", "a"}, {"y"})},
      {info("c", DType::Bool, {}), info("a", DType::Int64, {2})}, {info("y", DType::Int64, {2}, false)});
  Session s(m);
  const auto y = s.run({{"c", Tensor::scalar<bool>(true)}, {"a", Tensor::from_vector<int64_t>({2}, {3, 4})}})["y"];
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{6, 8}));
}

TEST(ControlFlow, MalformedBodiesAreNamed) {
  const Attribute body =
      graph({node("Identity", {"v"}, {"v2"})}, {info("i", DType::Int64, {}), info("v", F, {1})}, {info("v2", F, {1})});
  Session loop(model({node("Loop", {"M", "", "v0"}, {"vf"}, {{"body", body}})},
                     {info("M", DType::Int64, {}), info("v0", F, {1})}, {info("vf", F, {1}, false)}));
  expect_error<InvalidModel>(
      [&] {
        loop.run({{"M", Tensor::scalar<int64_t>(2)}, {"v0", Tensor::from_vector<float>({1}, {1})}});
      },
      "the body takes 2 inputs and gives 1 outputs, but the node carries 1 values");
  Session no_branch(model({node("If", {"c"}, {"y"})}, {info("c", DType::Bool, {})}, {info("y", F, {}, false)}));
  expect_error<InvalidModel>(
      [&] {
        no_branch.run({{"c", Tensor::scalar<bool>(true)}});
      },
      "graph attribute 'then_branch' is required");
  const Attribute bad = graph({node("Relu", {"missing"}, {"r"})}, {}, {info("r", F)});
  const Attribute two = graph({node("Identity", {"c"}, {"p"}), node("Identity", {"c"}, {"q"})}, {},
                              {info("p", DType::Bool), info("q", DType::Bool)});
  Session arity(model({node("If", {"c"}, {"y"}, {{"then_branch", two}, {"else_branch", two}})},
                      {info("c", DType::Bool, {}, false)}, {info("y", DType::Bool, {}, false)}));
  expect_error<InvalidModel>(
      [&] {
        arity.run({{"c", Tensor::scalar<bool>(true)}});
      },
      "the then branch gives 2 outputs but the node has 1");
  expect_error<ShapeError>(
      [&] {
        arity.run({{"c", Tensor::from_vector<bool>({2}, {true, false})}});
      },
      "cond bool[2] must hold one value");
  // A branch reading a value nothing defines: the node is named when the Session lifts it.
  expect_error<InvalidModel>(
      [&] {
        Session s(model({node("If", {"c"}, {"y"}, {{"then_branch", bad}, {"else_branch", bad}})},
                        {info("c", DType::Bool, {})}, {info("y", F, {}, false)}));
      },
      "node 'y_node' (If) reads 'missing'");
}

}  // namespace
}  // namespace kiln
