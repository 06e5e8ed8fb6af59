// Finite-difference checks of the control-flow gradients (autodiff/control_flow.cpp). If: both
// branches taken, a branch that does not read a differentiated value (its gradient is zero), two
// outputs, and an If nested in a branch that reads the outer graph's values. Scan: states, scan
// inputs along other axes and in reverse, scan outputs stacked in reverse, and an outer value the
// body reads. Malformed nodes and a Loop its condition can stop early are errors naming them.
// Float64 (<= 1e-6) and float32 (<= 1e-3). The node lists its captured values as inputs (as a Session lifts
// them), so the checker differentiates with respect to them.
#include <gtest/gtest.h>

#include <memory>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"
#include "ir/subgraph.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"
#include "test_util.h"

namespace kiln::testing {
namespace {

Node make(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.op_type = op;
  n.name = out[0] + "_node";
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// Subgraph outputs are typed, as ONNX requires: float64, or float32 for the checker's float32 pass.
DType g_dtype = DType::Float64;

Attribute graph(std::vector<Node> nodes, std::vector<std::string> outputs) {
  auto g = std::make_shared<Graph>();
  g->nodes = std::move(nodes);
  for (const std::string& o : outputs) {
    ValueInfo v;
    v.name = o;
    v.dtype = g_dtype;
    v.has_type = true;
    g->outputs.push_back(v);
  }
  Attribute a;
  a.kind = Attribute::Kind::Graph;
  a.g = g;
  return a;
}

// If(cond; a, b): then (y = tanh(a * b) + a, z = b * b), else (y = a * a, z = a).
Node if_node() {
  Node n;
  n.op_type = "If";
  n.inputs = {"cond", "a", "b"};
  n.outputs = {"y", "z"};
  n.attrs["then_branch"] = graph({make("Mul", {"a", "b"}, {"ab"}), make("Tanh", {"ab"}, {"t"}),
                                  make("Add", {"t", "a"}, {"ty"}), make("Mul", {"b", "b"}, {"tz"})},
                                 {"ty", "tz"});
  n.attrs["else_branch"] = graph({make("Mul", {"a", "a"}, {"ey"}), make("Identity", {"a"}, {"ez"})}, {"ey", "ez"});
  n.attrs[kCapturesAttr] = Attribute::of_strings({"a", "b"});
  return n;
}

// check_gradient in float64, then float32, with the subgraphs typed to match.
template <class MakeNode>
void both_typed(MakeNode make_node, std::vector<Tensor> inputs, std::vector<size_t> wrt, uint64_t seed) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    g_dtype = dt;
    GradCheck c{make_node(), inputs, wrt, 17, seed};
    c.float32 = dt == DType::Float32;
    check_gradient(c);
  }
  g_dtype = DType::Float64;
}

TEST(IfGradient, BothBranches) {
  for (bool cond : {true, false}) {
    SCOPED_TRACE(cond ? "then" : "else");
    both_typed(if_node, {Tensor::scalar<bool>(cond), random_tensor({2, 3}, 7101), random_tensor({2, 3}, 7102)}, {1, 2},
               7103);
  }
}

// then: y = If(c2; then: a * b, else: b), z = a; else: y = a + b, z = b. c2 is an outer value too.
Node nested_if_node() {
  Node inner;
  inner.op_type = "If";
  inner.name = "inner";
  inner.inputs = {"c2"};
  inner.outputs = {"iy"};
  inner.attrs["then_branch"] = graph({make("Mul", {"a", "b"}, {"p"})}, {"p"});
  inner.attrs["else_branch"] = graph({make("Identity", {"b"}, {"q"})}, {"q"});
  Node n;
  n.op_type = "If";
  n.inputs = {"cond", "a", "b", "c2"};
  n.outputs = {"y", "z"};
  n.attrs["then_branch"] = graph({inner, make("Identity", {"a"}, {"tz"})}, {"iy", "tz"});
  n.attrs["else_branch"] = graph({make("Add", {"a", "b"}, {"ey"}), make("Identity", {"b"}, {"ez"})}, {"ey", "ez"});
  n.attrs[kCapturesAttr] = Attribute::of_strings({"a", "b", "c2"});
  return n;
}

TEST(IfGradient, NestedIfReadsTheOuterValues) {
  for (bool c2 : {true, false}) {
    SCOPED_TRACE(c2 ? "inner then" : "inner else");
    both_typed(
        nested_if_node,
        {Tensor::scalar<bool>(true), random_tensor({4}, 7201), random_tensor({4}, 7202), Tensor::scalar<bool>(c2)},
        {1, 2}, 7203);
  }
}

ValueInfo typed_info(const std::string& name) {
  ValueInfo v;
  v.name = name;
  v.dtype = g_dtype;
  v.has_type = true;
  return v;
}

// Scan(s0, x; c): s' = s * x_t + tanh(c * x_t), y_t = s' * c + x_t; x scanned along axis 1 in
// reverse, y stacked along axis 1 in reverse.
Node scan_node() {
  Attribute body =
      graph({make("Mul", {"s", "xt"}, {"sx"}), make("Mul", {"c", "xt"}, {"cx"}), make("Tanh", {"cx"}, {"t"}),
             make("Add", {"sx", "t"}, {"s2"}), make("Mul", {"s2", "c"}, {"sc"}), make("Add", {"sc", "xt"}, {"yt"})},
            {"s2", "yt"});
  body.g->inputs = {typed_info("s"), typed_info("xt")};
  Node n;
  n.op_type = "Scan";
  n.inputs = {"s0", "x", "c"};
  n.outputs = {"s_final", "y"};
  n.attrs["body"] = body;
  n.attrs["num_scan_inputs"] = Attribute::of_int(1);
  n.attrs["scan_input_axes"] = Attribute::of_ints({1});
  n.attrs["scan_input_directions"] = Attribute::of_ints({1});
  n.attrs["scan_output_axes"] = Attribute::of_ints({1});
  n.attrs["scan_output_directions"] = Attribute::of_ints({1});
  n.attrs[kCapturesAttr] = Attribute::of_strings({"c"});
  return n;
}

TEST(ScanGradient, StatesScanInputsAndOuterValues) {
  both_typed(scan_node, {random_tensor({3}, 7301), random_tensor({3, 5}, 7302), random_tensor({3}, 7303)}, {0, 1, 2},
             7304);
}

// Loop(M, "", v0; c): v' = v * c + tanh(v) * i, y_i = v' * v (scan output); M = 4.
Node loop_node() {
  Attribute body =
      graph({make("CastLike", {"i", "v"}, {"fi"}), make("Mul", {"v", "c"}, {"vc"}), make("Tanh", {"v"}, {"tv"}),
             make("Mul", {"tv", "fi"}, {"tvi"}), make("Add", {"vc", "tvi"}, {"v2"}), make("Mul", {"v2", "v"}, {"y"}),
             make("Identity", {"cond"}, {"cond_out"})},
            {"cond_out", "v2", "y"});
  ValueInfo i = typed_info("i"), cond = typed_info("cond");
  i.dtype = DType::Int64;
  cond.dtype = DType::Bool;
  body.g->outputs[0].dtype = DType::Bool;
  body.g->inputs = {i, cond, typed_info("v")};
  Node n;
  n.op_type = "Loop";
  n.inputs = {"M", "", "v0", "c"};
  n.outputs = {"v_final", "ys"};
  n.attrs["body"] = body;
  n.attrs[kCapturesAttr] = Attribute::of_strings({"c"});
  return n;
}

TEST(LoopGradient, CarriedValuesScanOutputsAndOuterValues) {
  both_typed(loop_node,
             {Tensor::scalar<int64_t>(4), Tensor(), random_tensor({2, 3}, 7401), random_tensor({2, 3}, 7402)}, {2, 3},
             7403);
  // No iteration: v passes through, c gets zero. (Float64 only: an empty scan output takes the
  // body's declared dtype, and the float32 pass's reference runs in float64.)
  check_gradient({loop_node(),
                  {Tensor::scalar<int64_t>(0), Tensor(), random_tensor({2, 3}, 7404), random_tensor({2, 3}, 7405)},
                  {2, 3},
                  17,
                  7406});
}

// Bodies and nodes that do not fit each other (found by the forward graph's inference, before the
// rules' own checks), and a Loop whose condition can stop it early: errors naming the node and what
// does not fit, raised while building the gradient graph.
TEST(ControlFlowGradient, MalformedNodesAndEarlyExits) {
  const std::vector<Tensor> scan_in = {random_tensor({3}, 7501), random_tensor({3, 5}, 7502), random_tensor({3}, 7503)};
  Node one_output = scan_node();
  one_output.attrs["body"].g->outputs.pop_back();
  test::expect_error<InvalidModel>(
      [&] {
        check_gradient({one_output, scan_in, {0, 1, 2}, 17, 7504});
      },
      {"node producing 's_final' (Scan)", "scan_output_axes has 1 values for 0 tensors"});
  Node too_many = scan_node();
  too_many.attrs["num_scan_inputs"] = Attribute::of_int(3);
  test::expect_error<InvalidModel>(
      [&] {
        check_gradient({too_many, scan_in, {0, 1, 2}, 17, 7505});
      },
      {"node producing 's_final' (Scan)", "num_scan_inputs 3 must be in [1, 2]"});
  const std::vector<Tensor> loop_in = {Tensor::scalar<int64_t>(2), Tensor(), random_tensor({2, 3}, 7506),
                                       random_tensor({2, 3}, 7507)};
  Node early = loop_node();
  Graph& body = *early.attrs["body"].g;
  for (Node& nd : body.nodes)
    if (nd.op_type == "Identity") nd = make("Not", {"cond"}, {"cond_out"});
  test::expect_error<Unsupported>(
      [&] {
        check_gradient({early, loop_in, {2, 3}, 17, 7508});
      },
      {"Kiln differentiates a Loop whose trip count M fixes the iterations",
       "this loop's condition can stop it early"});
  Node extra = loop_node();
  extra.attrs["body"].g->outputs.push_back(typed_info("vc"));
  test::expect_error<InvalidModel>(
      [&] {
        check_gradient({extra, loop_in, {2, 3}, 17, 7509});
      },
      {"Loop: the body's 3 inputs and 4 outputs do not fit 1 carried values and 1 scan outputs"});
}

// With a graph input of unknown shape Kiln's own inference of the forward graph does not run, so a
// Scan whose counts do not fit its inputs or outputs reaches the rule, which names them.
TEST(ControlFlowGradient, ScanCountsThatDoNotFitReachTheRule) {
  Model m;
  m.opsets[""] = 17;
  m.graph.initializers = {{"s0", random_tensor({3}, 7510)}, {"c", random_tensor({3}, 7511)}};
  ValueInfo x;
  x.name = "x";
  x.dtype = DType::Float64;
  x.has_type = true;  // no shape
  m.graph.inputs = {x};
  Node scan = scan_node();
  scan.attrs["num_scan_inputs"] = Attribute::of_int(3);
  Node sum = make("ReduceSum", {"s_final"}, {"loss"});
  sum.attrs["keepdims"] = Attribute::of_int(0);
  m.graph.nodes = {scan, sum};
  m.graph.outputs = {ValueInfo::of("loss", Tensor::scalar<double>(0))};
  test::expect_error<InvalidModel>(
      [&] { build_gradient_graph(m, {.loss = "loss", .requires_grad = {"s0"}}); },
      {"2 inputs besides its 1 captured values cannot hold 0 leading inputs and 3 scan inputs"});
  // No scan input: both inputs are carried values, but the node has one output.
  scan.attrs["num_scan_inputs"] = Attribute::of_int(0);
  scan.outputs = {"s_final"};
  m.graph.nodes = {scan, sum};
  test::expect_error<InvalidModel>([&] { build_gradient_graph(m, {.loss = "loss", .requires_grad = {"s0"}}); },
                                   {"1 outputs cannot hold its 2 carried values"});
}

}  // namespace
}  // namespace kiln::testing
