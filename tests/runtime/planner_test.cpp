// build_plan on small ONNX graphs, judged by the ExecutionPlan it returns (value kinds, buffers,
// steps and stats), not by how the planner is written: constant folding, views that alias their
// input, in-place reuse of dying buffers, steps whose shapes are known only at run time, the
// topological order of steps, and clear InvalidModel errors for malformed graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/session.h"
#include "runtime/execution_plan.h"
#include "test_util.h"

namespace kiln {
namespace {

using Kind = PlannedValue::Kind;
using kiln::test::expect_error;

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.op_type = op;
  n.name = out.at(0) + "_node";
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// float x[2, 3] in, `outputs` out (untyped: the planner does not need their types), opset 17.
Model model(std::vector<Node> nodes, std::vector<std::string> outputs) {
  Model m;
  m.opsets = {{"", 17}};
  m.graph.inputs = {ValueInfo::of("x", Tensor::zeros(DType::Float32, {2, 3}))};
  for (const std::string& o : outputs) {
    ValueInfo v;
    v.name = o;
    m.graph.outputs.push_back(v);
  }
  m.graph.nodes = std::move(nodes);
  return m;
}

Tensor ints(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v); }

// The planner sees the feeds' dtypes and shapes only.
std::map<std::string, TensorMeta> metas(const std::map<std::string, Tensor>& feeds) {
  std::map<std::string, TensorMeta> out;
  for (const auto& [name, t] : feeds) out.emplace(name, TensorMeta{t.dtype(), t.shape(), false, Tensor()});
  return out;
}

const std::map<std::string, Tensor> kFeeds = {{"x", Tensor::zeros(DType::Float32, {2, 3})}};

// A model and the plan build_plan makes of it for `feeds`, in the model's topological order.
struct Planned {
  Planned(Model m, const std::map<std::string, Tensor>& feeds = kFeeds)
      : model(std::move(m)), plan(build_plan(model, model.graph.topological_order(), metas(feeds))) {}

  int id(const std::string& name) const {
    auto it = plan->index.find(name);
    EXPECT_NE(it, plan->index.end()) << "no value '" << name << "' in the plan";
    return it == plan->index.end() ? -1 : it->second;
  }
  const PlannedValue& value(const std::string& name) const { return plan->values.at(static_cast<size_t>(id(name))); }
  // The step that writes `name`.
  const PlanStep& step_of(const std::string& name) const {
    for (const PlanStep& s : plan->steps)
      for (int out : s.outputs)
        if (out == id(name)) return s;
    ADD_FAILURE() << "no step writes '" << name << "'";
    return plan->steps.at(0);
  }
  std::vector<std::string> step_ops() const {
    std::vector<std::string> ops;
    for (const PlanStep& s : plan->steps) ops.push_back(model.graph.nodes.at(s.node).op_type);
    return ops;
  }

  Model model;
  std::unique_ptr<ExecutionPlan> plan;
};

// Every step reads only feeds, constants and values written by earlier steps.
void expect_topological(const ExecutionPlan& plan) {
  std::set<int> written;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    for (int in : plan.steps[i].inputs) {
      if (in < 0) continue;
      const PlannedValue& v = plan.values.at(static_cast<size_t>(in));
      if (v.kind == Kind::Feed || v.kind == Kind::Constant) continue;
      EXPECT_TRUE(written.count(in)) << "step " << i << " reads '" << v.name << "' before a step writes it";
    }
    written.insert(plan.steps[i].outputs.begin(), plan.steps[i].outputs.end());
  }
}

// ---- constant folding -------------------------------------------------------------------------

TEST(Planner, FoldsANodeWhoseInputsAreAllInitializers) {
  Model m = model({node("Add", {"a", "b"}, {"c"}), node("Mul", {"x", "c"}, {"y"})}, {"y"});
  m.graph.initializers = {{"a", Tensor::from_vector<float>({3}, {1, 2, 3})},
                          {"b", Tensor::from_vector<float>({3}, {10, 20, 30})}};
  const Planned p(std::move(m));
  EXPECT_EQ(p.plan->stats.num_folded, 1u);
  EXPECT_EQ(p.step_ops(), std::vector<std::string>{"Mul"});  // no step for the folded Add
  const PlannedValue& c = p.value("c");
  EXPECT_EQ(c.kind, Kind::Constant);
  ASSERT_TRUE(c.meta.value.defined());
  ASSERT_EQ(c.meta.value.describe(), "float[3]");
  const float* folded = c.meta.value.data<float>();
  EXPECT_EQ(std::vector<float>(folded, folded + 3), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(p.value("y").kind, Kind::Arena);
  EXPECT_EQ(p.plan->stats.num_steps, 1u);
}

TEST(Planner, FoldsChainsOfKnownValuesAndShapeArithmetic) {
  // Shape(x) is known from the feed's shape; Reshape(initializer, Shape(x)) is then known too.
  Model m =
      model({node("Shape", {"x"}, {"s"}), node("Reshape", {"w", "s"}, {"w2"}), node("Add", {"x", "w2"}, {"y"})}, {"y"});
  m.graph.initializers = {{"w", Tensor::from_vector<float>({6}, {0, 1, 2, 3, 4, 5})}};
  const Planned p(std::move(m));
  EXPECT_EQ(p.plan->stats.num_folded, 2u);
  EXPECT_EQ(p.step_ops(), std::vector<std::string>{"Add"});
  EXPECT_EQ(p.value("s").meta.value.to_int64_vector(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p.value("w2").kind, Kind::Constant);
  EXPECT_EQ(p.value("w2").meta.shape, (Shape{2, 3}));
}

// ---- views and in-place reuse -----------------------------------------------------------------

TEST(Planner, ReshapeOutputIsAnAliasOfItsInput) {
  Model m = model({node("Relu", {"x"}, {"r"}), node("Reshape", {"r", "shape"}, {"y"})}, {"y"});
  m.graph.initializers = {{"shape", ints({3, 2})}};
  const Planned p(std::move(m));
  const PlannedValue& r = p.value("r");
  const PlannedValue& y = p.value("y");
  EXPECT_EQ(r.kind, Kind::Arena);
  EXPECT_EQ(y.kind, Kind::Alias);
  EXPECT_EQ(y.alias_of, p.id("r"));
  EXPECT_EQ(y.buffer, r.buffer);  // the same bytes, so no buffer of its own
  EXPECT_EQ(y.meta.shape, (Shape{3, 2}));
  EXPECT_TRUE(p.step_of("y").alias_only);
  EXPECT_FALSE(p.step_of("r").alias_only);
  EXPECT_EQ(p.plan->buffers.size(), 1u);
  // The viewed buffer lives as long as its view: y is a graph output.
  EXPECT_GE(p.plan->buffers.at(static_cast<size_t>(r.buffer)).last, p.plan->steps.size());
}

TEST(Planner, ReluOverADyingValueReusesItsBuffer) {
  const Planned p(model({node("Relu", {"x"}, {"a"}), node("Relu", {"a"}, {"b"})}, {"b"}));
  ASSERT_EQ(p.value("a").kind, Kind::Arena);
  ASSERT_EQ(p.value("b").kind, Kind::Arena);
  EXPECT_EQ(p.value("b").buffer, p.value("a").buffer);
  EXPECT_EQ(p.plan->buffers.size(), 1u);
}

TEST(Planner, NoInPlaceReuseOfAValueReadLater) {
  // a is read again by the Add after the second Relu, so b cannot overwrite it.
  const Planned p(
      model({node("Relu", {"x"}, {"a"}), node("Relu", {"a"}, {"b"}), node("Add", {"a", "b"}, {"y"})}, {"y"}));
  EXPECT_NE(p.value("b").buffer, p.value("a").buffer);
  EXPECT_GE(p.plan->buffers.size(), 2u);
}

TEST(Planner, NoInPlaceReuseOfAGraphOutput) {
  const Planned p(model({node("Relu", {"x"}, {"a"}), node("Relu", {"a"}, {"b"})}, {"a", "b"}));
  EXPECT_NE(p.value("b").buffer, p.value("a").buffer);
  EXPECT_EQ(p.plan->buffers.size(), 2u);
}

TEST(Planner, NoInPlaceReuseOfAFeed) {
  // A feed is the caller's tensor, not the arena's: the first Relu gets a buffer of its own.
  const Planned p(model({node("Relu", {"x"}, {"a"})}, {"a"}));
  EXPECT_EQ(p.value("x").kind, Kind::Feed);
  EXPECT_EQ(p.value("a").kind, Kind::Arena);
  EXPECT_GE(p.value("a").buffer, 0);
}

// ---- lifetimes ------------------------------------------------------------------------------------

// x -> Relu -> a -> Neg -> b -> Exp -> c, d = b + c (c cannot overwrite b, read again by the Add),
// then `tail` reads a again (for its shape only, or its elements) with d.
Model lifetime_model(const std::string& tail_domain, const std::string& tail_op) {
  Model m = model({node("Relu", {"x"}, {"a"}), node("Neg", {"a"}, {"b"}), node("Exp", {"b"}, {"c"}),
                   node("Add", {"b", "c"}, {"d"}), node(tail_op, {"d", "a"}, {"y"})},
                  {"y"});
  m.graph.nodes.back().domain = tail_domain;
  m.opsets["ai.kiln"] = 1;
  return m;
}

TEST(Planner, AReadOfTheShapeOnlyDoesNotKeepABufferAlive) {
  // SumToShapeOf reads only its target's shape: a's buffer is free after the Neg reading it, as if
  // the gradient of a broadcast did not hold a forward activation through the backward.
  // a's elements die at the Neg reading them (position 1), which writes b over them in place.
  const Planned p(lifetime_model("ai.kiln", "SumToShapeOf"));
  const PlannedValue& a = p.value("a");
  ASSERT_EQ(a.kind, Kind::Arena);
  EXPECT_EQ(p.value("b").buffer, a.buffer);
  // Reading a's elements (Add) keeps it to the end, and the Neg writes elsewhere.
  const Planned kept(lifetime_model("", "Add"));
  EXPECT_EQ(kept.plan->buffers.at(static_cast<size_t>(kept.value("a").buffer)).last, 4u);
  EXPECT_NE(kept.value("b").buffer, kept.value("a").buffer);
  EXPECT_LT(p.plan->memory.arena_bytes, kept.plan->memory.arena_bytes);
}

TEST(Planner, AShapeOnlyTargetsBufferIsReusedAndTheResultIsRight) {
  // After its last element read, a's bytes are free (the Neg writes b over them); SumToShapeOf still
  // sees a's shape.
  const Planned p(lifetime_model("ai.kiln", "SumToShapeOf"));
  const int a = p.value("a").buffer;
  const auto offset = [&](const std::string& name) {
    return p.plan->memory.offsets.at(static_cast<size_t>(p.value(name).buffer));
  };
  EXPECT_EQ(offset("b"), offset("a")) << "buffer " << a << " is not reused";
  Session s(lifetime_model("ai.kiln", "SumToShapeOf"));
  const Tensor x = Tensor::from_vector<float>({2, 3}, {-1, 0, 0.5f, 1, 2, -3});
  const Tensor y = s.run({{"x", x}}).at("y");
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) {
    const float b = -std::max(x.data<float>()[i], 0.f);
    EXPECT_NEAR(y.data<float>()[i], b + std::exp(b), 1e-6) << "element " << i;  // Exp within a few ulp
  }
}

TEST(Planner, AShapeFoldedAtPlanTimeDoesNotKeepABufferAlive) {
  // Shape(a) is known at plan time, so no step reads a for it.
  Model m = model({node("Relu", {"x"}, {"a"}), node("Neg", {"a"}, {"b"}), node("Exp", {"b"}, {"c"}),
                   node("Shape", {"a"}, {"s"}), node("Reshape", {"c", "s"}, {"y"})},
                  {"y"});
  const Planned p(std::move(m));
  EXPECT_EQ(p.value("s").kind, Kind::Constant);
  EXPECT_EQ(p.value("b").buffer, p.value("a").buffer) << "the Neg writes over a, whose elements died there";
}

TEST(Planner, ARunTimeViewKeepsItsSourceAlive) {
  // v views a's buffer from a Reshape whose shape is fed (known only at run time); Neg reads v last.
  Model m = model({node("Relu", {"x"}, {"a"}), node("Reshape", {"a", "s"}, {"v"}), node("Exp", {"x"}, {"b"}),
                   node("Exp", {"b"}, {"c"}), node("Neg", {"v"}, {"y"}), node("Add", {"c", "c"}, {"z"})},
                  {"y", "z"});
  m.graph.inputs.push_back(ValueInfo::of("s", ints({3, 2})));
  const Planned p(std::move(m), {{"x", Tensor::zeros(DType::Float32, {2, 3})}, {"s", ints({3, 2})}});
  ASSERT_TRUE(p.step_of("v").dynamic);
  EXPECT_GE(p.plan->buffers.at(static_cast<size_t>(p.value("a").buffer)).last, 4u);  // the Neg of v
}

TEST(Planner, NoInPlaceWriteOverTheSourceOfALiveRunTimeView) {
  // v views a from a Reshape to a fed shape; the Neg of a must not overwrite a while v is unread.
  Model m = model({node("Relu", {"x"}, {"a"}), node("Reshape", {"a", "s"}, {"v"}), node("Neg", {"a"}, {"b"}),
                   node("Neg", {"v"}, {"y"})},
                  {"b", "y"});
  m.graph.inputs.push_back(ValueInfo::of("s", ints({3, 2})));
  const Planned p(Model(m), {{"x", Tensor::zeros(DType::Float32, {2, 3})}, {"s", ints({3, 2})}});
  EXPECT_NE(p.value("b").buffer, p.value("a").buffer);
  Session s(std::move(m));
  const Tensor x = Tensor::from_vector<float>({2, 3}, {-1, 2, -3, 4, -5, 6});
  const Tensor y = s.run({{"x", x}, {"s", ints({3, 2})}}).at("y");
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 6), (std::vector<float>{0, -2, 0, -4, 0, -6}));
}

// ---- shapes known only at run time ------------------------------------------------------------

TEST(Planner, ReshapeToAFedShapeIsADynamicStep) {
  Model m = model({node("Reshape", {"x", "s"}, {"y"}), node("Relu", {"y"}, {"z"})}, {"z"});
  m.graph.inputs.push_back(ValueInfo::of("s", ints({3, 2})));
  const Planned p(std::move(m), {{"x", Tensor::zeros(DType::Float32, {2, 3})}, {"s", ints({3, 2})}});
  EXPECT_TRUE(p.step_of("y").dynamic);
  EXPECT_EQ(p.value("y").kind, Kind::Dynamic);
  // What reads a dynamic value is dynamic too: its shape is not known before the run either.
  EXPECT_TRUE(p.step_of("z").dynamic);
  EXPECT_EQ(p.value("z").kind, Kind::Dynamic);
  EXPECT_EQ(p.plan->stats.num_dynamic_steps, 2u);
  EXPECT_TRUE(p.plan->buffers.empty());
}

TEST(Planner, NonZeroIsADynamicStep) {
  const Planned p(model({node("Relu", {"x"}, {"r"}), node("NonZero", {"r"}, {"nz"})}, {"nz"}));
  EXPECT_FALSE(p.step_of("r").dynamic);
  EXPECT_TRUE(p.step_of("nz").dynamic);
  EXPECT_EQ(p.value("nz").kind, Kind::Dynamic);
  EXPECT_EQ(p.plan->stats.num_dynamic_steps, 1u);
  EXPECT_EQ(p.plan->stats.num_steps, 2u);
}

// ---- order and errors -------------------------------------------------------------------------

TEST(Planner, StepsFollowTopologicalOrderNotFileOrder) {
  // A diamond listed consumers first: x -> a -> (b, c) -> y.
  const Planned p(model({node("Add", {"b", "c"}, {"y"}), node("Abs", {"a"}, {"c"}), node("Neg", {"a"}, {"b"}),
                         node("Relu", {"x"}, {"a"})},
                        {"y"}));
  ASSERT_EQ(p.plan->steps.size(), 4u);
  expect_topological(*p.plan);
  EXPECT_EQ(p.step_ops().front(), "Relu");
  EXPECT_EQ(p.step_ops().back(), "Add");
  EXPECT_EQ(p.plan->stats.num_steps, 4u);
}

TEST(Planner, ANodeReadingAnUndefinedValueIsInvalidModel) {
  const Model m = model({node("Relu", {"x"}, {"a"}), node("Add", {"a", "ghost"}, {"y"})}, {"y"});
  expect_error<InvalidModel>([&] { Session s(m); },
                             "node 'y_node' (Add) reads 'ghost', which is not a graph input, an initializer or the "
                             "output of any node");
  // build_plan given the nodes in an order of its own says the same of a value not yet computed.
  expect_error<InvalidModel>([&] { build_plan(m, {0, 1}, metas(kFeeds)); }, "reads 'ghost'");
  const Model swapped = model({node("Relu", {"x"}, {"a"}), node("Relu", {"a"}, {"y"})}, {"y"});
  expect_error<InvalidModel>(
      [&] {
        build_plan(swapped, {1, 0}, metas(kFeeds));
      },
      "node 'y_node' (Relu) reads 'a', which is not a graph input, an initializer or the "
      "output of an earlier node");
}

TEST(Planner, AGraphOutputNobodyProducesIsInvalidModel) {
  Session s(model({node("Relu", {"x"}, {"a"})}, {"a", "nowhere"}));
  expect_error<InvalidModel>([&] { s.plan(kFeeds); }, "graph output 'nowhere' is not produced by any node");
}

}  // namespace
}  // namespace kiln
