// Session and planner behaviour, on test-only kernels in the domain "test.kiln" so that these
// tests depend on nothing but the runtime.
#include "kiln/session.h"

#include <gtest/gtest.h>

#include <map>

#include "kiln/kernel.h"
#include "runtime/runtime_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

int g_compute_calls = 0;

// y = x + 1, elementwise, may run in place.
class AddOne : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override { return {{ctx.dtype(0), ctx.shape(0)}}; }
  void compute(ComputeContext& ctx) override {
    ++g_compute_calls;
    const float* x = ctx.input(0).data<float>();
    float* y = ctx.output(0).data<float>();
    for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = x[i] + 1.f;
  }
  std::optional<size_t> inplace_input() const override { return 0; }
};

// y = x0 + x1 (same shapes); no in-place.
class Add2 : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.shape(0) != ctx.shape(1))
      throw ShapeError("Add2: shapes differ: " + to_string(ctx.shape(0)) + " vs " + to_string(ctx.shape(1)));
    return {{ctx.dtype(0), ctx.shape(0)}};
  }
  void compute(ComputeContext& ctx) override {
    ++g_compute_calls;
    const float* a = ctx.input(0).data<float>();
    const float* b = ctx.input(1).data<float>();
    float* y = ctx.output(0).data<float>();
    for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = a[i] + b[i];
  }
};

// y = x viewed as 1-D.
class Flat : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override { return {{ctx.dtype(0), {numel(ctx.shape(0))}}}; }
  void compute(ComputeContext& ctx) override { ctx.output(0).copy_from(ctx.input(0).reshape(ctx.output(0).shape())); }
  bool output_aliases_input() const override { return true; }
};

// The shape of x as int64, known at plan time.
class ShapeOf : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    TensorMeta m{DType::Int64, {static_cast<int64_t>(ctx.shape(0).size())}};
    m.value = Tensor::from_vector<int64_t>(m.shape, ctx.shape(0));
    return {m};
  }
  void compute(ComputeContext& ctx) override { ctx.output(0).copy_from(ctx.input(0)); }
};

// Ones of the shape held in input 0 (int64): its output shape depends on data.
class OnesOfShape : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    return {{DType::Float32, ctx.value(0).to_int64_vector()}};
  }
  void compute(ComputeContext& ctx) override {
    ++g_compute_calls;
    float* y = ctx.output(0).data<float>();
    for (int64_t i = 0; i < ctx.output(0).numel(); ++i) y[i] = 1.f;
  }
};

const KernelRegistrar r5({"test.kiln", "OnesOfShape", 1, kMaxOpset, {DType::Int64}},
                         [](const Node& n) { return std::make_unique<OnesOfShape>(n); });
const KernelRegistrar r1({"test.kiln", "AddOne", 1, kMaxOpset, {DType::Float32}},
                         [](const Node& n) { return std::make_unique<AddOne>(n); });
const KernelRegistrar r2({"test.kiln", "Add2", 1, kMaxOpset, {DType::Float32}},
                         [](const Node& n) { return std::make_unique<Add2>(n); });
const KernelRegistrar r3({"test.kiln", "Flat", 1, kMaxOpset, {}},
                         [](const Node& n) { return std::make_unique<Flat>(n); });
const KernelRegistrar r4({"test.kiln", "ShapeOf", 1, kMaxOpset, {}},
                         [](const Node& n) { return std::make_unique<ShapeOf>(n); });

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  return kiln::test::domain_node("test.kiln", op, std::move(in), std::move(out));
}

ValueInfo info(const std::string& name, const std::vector<int64_t>& dims) { return kiln::test::float_info(name, dims); }

// x -> AddOne -> a -> AddOne -> b -> AddOne -> c -> Flat -> y, nodes listed out of order.
Model chain_model() {
  Model m;
  m.opsets = {{"", 17}, {"test.kiln", 1}};
  m.graph.inputs = {info("x", {-1, 4})};
  m.graph.outputs = {info("y", {-1})};
  m.graph.nodes = {node("AddOne", {"b"}, {"c"}), node("AddOne", {"x"}, {"a"}), node("Flat", {"c"}, {"y"}),
                   node("AddOne", {"a"}, {"b"})};
  return m;
}

TEST(Session, RunsNodesInTopologicalOrderWithInPlaceReuse) {
  Session s(chain_model());
  Tensor x = Tensor::from_vector<float>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  g_compute_calls = 0;
  auto out = s.run({{"x", x}});
  ASSERT_EQ(out.count("y"), 1u);
  EXPECT_EQ(out["y"].shape(), (Shape{8}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out["y"].data<float>()[i], i + 3.f);
  EXPECT_EQ(g_compute_calls, 3);                   // Flat is a view: no compute
  EXPECT_EQ(x.data<float>()[0], 0.f);              // the feed is never written
  EXPECT_EQ(s.last_plan_stats().peak_bytes, 64u);  // a, b, c share one 32-byte buffer (aligned to 64)
  EXPECT_EQ(s.last_plan_stats().unplanned_bytes, 3 * 64u);
}

TEST(Session, OutputsDoNotAliasTheArena) {
  Session s(chain_model());
  auto first = s.run({{"x", Tensor::zeros(DType::Float32, {1, 4})}});
  auto second = s.run({{"x", Tensor::from_vector<float>({1, 4}, {10, 10, 10, 10})}});
  EXPECT_EQ(first["y"].data<float>()[0], 3.f);
  EXPECT_EQ(second["y"].data<float>()[0], 13.f);
}

TEST(Session, ProfileCountsKernelCallsPerOpType) {
  SessionOptions o;
  o.profile = true;
  Session s(chain_model(), o);
  for (int i = 0; i < 2; ++i) s.run({{"x", Tensor::zeros(DType::Float32, {1, 4})}});
  const auto prof = s.profile();
  // Flat is a view (an alias-only step): it is counted too, so that the profile covers every step.
  ASSERT_EQ(prof.size(), 2u);
  std::map<std::string, int64_t> calls;
  for (const OpProfile& p : prof) {
    calls[p.op_type] = p.calls;
    EXPECT_GE(p.total_ms, 0.0);
  }
  EXPECT_EQ(calls["test.kiln.AddOne"], 6);
  EXPECT_EQ(calls["test.kiln.Flat"], 2);
  // Per node: each of the 4 nodes ran twice, labelled, with the shapes it ran on.
  const auto nodes = s.node_profile();
  ASSERT_EQ(nodes.size(), 4u);
  double node_total = 0, op_total = 0;
  for (const NodeProfile& n : nodes) {
    EXPECT_EQ(n.calls, 2);
    EXPECT_NE(n.label.find("test.kiln."), std::string::npos) << n.label;
    EXPECT_NE(n.shapes.find(" -> "), std::string::npos) << n.shapes;
    node_total += n.total_ms;
  }
  for (const OpProfile& p : prof) op_total += p.total_ms;
  EXPECT_NEAR(node_total, op_total, 1e-9);
  for (size_t i = 1; i < nodes.size(); ++i) EXPECT_GE(nodes[i - 1].total_ms, nodes[i].total_ms);
  s.reset_profile();
  EXPECT_TRUE(s.node_profile().empty());
  Session quiet(chain_model());
  quiet.run({{"x", Tensor::zeros(DType::Float32, {1, 4})}});
  EXPECT_TRUE(quiet.profile().empty());
}

TEST(Session, PlansOncePerInputSignature) {
  Session s(chain_model());
  s.run({{"x", Tensor::zeros(DType::Float32, {1, 4})}});
  const PlanStats* first = &s.last_plan_stats();
  s.run({{"x", Tensor::zeros(DType::Float32, {3, 4})}});
  EXPECT_NE(first, &s.last_plan_stats());
  s.run({{"x", Tensor::zeros(DType::Float32, {1, 4})}});
  EXPECT_EQ(first, &s.last_plan_stats());
}

// Batches padded to their own length give a new signature each: the cache keeps the most recently
// used kMaxPlans plans, and a signature planned again after eviction runs as before.
TEST(Session, KeepsABoundedNumberOfPlansLeastRecentlyUsedFirstOut) {
  Session s(chain_model());
  const auto run_rows = [&](int64_t rows) {
    std::vector<float> values(static_cast<size_t>(rows * 4));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    auto out = s.run({{"x", Tensor::from_vector<float>({rows, 4}, values)}});
    ASSERT_EQ(out["y"].shape(), (Shape{rows * 4}));
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(out["y"].data<float>()[i], values[i] + 3.f);
  };
  run_rows(1);
  const PlanStats* one = &s.last_plan_stats();
  for (int64_t rows = 2; rows <= static_cast<int64_t>(Session::kMaxPlans); ++rows) run_rows(rows);
  EXPECT_EQ(s.num_plans(), Session::kMaxPlans);
  run_rows(1);  // the oldest, used again: now the most recent
  EXPECT_EQ(one, &s.last_plan_stats());
  run_rows(100);  // evicts rows=2, the least recently used
  EXPECT_EQ(s.num_plans(), Session::kMaxPlans);
  run_rows(1);
  EXPECT_EQ(one, &s.last_plan_stats());  // kept
  for (int64_t rows = 200; rows < 200 + 3 * static_cast<int64_t>(Session::kMaxPlans); ++rows) run_rows(rows);
  EXPECT_EQ(s.num_plans(), Session::kMaxPlans);
  run_rows(2);  // planned anew after its eviction, same results
  EXPECT_EQ(s.num_plans(), Session::kMaxPlans);
}

TEST(Session, DiamondKeepsValuesAliveUntilTheirLastUse) {
  // a = x+1; b = a+1; y = a + b: a must survive b's step, so b cannot run over a.
  Model m;
  m.opsets = {{"test.kiln", 1}};
  m.graph.inputs = {info("x", {3})};
  m.graph.outputs = {info("y", {3})};
  m.graph.nodes = {node("AddOne", {"x"}, {"a"}), node("AddOne", {"a"}, {"b"}), node("Add2", {"a", "b"}, {"y"})};
  Session s(std::move(m));
  auto out = s.run({{"x", Tensor::from_vector<float>({3}, {1, 2, 3})}});
  EXPECT_EQ(out["y"].data<float>()[0], 2.f + 3.f);
  EXPECT_EQ(out["y"].data<float>()[2], 4.f + 5.f);
}

TEST(Session, FoldsShapeArithmeticAndInitializerWork) {
  Model m;
  m.opsets = {{"test.kiln", 1}};
  m.graph.inputs = {info("x", {2})};
  m.graph.outputs = {info("y", {2}), info("s", {1})};
  m.graph.initializers["w"] = Tensor::from_vector<float>({2}, {5, 6});
  m.graph.nodes = {node("AddOne", {"w"}, {"w1"}), node("Add2", {"x", "w1"}, {"y"}), node("ShapeOf", {"x"}, {"s"})};
  Session s(std::move(m));
  g_compute_calls = 0;
  auto out = s.run({{"x", Tensor::from_vector<float>({2}, {1, 1})}});
  EXPECT_EQ(s.last_plan_stats().num_folded, 2u);
  EXPECT_EQ(s.last_plan_stats().num_steps, 1u);
  EXPECT_EQ(out["y"].data<float>()[1], 8.f);
  EXPECT_EQ(out["s"].data<int64_t>()[0], 2);
  g_compute_calls = 0;
  s.run({{"x", Tensor::from_vector<float>({2}, {1, 1})}});
  EXPECT_EQ(g_compute_calls, 1);  // only Add2 runs; the folded AddOne does not
}

// y = AddOne(OnesOfShape(s)): s is fed, so both steps are planned as dynamic.
Model ones_of_fed_shape_model() {
  Model m;
  m.opsets = {{"test.kiln", 1}};
  ValueInfo s_info = info("s", {2});
  s_info.dtype = DType::Int64;
  m.graph.inputs = {s_info};
  m.graph.outputs = {info("y", {-1, -1})};
  m.graph.nodes = {node("OnesOfShape", {"s"}, {"o"}), node("AddOne", {"o"}, {"y"})};
  return m;
}

TEST(Session, ShapesThatDependOnFedDataAreInferredAtRunTime) {
  Session s(ones_of_fed_shape_model());
  auto a = s.run({{"s", Tensor::from_vector<int64_t>({2}, {2, 3})}});
  EXPECT_EQ(s.last_plan_stats().num_dynamic_steps, 2u);
  EXPECT_EQ(a["y"].shape(), (Shape{2, 3}));
  EXPECT_EQ(a["y"].data<float>()[5], 2.f);
  auto b = s.run({{"s", Tensor::from_vector<int64_t>({2}, {4, 1})}});  // same signature, new shape
  EXPECT_EQ(b["y"].shape(), (Shape{4, 1}));
}

TEST(Session, ProfileCountsStepsWhoseShapesAreKnownOnlyAtRunTime) {
  SessionOptions o;
  o.profile = true;
  Session s(ones_of_fed_shape_model(), o);
  for (int i = 0; i < 3; ++i) s.run({{"s", Tensor::from_vector<int64_t>({2}, {2, 3})}});
  ASSERT_EQ(s.last_plan_stats().num_dynamic_steps, 2u);
  std::map<std::string, int64_t> calls;
  for (const OpProfile& p : s.profile()) calls[p.op_type] = p.calls;
  EXPECT_EQ(calls["test.kiln.OnesOfShape"], 3);
  EXPECT_EQ(calls["test.kiln.AddOne"], 3);
}

TEST(Session, BadFeedsAreClearErrors) {
  Session s(chain_model());
  expect_error<InvalidArgument>([&] { s.run({}); }, "input 'x' (float[batch, 4]) is missing");
  expect_error<ShapeError>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {2, 5})}});
      },
      "input 'x' expects shape float[batch, 4] but was given float[2, 5]");
  expect_error<TypeError>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Int64, {2, 4})}});
      },
      "expects float[batch, 4] but was given int64[2, 4]");
  expect_error<InvalidArgument>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {2, 4})}, {"z", Tensor::zeros(DType::Float32, {1})}});
      },
      "'z' is not an input of the model");
  expect_error<InvalidArgument>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {2, 4})}}, {"nope"});
      },
      "'nope' is not an output");
}

TEST(Session, KernelShapeErrorsNameTheNode) {
  Model m;
  m.opsets = {{"test.kiln", 1}};
  m.graph.inputs = {info("x", {2}), info("z", {3})};
  m.graph.outputs = {info("y", {2})};
  m.graph.nodes = {node("Add2", {"x", "z"}, {"y"})};
  Session s(std::move(m));
  expect_error<ShapeError>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {2})}, {"z", Tensor::zeros(DType::Float32, {3})}});
      },
      "node 'y_node' (test.kiln.Add2): Add2: shapes differ: [2] vs [3]");
}

TEST(Session, UnknownOpNamesOpDomainAndOpset) {
  Model m;
  m.opsets = {{"", 17}};
  m.graph.inputs = {info("x", {2})};
  m.graph.outputs = {info("y", {2})};
  Node n;
  n.op_type = "FrobnicateZ";
  n.name = "f";
  n.inputs = {"x"};
  n.outputs = {"y"};
  m.graph.nodes = {n};
  Session s(std::move(m));
  expect_error<Unsupported>(
      [&] {
        s.run({{"x", Tensor::zeros(DType::Float32, {2})}});
      },
      "node 'f' (FrobnicateZ): op FrobnicateZ (domain 'ai.onnx', opset 17) is not implemented by Kiln");
}

TEST(Session, CycleIsAnInvalidModel) {
  Model m;
  m.opsets = {{"test.kiln", 1}};
  m.graph.inputs = {info("x", {2})};
  m.graph.outputs = {info("b", {2})};
  m.graph.nodes = {node("Add2", {"x", "b"}, {"a"}), node("AddOne", {"a"}, {"b"})};
  expect_error<InvalidModel>([&] { Session s(std::move(m)); }, "cycle");
}

}  // namespace
}  // namespace kiln
