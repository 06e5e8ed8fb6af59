// Issue 16: one Session run from several threads at once. Its runs are serialised (docs/
// reliability.md), so each returns exactly what it returns alone. The tsan preset runs this test
// under ThreadSanitizer, which also reports any unsynchronised access between the runs.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "graph_builder.h"
#include "kiln/session.h"

namespace kiln {
namespace {

Tensor noise(Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

TEST(SessionThreadsF3, ConcurrentRunsEachGetTheirOwnResult) {
  GraphBuilder b("mlp", 1);
  const std::string x = b.input("x", DType::Float32, {-1, 16});
  const std::string h = b.op("Relu", {b.linear(x, 16, 32, "fc1")});
  b.output(b.linear(h, 32, 4, "fc2"), "y", DType::Float32, {-1, 4});
  Session session(b.build(), {.num_threads = 1});
  // Different batch sizes, so that the two threads' runs also need different plans.
  const std::vector<Tensor> inputs{noise({8, 16}, 1), noise({3, 16}, 2)};
  std::vector<std::vector<float>> want;
  for (const Tensor& in : inputs) want.push_back(values(session.run({{"x", in}}).at("y")));

  std::atomic<int> wrong{0};
  auto worker = [&](size_t which) {
    for (int i = 0; i < 200; ++i)
      if (values(session.run({{"x", inputs[which]}}).at("y")) != want[which]) ++wrong;
  };
  std::thread a(worker, 0), c(worker, 1);
  a.join();
  c.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kiln
