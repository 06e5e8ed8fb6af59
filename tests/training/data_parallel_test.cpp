// The pieces of data-parallel training that run in one process (the ranks themselves:
// tests/python/test_distributed.py): Module's gradient-ready hook (every trainable parameter once
// per training call, with the gradient it ends up holding, the last layer's first as the backward
// pass makes them; after the call when it accumulates), DataParallel over a world of one (averages
// of one: the gradients unchanged; no_sync), and synchronized batch statistics through the
// kernels' reduction (a reduction that doubles every sum, as two ranks holding the same batch
// would, leaves the normalization as it was; a node asking for it without one is an error).
#include "kiln/data_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "kernels/cpu/statistics_reduce.h"
#include "kiln/distributed.h"
#include "kiln/kernel.h"
#include "kiln/training.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln::training {
namespace {

using kiln::test::expect_error;
using kiln::testing::class_labels;
using kiln::testing::random_tensor;

struct TrainRun {
  CheckpointState state;
  std::unique_ptr<Module> module;
  explicit TrainRun(const std::filesystem::path& dir)
      : state(CheckpointState::load_checkpoint((dir / "checkpoint").string())),
        module(std::make_unique<Module>((dir / "training_model.onnx").string(), state)) {}
  std::vector<Tensor> batch(uint64_t seed) const { return {random_tensor({8, 4}, seed), class_labels(8, 3, seed + 1)}; }
};

TEST(GradientReadyHook, EachTrainableGradientOncePerCallAsItEndsUp) {
  TrainRun r(kiln::testing::write_bn_mlp_artifacts("grad_hook", OptimType::SGD));
  std::vector<std::string> order;
  std::map<std::string, std::vector<float>> seen;
  r.module->set_gradient_ready_hook([&](const std::string& name, Tensor& grad) {
    order.push_back(name);
    seen[name] = std::vector<float>(grad.data<float>(), grad.data<float>() + grad.numel());
  });
  (*r.module)(r.batch(1));
  std::set<std::string> trainable;
  for (const auto& name : r.module->parameter_names())
    if (r.state.parameter(name).requires_grad()) trainable.insert(name);
  EXPECT_EQ(std::set<std::string>(order.begin(), order.end()), trainable);
  EXPECT_EQ(order.size(), trainable.size());
  // The backward pass makes the last layer's gradients before the first layer's.
  const auto at = [&](const char* prefix) {
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i].rfind(prefix, 0) == 0) return i;
    return order.size();
  };
  EXPECT_LT(at("fc2"), at("fc1"));
  for (const auto& [name, values] : seen) {
    const Tensor& g = r.state.parameter(name).grad();
    EXPECT_EQ(values, std::vector<float>(g.data<float>(), g.data<float>() + g.numel())) << name;
  }
  // A call that adds to the gradients tells of the sums, after adding.
  const auto first = seen;
  order.clear();
  (*r.module)(r.batch(3));
  EXPECT_EQ(order.size(), trainable.size());
  for (const auto& [name, values] : seen) {
    const Tensor& g = r.state.parameter(name).grad();
    EXPECT_EQ(values, std::vector<float>(g.data<float>(), g.data<float>() + g.numel())) << name;
    if (name != "fc1.bias") {  // fc1.bias's is ~0 before BatchNorm
      EXPECT_NE(values, first.at(name)) << name;
    }
  }
  r.module->set_gradient_ready_hook(nullptr);
  order.clear();
  (*r.module)(r.batch(5));
  EXPECT_TRUE(order.empty());
}

TEST(DataParallel, AWorldOfOneAveragesToTheSameGradients) {
  TrainRun r(kiln::testing::write_bn_mlp_artifacts("ddp_one", OptimType::SGD));
  TrainRun plain(kiln::testing::write_bn_mlp_artifacts("ddp_plain", OptimType::SGD));
  DataParallelOptions tiny;
  tiny.bucket_cap_mb = 1e-6;  // a bucket per parameter
  DataParallel ddp(*r.module, dist::single_process(), tiny);
  EXPECT_EQ(ddp.num_buckets(), 7u);  // fc1, bn and fc2 weights and biases, and `half`
  for (uint64_t step = 0; step < 2; ++step) {
    ddp.set_sync(step == 1);  // the first call accumulates only
    (*r.module)(r.batch(10 + step));
    (*plain.module)(plain.batch(10 + step));
    ddp.finish();
  }
  for (const auto& name : r.module->parameter_names()) {
    const Parameter& p = r.state.parameter(name);
    if (!p.requires_grad()) continue;
    const Tensor& want = plain.state.parameter(name).grad();
    ASSERT_EQ(p.grad().shape(), want.shape()) << name;
    EXPECT_EQ(std::memcmp(p.grad().raw_data(), want.raw_data(), want.nbytes()), 0) << name;
  }
  expect_error<InvalidArgument>([&] { DataParallel(*r.module, nullptr); }, "needs a communicator");
}

std::vector<std::string> trainable_names(const TrainRun& r) {
  std::vector<std::string> names;
  for (const auto& name : r.module->parameter_names())
    if (r.state.parameter(name).requires_grad()) names.push_back(name);
  return names;
}

// ZeRO's optimizer shards: the flattened parameters cut in two at an element inside a parameter;
// two Optimizers over the halves (their updates exchanged after each step, as the ranks' allgather
// does) update every element as the whole optimizer does, bit for bit, each holding only its
// ranges' slots (1-D); a shard may be empty.
TEST(OptimizerShard, TwoHalvesUpdateAsTheWholeOptimizer) {
  const auto dir = kiln::testing::write_bn_mlp_artifacts("zero_shard", OptimType::AdamW);
  const std::string path = (dir / optimizer_model_file()).string();
  TrainRun whole(dir), left(dir), right(dir);
  const std::vector<std::string> names = trainable_names(whole);
  int64_t total = 0;
  for (const auto& name : names) total += whole.state.parameter(name).data().numel();
  const int64_t cut = total / 2;
  std::vector<ParameterRange> first, second;
  int64_t at = 0;
  for (const auto& name : names) {
    const int64_t n = whole.state.parameter(name).data().numel();
    if (at < cut) first.push_back({name, 0, std::min(n, cut - at)});
    if (at + n > cut) second.push_back({name, std::max<int64_t>(0, cut - at), n});
    at += n;
  }
  ASSERT_EQ(first.back().name, second.front().name) << "the cut falls inside a parameter";
  Optimizer all(path, *whole.module), a(path, *left.module, first), b(path, *right.module, second);
  EXPECT_EQ(a.ranges(), first);
  EXPECT_EQ(b.ranges(), second);
  const auto exchange = [](const std::vector<ParameterRange>& ranges, TrainRun& from, TrainRun& to) {
    for (const auto& r : ranges) {
      const float* src = from.state.parameter(r.name).data().data<float>();
      float* dst = to.state.parameter(r.name).data().data<float>();
      std::copy(src + r.begin, src + r.end, dst + r.begin);
    }
  };
  for (uint64_t step = 0; step < 3; ++step) {
    for (TrainRun* r : {&whole, &left, &right}) (*r->module)(r->batch(20 + step));
    all.step();
    a.step();
    b.step();
    exchange(first, left, right);
    exchange(second, right, left);
  }
  for (const auto& name : names) {
    const Tensor& want = whole.state.parameter(name).data();
    for (const TrainRun* run : {&left, &right}) {
      const Tensor& got = run->state.parameter(name).data();
      EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << name;
    }
  }
  for (const auto& [run, ranges] : {std::pair{&left, &first}, {&right, &second}}) {
    const auto& moments = run->state.optimizer_state().slots.at("exp_avg");
    EXPECT_EQ(moments.size(), ranges->size());
    for (const auto& r : *ranges) {
      EXPECT_EQ(moments.at(r.name).shape(), (Shape{r.end - r.begin})) << r.name;
      const float* full = whole.state.optimizer_state().slots.at("exp_avg").at(r.name).data<float>();
      EXPECT_TRUE(std::equal(full + r.begin, full + r.end, moments.at(r.name).data<float>())) << r.name;
    }
  }
  EXPECT_EQ(a.step_count(), 3);

  TrainRun idle(dir);
  Optimizer none(path, *idle.module, {});
  EXPECT_EQ(none.type(), "AdamW");
  (*idle.module)(idle.batch(1));
  none.step();
  EXPECT_EQ(none.step_count(), 1);
  EXPECT_TRUE(idle.state.optimizer_state().slots["exp_avg"].empty());
  expect_error<KeyError>([&] { Optimizer(path, *idle.module, {{"no_such", 0, 1}}); }, "not a trainable parameter");
  expect_error<InvalidArgument>(
      [&] {
        Optimizer(path, *idle.module, {{names[0], 0, 1}, {names[0], 1, 2}});
      },
      "given twice");
  expect_error<InvalidArgument>([&] { Optimizer(path, *idle.module, {{names[0], 2, 2}}); }, "not a non-empty range");
}

// ZeRO in a world of one: the rank owns every element; the reduce-scatter of stage 2 leaves the
// gradients as they are; stage 3 is refused.
TEST(DataParallel, ZeroInAWorldOfOneOwnsEverything) {
  TrainRun r(kiln::testing::write_bn_mlp_artifacts("zero_one", OptimType::SGD));
  TrainRun plain(kiln::testing::write_bn_mlp_artifacts("zero_plain", OptimType::SGD));
  DataParallelOptions o;
  o.zero_stage = 2;
  o.bucket_cap_mb = 1e-6;
  DataParallel ddp(*r.module, dist::single_process(), o);
  const std::vector<std::string> names = trainable_names(r);
  std::vector<ParameterRange> whole;
  int64_t total = 0;
  for (const auto& name : names) {
    whole.push_back({name, 0, r.state.parameter(name).data().numel()});
    total += whole.back().end;
  }
  EXPECT_EQ(ddp.owned_ranges(), whole);
  EXPECT_EQ(ddp.owned_elements(), std::vector<int64_t>{total});
  expect_error<InvalidArgument>([&] { (void)ddp.ranges_of(1); }, "rank 1 of a run of 1");
  (*r.module)(r.batch(7));
  (*plain.module)(plain.batch(7));
  ddp.finish();
  ddp.gather_parameters();
  for (const auto& name : names) {
    const Tensor& got = r.state.parameter(name).grad();
    const Tensor& want = plain.state.parameter(name).grad();
    EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << name;
  }
  o.zero_stage = 3;
  expect_error<Unsupported>([&] { DataParallel(*r.module, dist::single_process(), o); }, "stage 3");
  o.zero_stage = 5;
  expect_error<InvalidArgument>([&] { DataParallel(*r.module, dist::single_process(), o); }, "stages are 0 to 3");
}

// Adafactor's slots: a matrix's second moment factored (its shape less the last axis, and less the
// second-to-last), a vector's whole; ZeRO's element ranges would cut the rows and columns.
TEST(OptimizerShard, AdafactorKeepsFactoredSlotsOfWholeParameters) {
  const auto dir = kiln::testing::write_bn_mlp_artifacts("adafactor_slots", OptimType::Adafactor);
  TrainRun r(dir);
  const std::string path = (dir / "optimizer_model.onnx").string();
  Optimizer optimizer(path, *r.module);
  const auto& slots = r.state.optimizer_state().slots;
  int matrices = 0;
  for (const auto& name : trainable_names(r)) {
    const Shape shape = r.state.parameter(name).data().shape();
    if (shape.size() >= 2) {
      ++matrices;
      EXPECT_EQ(slots.at("exp_avg_sq_row").at(name).shape(), Shape(shape.begin(), shape.end() - 1)) << name;
      Shape col = shape;
      col.erase(col.end() - 2);
      EXPECT_EQ(slots.at("exp_avg_sq_col").at(name).shape(), col) << name;
      EXPECT_FALSE(slots.at("exp_avg_sq").count(name)) << name;
    } else {
      EXPECT_EQ(slots.at("exp_avg_sq").at(name).shape(), shape) << name;
      EXPECT_FALSE(slots.at("exp_avg_sq_row").count(name)) << name;
    }
  }
  EXPECT_GT(matrices, 0);
  (*r.module)(r.batch(3));
  optimizer.step();
  EXPECT_EQ(optimizer.step_count(), 1);
  const std::string first = trainable_names(r).front();
  expect_error<Unsupported>([&] { Optimizer(path, *r.module, {{first, 0, 2}}); }, "run Adafactor without ZeRO");
}

Node batch_norm(bool sync) {
  Node n;
  n.op_type = "BatchNormalization";
  n.name = "bn";
  n.inputs = {"x", "scale", "bias", "mean", "var"};
  n.outputs = {"y", "running_mean", "running_var"};
  n.attrs["training_mode"] = Attribute::of_int(1);
  if (sync) n.attrs["sync_statistics"] = Attribute::of_int(1);
  return n;
}

TEST(SyncedBatchStatistics, TwoRanksWithTheSameBatchNormalizeAsOne) {
  const std::vector<Tensor> in{random_tensor({4, 3, 5}, 1), random_tensor({3}, 2), random_tensor({3}, 3),
                               Tensor::zeros(DType::Float32, {3}), Tensor::from_vector<float>({3}, {1.f, 1.f, 1.f})};
  std::vector<size_t> sizes;
  set_statistics_reduce([&](double* v, size_t n) {
    sizes.push_back(n);
    for (size_t i = 0; i < n; ++i) v[i] *= 2;  // a second rank with the same batch
  });
  const std::vector<Tensor> synced = run_node(batch_norm(true), in), alone = run_node(batch_norm(false), in);
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 3}));  // the count and the sums, then the squares
  for (int64_t i = 0; i < alone[0].numel(); ++i)
    EXPECT_NEAR(synced[0].data<float>()[i], alone[0].data<float>()[i], 1e-6) << i;
  // Twice the elements: the running variance's unbiased correction is 40/39, not 20/19.
  for (int64_t c = 0; c < 3; ++c) {
    const float v1 = alone[2].data<float>()[c], v2 = synced[2].data<float>()[c];
    const double batch_var = (v1 - 0.9) / 0.1 * 19.0 / 20.0;
    EXPECT_NEAR(v2, 0.9 + 0.1 * batch_var * 40.0 / 39.0, 1e-6) << c;
  }
  set_statistics_reduce(nullptr);
  expect_error<Unsupported>([&] { run_node(batch_norm(true), in); }, "runs no distributed training");
}

// The layout pass's channels-last forms (ir/fusion.h) sync the same way: [N, H, W, C] maps.
TEST(SyncedBatchStatistics, TheChannelsLastFormsSyncToo) {
  const Tensor x = random_tensor({4, 5, 1, 3}, 4), dy = random_tensor({4, 5, 1, 3}, 5), scale = random_tensor({3}, 6);
  const std::vector<Tensor> in{x, scale, random_tensor({3}, 7), Tensor::zeros(DType::Float32, {3}),
                               Tensor::from_vector<float>({3}, {1.f, 1.f, 1.f})};
  std::vector<size_t> sizes;
  set_statistics_reduce([&](double* v, size_t n) {
    sizes.push_back(n);
    for (size_t i = 0; i < n; ++i) v[i] *= 2;  // a second rank with the same batch
  });
  Node bn = batch_norm(true);
  bn.domain = kKilnDomain;
  bn.op_type = "BatchNormalizationChannelsLast";
  Node grad;
  grad.domain = kKilnDomain;
  grad.op_type = "BatchNormalizationGradChannelsLast";
  grad.name = "bn_grad";
  grad.inputs = {"dy", "x", "scale"};
  grad.outputs = {"dx", "dscale", "db"};
  const Node alone_grad = grad;
  grad.attrs["sync_statistics"] = Attribute::of_int(1);
  const std::vector<Tensor> synced = run_node(bn, in), synced_grad = run_node(grad, {dy, x, scale});
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 3, 4, 3, 7}));  // forward; gradient: statistics, then its sums
  set_statistics_reduce(nullptr);
  bn.attrs.erase("sync_statistics");
  const std::vector<Tensor> alone = run_node(bn, in), alone_grad_out = run_node(alone_grad, {dy, x, scale});
  for (int64_t i = 0; i < alone[0].numel(); ++i)
    EXPECT_NEAR(synced[0].data<float>()[i], alone[0].data<float>()[i], 1e-6) << i;
  for (int64_t c = 0; c < 3; ++c) {  // 40 elements, not 20: the unbiased correction 40/39
    const double batch_var = (alone[2].data<float>()[c] - 0.9) / 0.1 * 19.0 / 20.0;
    EXPECT_NEAR(synced[2].data<float>()[c], 0.9 + 0.1 * batch_var * 40.0 / 39.0, 1e-6) << c;
  }
  for (size_t k = 0; k < 3; ++k)  // the same batch twice: the same gradients
    for (int64_t i = 0; i < alone_grad_out[k].numel(); ++i)
      EXPECT_NEAR(synced_grad[k].data<float>()[i], alone_grad_out[k].data<float>()[i], 1e-5) << k << " at " << i;
}

}  // namespace
}  // namespace kiln::training
