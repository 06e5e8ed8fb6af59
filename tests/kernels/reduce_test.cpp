// The Reduce* ops through run_node against a naive double reference: every subset of axes, keepdims,
// negative axes, axes as attribute or input by opset, noop_with_empty_axes, integers, empty tensors
// (each op's identity), NaN and ±inf, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Tensor axes_tensor(const std::vector<int64_t>& axes) {
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(axes.size())}, axes);
}

// Runs op with `axes` as attribute (attr_opset) or as input (input_opset), so both forms are tested.
Tensor reduce(const std::string& op, const Tensor& x, const std::optional<std::vector<int64_t>>& axes, int64_t opset,
              int64_t keepdims = 1, int64_t noop = -1) {
  Node n;
  n.name = "r";
  n.op_type = op;
  n.inputs = {"data"};
  n.outputs = {"reduced"};
  n.attrs["keepdims"] = Attribute::of_int(keepdims);
  if (noop >= 0) n.attrs["noop_with_empty_axes"] = Attribute::of_int(noop);
  const bool axes_input = op == "ReduceSum" ? opset >= 13 : opset >= 18;
  std::vector<Tensor> in = {x};
  if (axes && axes_input) {
    n.inputs.push_back("axes");
    in.push_back(axes_tensor(*axes));
  } else if (axes) {
    n.attrs["axes"] = Attribute::of_ints(*axes);
  }
  return run_node(n, in, opset).at(0);
}

// Reference: accumulate every element into its output slot in double.
std::vector<double> ref_reduce(const Tensor& x, const std::vector<bool>& red, bool mean) {
  const Shape& s = x.shape();
  Shape out;
  for (size_t i = 0; i < s.size(); ++i)
    if (!red[i]) out.push_back(s[i]);
  std::vector<double> acc(static_cast<size_t>(numel(out)), 0.0);
  int64_t count = 1;
  for (size_t i = 0; i < s.size(); ++i)
    if (red[i]) count *= s[i];
  for (int64_t lin = 0; lin < x.numel(); ++lin) {
    int64_t rem = lin, o = 0, ostride = 1;
    for (size_t i = s.size(); i-- > 0;) {
      const int64_t idx = rem % s[i];
      rem /= s[i];
      if (!red[i]) {
        o += idx * ostride;
        ostride *= s[i];
      }
    }
    acc[static_cast<size_t>(o)] += x.item_as_double(lin);
  }
  if (mean)
    for (double& v : acc) v /= static_cast<double>(count);
  return acc;
}

TEST(Reduce, EverySubsetOfAxesMatchesDoubleReference) {
  const Tensor x = random_f32({3, 4, 5, 6}, 1, -2.f, 2.f);
  for (const std::string op : {"ReduceSum", "ReduceMean"}) {
    for (int64_t opset : {11, 13, 18}) {
      for (int mask = 1; mask < 16; ++mask) {
        std::vector<int64_t> axes;
        std::vector<bool> red(4, false);
        for (int a = 0; a < 4; ++a)
          if (mask & (1 << a)) {
            axes.push_back(a % 2 ? a - 4 : a);  // some negative axes too
            red[static_cast<size_t>(a)] = true;
          }
        for (int64_t keep : {0, 1}) {
          const Tensor y = reduce(op, x, axes, opset, keep);
          Shape want_shape;
          for (size_t i = 0; i < 4; ++i)
            if (!red[i]) want_shape.push_back(x.shape()[i]);
            else if (keep) want_shape.push_back(1);
          ASSERT_EQ(y.shape(), want_shape) << op << " mask " << mask;
          const std::vector<double> want = ref_reduce(x, red, op == "ReduceMean");
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(y.data<float>()[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-7)
                << op << " opset " << opset << " mask " << mask << " at " << i;
        }
      }
    }
  }
}

TEST(Reduce, LargeTensorsUseSeveralThreadsAndAgree) {
  for (const Shape& s : {Shape{2, 100000}, Shape{1000, 64}, Shape{64, 50, 40}}) {
    const Tensor x = random_f32(s, 2, -2.f, 2.f);
    for (int64_t axis = 0; axis < static_cast<int64_t>(s.size()); ++axis) {
      std::vector<bool> red(s.size(), false);
      red[static_cast<size_t>(axis)] = true;
      const Tensor y = reduce("ReduceMean", x, std::vector<int64_t>{axis}, 17, 0);
      const std::vector<double> want = ref_reduce(x, red, true);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(y.data<float>()[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-7) << to_string(s) << " axis " << axis;
    }
  }
}

TEST(Reduce, DefaultAxesReduceEverythingUnlessNoop) {
  const Tensor x = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  const Tensor all = reduce("ReduceSum", x, std::nullopt, 13);
  EXPECT_EQ(all.shape(), (Shape{1, 1}));
  EXPECT_EQ(all.data<float>()[0], 10.f);
  const Tensor all_attr = reduce("ReduceMean", x, std::nullopt, 13, 0);
  EXPECT_EQ(all_attr.shape(), Shape{});
  EXPECT_EQ(all_attr.data<float>()[0], 2.5f);
  const Tensor empty_axes = reduce("ReduceSum", x, std::vector<int64_t>{}, 13, 1, 0);
  EXPECT_EQ(empty_axes.data<float>()[0], 10.f);
  const Tensor noop = reduce("ReduceSum", x, std::vector<int64_t>{}, 13, 1, 1);
  EXPECT_EQ(noop.shape(), (Shape{2, 2}));
  EXPECT_EQ(noop.data<float>()[3], 4.f);
  const Tensor noop_mean = reduce("ReduceMean", x, std::nullopt, 18, 1, 1);
  EXPECT_EQ(noop_mean.shape(), (Shape{2, 2}));
  const Tensor scalar = reduce("ReduceMean", Tensor::scalar<float>(3.5f), std::nullopt, 13);
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(scalar.data<float>()[0], 3.5f);
}

TEST(Reduce, IntegersHalfAndEmptyTensors) {
  const Tensor xi = Tensor::from_vector<int32_t>({2, 3}, {1, 2, 4, -7, 5, 3});
  EXPECT_EQ(reduce("ReduceSum", xi, std::vector<int64_t>{1}, 13, 0).to_int64_vector(), (std::vector<int64_t>{7, 1}));
  // Integer mean truncates toward zero: 7/3 = 2, 1/3 = 0.
  EXPECT_EQ(reduce("ReduceMean", xi, std::vector<int64_t>{1}, 13, 0).to_int64_vector(), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(
      reduce("ReduceSum", Tensor::from_vector<int64_t>({2}, {INT64_MAX, 1}), std::nullopt, 13, 0).data<int64_t>()[0],
      INT64_MIN);  // wraps
  const Tensor xh = Tensor::from_vector<Half>({3}, {float_to_half(1.5f), float_to_half(2.f), float_to_half(-0.25f)});
  const Tensor yh = reduce("ReduceMean", xh, std::nullopt, 13, 0);
  EXPECT_EQ(yh.dtype(), DType::Float16);
  EXPECT_EQ(yh.item_as_double(0), static_cast<double>(half_to_float(float_to_half(3.25f / 3))));

  const Tensor e = Tensor::zeros(DType::Float32, {0, 3});
  const Tensor se = reduce("ReduceSum", e, std::vector<int64_t>{0}, 13);
  EXPECT_EQ(se.shape(), (Shape{1, 3}));
  EXPECT_EQ(se.data<float>()[2], 0.f);
  EXPECT_TRUE(std::isnan(reduce("ReduceMean", e, std::vector<int64_t>{0}, 13).data<float>()[0]));
  EXPECT_EQ(reduce("ReduceSum", e, std::vector<int64_t>{1}, 13, 0).shape(), (Shape{0}));
  EXPECT_THROW(reduce("ReduceMean", Tensor::zeros(DType::Int32, {0, 3}), std::vector<int64_t>{0}, 13), InvalidArgument);
}

TEST(Reduce, BadAxesAreErrorsNamingThem) {
  const Tensor x = Tensor::zeros(DType::Float32, {2, 3});
  expect_error<ShapeError>([&] { reduce("ReduceSum", x, std::vector<int64_t>{2}, 13); },
                           "axes entry 2 is out of range for rank 2");
  expect_error<InvalidModel>(
      [&] {
        reduce("ReduceMean", x, std::vector<int64_t>{1, -1}, 13);
      },
      "axes [1, -1] name axis 1 twice");
}

TEST(Reduce, AxesInputMustBeKnownWhenPlanning) {
  Node n;
  n.name = "r";
  n.op_type = "ReduceSum";
  n.inputs = {"data", "axes"};
  n.outputs = {"reduced"};
  auto k = KernelRegistry::global().resolve("", "ReduceSum", 13, DType::Float32).create(n);
  InferContext ctx{n, 13, {TensorMeta{DType::Float32, {2, 3}, false, {}}, TensorMeta{DType::Int64, {1}, false, {}}}};
  EXPECT_THROW(k->infer(ctx), ValueUnknown);  // the planner's cue to infer this node at run time
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The elements each output slot reduces, in order, for reductions that are not sums.
std::vector<std::vector<double>> gather_slots(const Tensor& x, const std::vector<bool>& red) {
  const Shape& s = x.shape();
  int64_t slots = 1;
  for (size_t i = 0; i < s.size(); ++i)
    if (!red[i]) slots *= s[i];
  std::vector<std::vector<double>> out(static_cast<size_t>(slots));
  for (int64_t lin = 0; lin < x.numel(); ++lin) {
    int64_t rem = lin, o = 0, ostride = 1;
    for (size_t i = s.size(); i-- > 0;) {
      const int64_t idx = rem % s[i];
      rem /= s[i];
      if (!red[i]) {
        o += idx * ostride;
        ostride *= s[i];
      }
    }
    out[static_cast<size_t>(o)].push_back(x.item_as_double(lin));
  }
  return out;
}

double ref_op(const std::string& op, const std::vector<double>& v) {
  double r = op == "ReduceMax" ? -INFINITY : op == "ReduceMin" ? INFINITY : op == "ReduceProd" ? 1.0 : 0.0;
  double m = -INFINITY;
  for (double e : v) m = std::max(m, e);
  for (double e : v) {
    if (op == "ReduceMax") r = std::max(r, e);
    else if (op == "ReduceMin") r = std::min(r, e);
    else if (op == "ReduceProd") r *= e;
    else if (op == "ReduceL1") r += std::fabs(e);
    else if (op == "ReduceL2" || op == "ReduceSumSquare") r += e * e;
    else if (op == "ReduceLogSum") r += e;
    else r += std::exp(e - m);  // ReduceLogSumExp
  }
  if (op == "ReduceL2") return std::sqrt(r);
  if (op == "ReduceLogSum") return std::log(r);
  if (op == "ReduceLogSumExp") return m + std::log(r);
  return r;
}

const std::vector<std::string> kOtherOps = {"ReduceMax", "ReduceMin",    "ReduceProd",      "ReduceL1",
                                            "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};

// axes attribute at opset 13, input at 18: both forms, every subset of 3 axes, both keepdims.
TEST(ReduceOthers, EverySubsetOfAxesMatchesDoubleReference) {
  Tensor x = random_f32({4, 5, 6}, 3, -2.f, 2.f);
  // In [0.6, 1.4]: positive sums for LogSum, and products of 120 elements that stay within float.
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.f + 0.2f * x.data<float>()[i];
  for (const std::string& op : kOtherOps)
    for (int64_t opset : {13, 18})
      for (int mask = 1; mask < 8; ++mask)
        for (int64_t keep : {0, 1}) {
          std::vector<int64_t> axes;
          std::vector<bool> red(3, false);
          for (int a = 0; a < 3; ++a)
            if (mask & (1 << a)) {
              axes.push_back(a == 2 ? -1 : a);
              red[static_cast<size_t>(a)] = true;
            }
          const Tensor y = reduce(op, x, axes, opset, keep);
          const auto slots = gather_slots(x, red);
          ASSERT_EQ(y.numel(), static_cast<int64_t>(slots.size()));
          for (size_t i = 0; i < slots.size(); ++i) {
            const double want = ref_op(op, slots[i]);
            ASSERT_NEAR(y.data<float>()[i], want, 2e-6 * std::fabs(want))
                << op << " opset " << opset << " mask " << mask;
          }
        }
}

TEST(ReduceOthers, LogSumExpDoesNotOverflowAndNaNPropagates) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector<float>(
      {4, 3}, {1000.f, 1000.f, 999.f, -inf, -inf, -inf, inf, 1.f, inf, std::nanf(""), 1.f, 2.f});
  const Tensor y = reduce("ReduceLogSumExp", x, std::vector<int64_t>{1}, 18, 0);
  EXPECT_NEAR(y.data<float>()[0], 1000.0 + std::log(2.0 + std::exp(-1.0)), 1e-4);
  EXPECT_EQ(y.data<float>()[1], -inf);
  EXPECT_EQ(y.data<float>()[2], inf);
  EXPECT_TRUE(std::isnan(y.data<float>()[3]));
  const Tensor mx = reduce("ReduceMax", x, std::vector<int64_t>{1}, 18, 0);
  EXPECT_EQ(mx.data<float>()[0], 1000.f);
  EXPECT_EQ(mx.data<float>()[1], -inf);
  EXPECT_TRUE(std::isnan(mx.data<float>()[3]));
  EXPECT_TRUE(std::isnan(reduce("ReduceMin", x, std::vector<int64_t>{1}, 18, 0).data<float>()[3]));
}

// Reducing zero elements gives each op's identity.
TEST(ReduceOthers, EmptyReductionsGiveTheIdentity) {
  const Tensor e = Tensor::zeros(DType::Float32, {0, 2});
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<std::string, float>> want = {
      {"ReduceMax", -inf}, {"ReduceMin", inf},     {"ReduceProd", 1.f},       {"ReduceL1", 0.f},
      {"ReduceL2", 0.f},   {"ReduceLogSum", -inf}, {"ReduceLogSumExp", -inf}, {"ReduceSumSquare", 0.f}};
  for (const auto& [op, v] : want) {
    const Tensor y = reduce(op, e, std::vector<int64_t>{0}, 18, 0);
    ASSERT_EQ(y.shape(), Shape{2}) << op;
    EXPECT_EQ(y.data<float>()[1], v) << op;
  }
  EXPECT_EQ(reduce("ReduceMax", Tensor::zeros(DType::Int32, {0}), std::nullopt, 18, 0).data<int32_t>()[0], INT32_MIN);
}

TEST(ReduceOthers, IntegerDtypes) {
  const Tensor xi = Tensor::from_vector<int32_t>({2, 3}, {3, -4, 0, -2, 5, 1});
  const auto run = [&](const std::string& op) {
    return reduce(op, xi, std::vector<int64_t>{1}, 18, 0).to_int64_vector();
  };
  EXPECT_EQ(run("ReduceMax"), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(run("ReduceMin"), (std::vector<int64_t>{-4, -2}));
  EXPECT_EQ(run("ReduceProd"), (std::vector<int64_t>{0, -10}));
  EXPECT_EQ(run("ReduceL1"), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(run("ReduceSumSquare"), (std::vector<int64_t>{25, 30}));
  EXPECT_EQ(run("ReduceL2"), (std::vector<int64_t>{5, 5}));  // sqrt(30) = 5.48 truncates
  const Tensor u8 = Tensor::from_vector<uint8_t>({3}, {7, 200, 9});
  EXPECT_EQ(reduce("ReduceMax", u8, std::nullopt, 18, 0).to_int64_vector(), (std::vector<int64_t>{200}));
  // 8-bit integers are Max/Min only.
  EXPECT_THROW(reduce("ReduceProd", u8, std::nullopt, 18, 0), Unsupported);
}

TEST(ReduceOthers, NoopAndBadAxesInput) {
  const Tensor x = Tensor::from_vector<float>({2}, {-1.f, 2.f});
  const Tensor noop = reduce("ReduceL1", x, std::vector<int64_t>{}, 18, 1, 1);
  EXPECT_EQ(noop.data<float>()[0], -1.f);  // the input, unchanged, as the spec says
  Node n;
  n.name = "r";
  n.op_type = "ReduceMax";
  n.inputs = {"data", "axes"};
  n.outputs = {"reduced"};
  expect_error<TypeError>(
      [&] {
        run_node(n, {x, Tensor::from_vector<int32_t>({1}, {0})}, 18);
      },
      "axes 'axes' must be a 1-D int64 tensor, got int32[1]");
}

}  // namespace
}  // namespace kiln
