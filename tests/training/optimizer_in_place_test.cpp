// The Optimizer's step runs through the Session (run_with_binding) and stays what it was as a
// hand-written loop: every parameter and optimizer slot is updated in its own memory, and a step
// after the first allocates nothing. Allocations are counted by replacing the global operator
// new of this test binary; only the steps under test are counted.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "kiln/training.h"
#include "training/training_test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
// The nothrow forms too (std::stable_sort's buffer uses them): every block these deletes free
// must come from these news, or AddressSanitizer reports a mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& tag) noexcept { return operator new(n, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace kiln::training {
namespace {

using kiln::testing::class_labels;
using kiln::testing::random_tensor;

TEST(OptimizerInPlace, StepsUpdateInPlaceAndAllocateNothingAfterTheFirst) {
  for (OptimType type : {OptimType::AdamW, OptimType::SGD, OptimType::Adafactor}) {
    ArtifactOptions options;
    options.sgd.momentum = 0.9f;     // SGD with a slot too
    options.adafactor.beta1 = 0.9f;  // Adafactor with every kind of slot
    const auto dir = kiln::testing::write_bn_mlp_artifacts("in_place_" + to_string(type), type, options);
    CheckpointState state = CheckpointState::load_checkpoint((dir / "checkpoint").string());
    Module module((dir / "training_model.onnx").string(), state, (dir / "eval_model.onnx").string());
    Optimizer optimizer((dir / "optimizer_model.onnx").string(), module);
    module.train();
    module({random_tensor({8, 4}, 1), class_labels(8, 3, 2)});
    optimizer.step();  // the first step plans

    std::map<std::string, const void*> memory;
    for (const auto& name : module.parameter_names()) memory[name] = state.parameter(name).data().raw_data();
    for (const auto& [slot, per_param] : state.optimizer_state().slots)
      for (const auto& [param, t] : per_param) memory[slot + "/" + param] = t.raw_data();
    const std::vector<float> before(state.parameter("fc1.weight").data().data<float>(),
                                    state.parameter("fc1.weight").data().data<float>() + 4);

    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 5; ++i) optimizer.step();  // the same gradients, five more updates
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << optimizer.type();
    // The count sees the library's allocations: a training call of the Module makes some.
    const std::vector<Tensor> batch{random_tensor({8, 4}, 1), class_labels(8, 3, 2)};
    g_counting = true;
    module(batch);
    g_counting = false;
    EXPECT_GT(g_allocations.load(), 0);

    EXPECT_NE(state.parameter("fc1.weight").data().data<float>()[0], before[0]) << optimizer.type();
    for (const auto& name : module.parameter_names())
      EXPECT_EQ(state.parameter(name).data().raw_data(), memory[name]) << name;
    for (const auto& [slot, per_param] : state.optimizer_state().slots)
      for (const auto& [param, t] : per_param) EXPECT_EQ(t.raw_data(), memory[slot + "/" + param]) << slot << param;
    EXPECT_EQ(optimizer.step_count(), 6);
  }
}

}  // namespace
}  // namespace kiln::training
