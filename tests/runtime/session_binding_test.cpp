// Session::run_with_binding: inputs and outputs by position, outputs written into the caller's
// tensors, in-place updates allowed only where they are safe. Test-only kernels in the domain
// "test.binding", so that these tests depend on nothing but the runtime.
#include <gtest/gtest.h>

#include "kiln/kernel.h"
#include "kiln/session.h"
#include "runtime/runtime_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

// (x, g, m) -> (x - m', m' = m + g): elementwise; x_new may overwrite x and m_new m.
class Update : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta x{ctx.dtype(0), ctx.shape(0)};
    return {x, x};
  }
  void compute(ComputeContext& ctx) override {
    const float* x = ctx.input(0).data<float>();
    const float* g = ctx.input(1).data<float>();
    const float* m = ctx.input(2).data<float>();
    float* x_new = ctx.output(0).data<float>();
    float* m_new = ctx.output(1).data<float>();
    for (int64_t i = 0; i < ctx.input(0).numel(); ++i) {
      const float mi = m[i] + g[i];
      x_new[i] = x[i] - mi;
      m_new[i] = mi;
    }
  }
  bool output_may_overwrite(size_t output, size_t input) const override { return input == (output == 0 ? 0 : 2); }
};

// y = a + b; may not write over either.
class Sum : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override { return {{ctx.dtype(0), ctx.shape(0)}}; }
  void compute(ComputeContext& ctx) override {
    const float* a = ctx.input(0).data<float>();
    const float* b = ctx.input(1).data<float>();
    float* y = ctx.output(0).data<float>();
    for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = a[i] + b[i];
  }
};

// y = x viewed as 1-D.
class View : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override { return {{ctx.dtype(0), {numel(ctx.shape(0))}}}; }
  void compute(ComputeContext& ctx) override { ctx.output(0).copy_from(ctx.input(0).reshape(ctx.output(0).shape())); }
  bool output_aliases_input() const override { return true; }
};

const KernelRegistrar r1({"test.binding", "Update", 1, kMaxOpset, {DType::Float32}},
                         [](const Node& n) { return std::make_unique<Update>(n); });
const KernelRegistrar r2({"test.binding", "Sum", 1, kMaxOpset, {DType::Float32}},
                         [](const Node& n) { return std::make_unique<Sum>(n); });
const KernelRegistrar r3({"test.binding", "View", 1, kMaxOpset, {}},
                         [](const Node& n) { return std::make_unique<View>(n); });

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  return kiln::test::domain_node("test.binding", op, std::move(in), std::move(out));
}

ValueInfo info(const std::string& name, const std::vector<int64_t>& dims) { return kiln::test::float_info(name, dims); }

// inputs x, g, m; outputs x_new, m_new (one Update node), plus whatever `extra` adds.
Model update_model(std::vector<Node> extra = {}, std::vector<ValueInfo> extra_outputs = {}) {
  Model m;
  m.opsets = {{"test.binding", 1}};
  m.graph.inputs = {info("x", {4}), info("g", {4}), info("m", {4})};
  m.graph.outputs = {info("x_new", {4}), info("m_new", {4})};
  m.graph.nodes = {node("Update", {"x", "g", "m"}, {"x_new", "m_new"})};
  for (auto& n : extra) m.graph.nodes.push_back(std::move(n));
  for (auto& v : extra_outputs) m.graph.outputs.push_back(std::move(v));
  return m;
}

Tensor vec(std::vector<float> v) { return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v); }

TEST(SessionBinding, UpdatesInPlaceInTheCallersTensors) {
  Session s(update_model());
  Tensor x = vec({10, 20, 30, 40}), g = vec({1, 2, 3, 4}), m = vec({0, 0, 0, 0});
  const void* x_memory = x.raw_data();
  const void* m_memory = m.raw_data();
  std::vector<Tensor> outputs{x, m};  // handles sharing x's and m's memory: bound in place
  for (int step = 0; step < 2; ++step) s.run_with_binding({x, g, m}, outputs);
  // m = 2g after two steps; x = x0 - g - 2g.
  EXPECT_EQ(m.data<float>()[1], 4.f);
  EXPECT_EQ(x.data<float>()[1], 20.f - 2.f - 4.f);
  EXPECT_EQ(x.raw_data(), x_memory);
  EXPECT_EQ(m.raw_data(), m_memory);
  EXPECT_EQ(s.last_plan_stats().peak_bytes, 0u);  // bound outputs take no arena
}

TEST(SessionBinding, UndefinedOutputsAreReturnedAndSeparateOnesWritten) {
  Session s(update_model());
  Tensor x = vec({1, 2, 3, 4}), g = vec({1, 1, 1, 1}), m = vec({0, 0, 0, 0});
  Tensor m_out = Tensor::zeros(DType::Float32, {4});
  std::vector<Tensor> outputs{Tensor(), m_out};
  s.run_with_binding({x, g, m}, outputs);
  ASSERT_TRUE(outputs[0].defined());
  EXPECT_EQ(outputs[0].data<float>()[3], 3.f);
  EXPECT_EQ(m_out.data<float>()[3], 1.f);
  EXPECT_EQ(m.data<float>()[3], 0.f);  // the input is untouched
  EXPECT_EQ(x.data<float>()[3], 4.f);
}

TEST(SessionBinding, PlansOncePerSignatureAndBoundSet) {
  Session s(update_model());
  Tensor x = vec({1, 2, 3, 4}), g = vec({1, 1, 1, 1}), m = vec({0, 0, 0, 0});
  std::vector<Tensor> bound{x, m};
  s.run_with_binding({x, g, m}, bound);
  const PlanStats* first = &s.last_plan_stats();
  s.run_with_binding({x, g, m}, bound);
  EXPECT_EQ(first, &s.last_plan_stats());
  std::vector<Tensor> unbound(2);
  s.run_with_binding({x, g, m}, unbound);  // another bound set: another plan, with an arena
  EXPECT_NE(first, &s.last_plan_stats());
  EXPECT_GT(s.last_plan_stats().peak_bytes, 0u);
}

// The plan the binding cache holds may be evicted by plain runs of other signatures: the next
// bound call plans again instead of running a freed plan.
TEST(SessionBinding, APlanEvictedFromTheCacheIsPlannedAgain) {
  Model model = update_model();
  for (auto* list : {&model.graph.inputs, &model.graph.outputs})
    for (ValueInfo& v : *list) v.dims = {Dim{-1, "n"}};
  Session s(std::move(model));
  Tensor x = vec({1, 2, 3, 4}), g = vec({1, 1, 1, 1}), m = vec({0, 0, 0, 0});
  std::vector<Tensor> bound{x, m};
  s.run_with_binding({x, g, m}, bound);
  for (int64_t n = 5; n < 5 + static_cast<int64_t>(Session::kMaxPlans); ++n) {
    const Tensor z = Tensor::zeros(DType::Float32, {n});
    s.run({{"x", z}, {"g", z}, {"m", z}});
  }
  EXPECT_EQ(s.num_plans(), Session::kMaxPlans);
  s.run_with_binding({x, g, m}, bound);
  EXPECT_EQ(m.data<float>()[2], 2.f);  // m = 2g
  EXPECT_EQ(x.data<float>()[2], 3.f - 1.f - 2.f);
}

TEST(SessionBinding, AViewOutputIsCopiedIntoItsTensor) {
  Model model = update_model({node("View", {"m_new"}, {"flat"})}, {info("flat", {4})});
  Session s(std::move(model));
  Tensor x = vec({1, 2, 3, 4}), g = vec({5, 6, 7, 8}), m = vec({0, 0, 0, 0});
  Tensor flat = Tensor::zeros(DType::Float32, {4});
  std::vector<Tensor> outputs{Tensor(), Tensor(), flat};
  s.run_with_binding({x, g, m}, outputs);
  EXPECT_EQ(flat.data<float>()[2], 7.f);
}

TEST(SessionBinding, RejectsAnOutputOverAnInputThatIsReadLater) {
  // z = x + m_new reads x after Update: x_new may not take x's memory.
  Model model = update_model({node("Sum", {"x", "m_new"}, {"z"})}, {info("z", {4})});
  Session s(std::move(model));
  Tensor x = vec({1, 2, 3, 4}), g = vec({1, 1, 1, 1}), m = vec({0, 0, 0, 0});
  std::vector<Tensor> outputs{x, Tensor(), Tensor()};
  expect_error<InvalidArgument>(
      [&] {
        s.run_with_binding({x, g, m}, outputs);
      },
      {"output 'x_new'", "input 'x'", "still read after"});
  EXPECT_EQ(x.data<float>()[0], 1.f);  // checked before anything ran
}

TEST(SessionBinding, RejectsAnOutputOverAnInputItsKernelCannotOverwrite) {
  Session s(update_model());
  Tensor x = vec({1, 2, 3, 4}), g = vec({1, 1, 1, 1}), m = vec({0, 0, 0, 0});
  std::vector<Tensor> outputs{g, Tensor()};  // x_new over g: Update reads g[i] before writing x_new[i],
                                             // but does not declare it
  expect_error<InvalidArgument>(
      [&] {
        s.run_with_binding({x, g, m}, outputs);
      },
      {"output 'x_new'", "input 'g'", "cannot write that output over that input"});
  std::vector<Tensor> swapped{m, x};  // each over the other one's input
  expect_error<InvalidArgument>([&] { s.run_with_binding({x, g, m}, swapped); }, "cannot write");
}

TEST(SessionBinding, RejectsOverlappingAndPartlyOverlappingMemory) {
  Session s(update_model());
  Tensor x = vec({1, 2, 3, 4}), g = vec({1, 1, 1, 1}), m = vec({0, 0, 0, 0});
  Tensor same = Tensor::zeros(DType::Float32, {4});
  std::vector<Tensor> both{same, same};
  expect_error<InvalidArgument>([&] { s.run_with_binding({x, g, m}, both); }, "bound to overlapping memory");
  Tensor wide = Tensor::zeros(DType::Float32, {8});
  Tensor x_part = Tensor::view_of(wide.storage(), 0, DType::Float32, {4});                   // wide[0:4]
  Tensor shifted = Tensor::view_of(wide.storage(), 2 * sizeof(float), DType::Float32, {4});  // wide[2:6]
  std::vector<Tensor> partly{shifted, Tensor()};
  expect_error<InvalidArgument>([&] { s.run_with_binding({x_part, g, m}, partly); }, "partly overlaps input 'x'");
}

TEST(SessionBinding, RejectsBadCountsShapesAndNulls) {
  Session s(update_model());
  Tensor x = vec({1, 2, 3, 4}), g = vec({1, 1, 1, 1}), m = vec({0, 0, 0, 0});
  std::vector<Tensor> two(2);
  expect_error<InvalidArgument>([&] { s.run_with_binding({x, g}, two); }, "was given 2 inputs; the model has 3");
  std::vector<Tensor> one(1);
  expect_error<InvalidArgument>([&] { s.run_with_binding({x, g, m}, one); }, "was given 1 outputs; the model has 2");
  std::vector<Tensor> wrong{Tensor::zeros(DType::Float32, {5}), Tensor()};
  expect_error<ShapeError>([&] { s.run_with_binding({x, g, m}, wrong); }, {"output 'x_new' is float[4]", "float[5]"});
  expect_error<ShapeError>([&] { s.run_with_binding({x, g, vec({1, 2})}, two); }, "input 'm'");
  Tensor out;
  expect_error<InvalidArgument>(
      [&] {
        s.run_with_binding(std::vector<const Tensor*>{&x, nullptr, &m}, std::vector<Tensor*>{&out, &out});
      },
      "null tensor pointer");
}

}  // namespace
}  // namespace kiln
