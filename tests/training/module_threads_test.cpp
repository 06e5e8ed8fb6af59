// Issue 16, F3: one Module called from two threads at once. Its calls are serialised, so each
// returns exactly what it returns alone (unserialised, two runs shared one plan's buffers and
// about 3 calls in 4 came back wrong).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kiln/training.h"
#include "training/training_test_util.h"

namespace kiln::training {
namespace {

using kiln::testing::class_labels;
using kiln::testing::random_tensor;

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

TEST(ModuleThreadsF3, ConcurrentEvalCallsEachGetTheirOwnResult) {
  const auto dir = kiln::testing::write_bn_mlp_artifacts("threads", OptimType::SGD);
  CheckpointState state = CheckpointState::load_checkpoint((dir / "checkpoint").string());
  Module module((dir / "training_model.onnx").string(), state, (dir / "eval_model.onnx").string());
  module.eval();
  const std::vector<std::vector<Tensor>> batches{{random_tensor({64, 4}, 1), class_labels(64, 3, 2)},
                                                 {random_tensor({64, 4}, 3), class_labels(64, 3, 4)}};
  std::vector<std::vector<float>> want;
  for (const auto& b : batches) want.push_back(values(module(b)[0]));
  ASSERT_NE(want[0], want[1]);

  std::atomic<int> wrong{0};
  auto worker = [&](size_t which) {
    for (int i = 0; i < 200; ++i)
      if (values(module(batches[which])[0]) != want[which]) ++wrong;
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kiln::training
