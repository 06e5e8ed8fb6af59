// Module::operator(): hooks in call order with the actual tensors, the plan cache and what
// invalidates it, BatchNorm's running statistics updated as torch updates them, Dropout.
#include <gtest/gtest.h>

#include <cmath>

#include "models/nn/nn_test_modules.h"
#include "test_util.h"

namespace kiln::nn {
namespace {

using kiln::test::expect_error;
using namespace kiln::nn::testing;

Tensor sample(Shape shape, double scale = 1.0) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(scale * std::sin(0.7 * double(i) + 0.3));
  return t;
}

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.item_as_double(i), b.item_as_double(i)) << i;
}

TEST(NnRun, HooksFireInCallOrderWithTheTensors) {
  manual_seed(0);
  auto a = std::make_shared<TLinear>(3, 3);
  auto relu = std::make_shared<TRelu>();
  auto net = std::make_shared<Sequential>(std::vector<ModulePtr>{a, relu, a});
  std::vector<std::string> events;
  std::vector<Tensor> a_outputs, relu_inputs, net_outputs;
  a->register_forward_pre_hook([&](Module& m, const std::vector<Tensor>& in) {
    EXPECT_EQ(&m, a.get());
    events.push_back("a.pre");
    EXPECT_EQ(in[0].shape(), (Shape{2, 3}));
  });
  RemovableHandle h =
      a->register_forward_hook([&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>& out) {
        events.push_back("a");
        a_outputs.push_back(out[0]);
      });
  relu->register_forward_pre_hook([&](Module&, const std::vector<Tensor>& in) {
    events.push_back("relu.pre");
    relu_inputs.push_back(in[0]);
  });
  net->register_forward_hook([&](Module&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
    events.push_back("net");
    net_outputs.push_back(out[0]);
  });
  const Tensor x = sample({2, 3});
  const std::vector<Tensor> y = (*net)({x});
  EXPECT_EQ(events, (std::vector<std::string>{"a.pre", "a", "relu.pre", "a.pre", "a", "net"}));
  ASSERT_EQ(a_outputs.size(), 2u);
  expect_same(a_outputs[0], relu_inputs[0]);  // the first call's output feeds relu
  expect_same(a_outputs[1], y[0]);            // the second call is the last
  expect_same(net_outputs[0], y[0]);
  h.remove();
  events.clear();
  (*net)({x});
  EXPECT_EQ(events, (std::vector<std::string>{"a.pre", "relu.pre", "a.pre", "net"}));
}

TEST(NnRun, CacheSeesNewParametersAndModes) {
  manual_seed(1);
  auto net = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<TLinear>(3, 2)});
  const Tensor x = sample({4, 3});
  const Tensor y0 = (*net)({x})[0].clone();
  // load_state_dict: new values used.
  std::map<std::string, Tensor> state;
  state["0.weight"] = Tensor::zeros(DType::Float32, {2, 3});
  state["0.bias"] = Tensor::from_vector<float>({2}, {1.5f, -3});
  net->load_state_dict(state);
  Tensor y1 = (*net)({x})[0];
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(y1.item_as_double(r * 2), 1.5);
    EXPECT_EQ(y1.item_as_double(r * 2 + 1), -3.0);
  }
  // Values changed in place are fed on the next run too.
  net->get_parameter("0.bias").data<float>()[0] = 4;
  EXPECT_EQ((*net)({x})[0].item_as_double(0), 4.0);
  // Another input shape: another plan, same parameters.
  EXPECT_EQ((*net)({sample({1, 3})})[0].shape(), (Shape{1, 2}));
  EXPECT_NE(y0.item_as_double(0), 4.0);
  expect_error<ShapeError>([&] { (*net)({sample({2, 5})}); }, "5");
}

TEST(NnRun, TrainingBatchNormUpdatesRunningStatisticsAsTorch) {
  manual_seed(2);
  auto bn = std::make_shared<TBatchNorm1d>(3);
  auto net = std::make_shared<Sequential>(std::vector<ModulePtr>{bn});
  const Tensor x = sample({5, 3}, 2.0);
  std::vector<double> mean(3, 0), var(3, 0);  // batch mean and unbiased variance (torch's update)
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t n = 0; n < 5; ++n) mean[c] += x.item_as_double(n * 3 + c) / 5;
    for (int64_t n = 0; n < 5; ++n) var[c] += std::pow(x.item_as_double(n * 3 + c) - mean[c], 2) / 4;
  }
  const Tensor y = (*net)({x})[0];
  const Tensor& rm = *bn->named_buffers()[0].second;
  const Tensor& rv = *bn->named_buffers()[1].second;
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(rm.item_as_double(c), 0.1 * mean[c], 1e-6);
    EXPECT_NEAR(rv.item_as_double(c), 0.9 + 0.1 * var[c], 1e-6);
    const double biased = var[c] * 4 / 5;
    for (int64_t n = 0; n < 5; ++n)
      EXPECT_NEAR(y.item_as_double(n * 3 + c), (x.item_as_double(n * 3 + c) - mean[c]) / std::sqrt(biased + 1e-5),
                  1e-5);
  }
  EXPECT_EQ(bn->named_buffers()[2].second->data<int64_t>()[0], 1);
  (*net)({x});  // the cached plan reads the updated statistics
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(rm.item_as_double(c), 0.9 * 0.1 * mean[c] + 0.1 * mean[c], 1e-6);
    EXPECT_NEAR(rv.item_as_double(c), 0.9 * (0.9 + 0.1 * var[c]) + 0.1 * var[c], 1e-6);
  }
  EXPECT_EQ(bn->named_buffers()[2].second->data<int64_t>()[0], 2);
  // Eval: the running statistics normalise and stay as they are.
  net->eval();
  const double rm0 = rm.item_as_double(0), rv0 = rv.item_as_double(0);
  const Tensor e = (*net)({x})[0];
  EXPECT_EQ(rm.item_as_double(0), rm0);
  EXPECT_EQ(bn->named_buffers()[2].second->data<int64_t>()[0], 2);
  EXPECT_NEAR(e.item_as_double(0), (x.item_as_double(0) - rm0) / std::sqrt(rv0 + 1e-5), 1e-5);
}

TEST(NnRun, DropoutDrawsNewMasksEachRunAndIsIdentityInEval) {
  auto net = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<TDropout>(0.5)});
  Tensor x = Tensor::empty(DType::Float32, {64});
  for (int64_t i = 0; i < 64; ++i) x.data<float>()[i] = 1.0f;
  const Tensor a = (*net)({x})[0].clone(), b = (*net)({x})[0].clone();
  int kept = 0, differ = 0;
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_TRUE(a.item_as_double(i) == 0.0 || a.item_as_double(i) == 2.0);
    kept += a.item_as_double(i) != 0.0;
    differ += a.item_as_double(i) != b.item_as_double(i);
  }
  EXPECT_GT(kept, 16);
  EXPECT_LT(kept, 48);
  EXPECT_GT(differ, 0);
  net->eval();
  expect_same((*net)({x})[0], x);
}

}  // namespace
}  // namespace kiln::nn
