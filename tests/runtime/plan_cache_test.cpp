// The plan cache (SessionOptions::plan_cache_dir, runtime/plan_cache.h): a second Session of the
// same model loads the fused graph and the memory plan the first stored, and computes exactly what
// an uncached Session does; another model, another fuse setting or another input signature is not
// served what was stored for the first; corrupt, truncated, foreign and stale entries are ignored
// with a warning and written again; a memory plan whose offsets would overlap live buffers is never
// used; a cache that cannot be written is a warning; overridable initializers stay overridable;
// models with subgraphs are not cached.
#include "runtime/plan_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graph_builder.h"
#include "kernels/kernel_test_util.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "runtime/memory_plan.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using A = Attribute;

// Two convolutions with a residual Add and pools (the layout pass rewrites it), then a linear head:
// a batch of any size.
Model conv_net(float scale = 1.f) {
  GraphBuilder b("conv_net", 3);
  const std::string x = b.input("x", DType::Float32, {-1, 3, 12, 12});
  const std::map<std::string, A> pad1 = {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}};
  std::string h = b.op("Relu", {b.conv2d(x, 3, 8, 3, 1, 1, "stem")});
  h = b.op("MaxPool", {h}, {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}});
  std::string r = b.op("Relu", {b.conv2d(h, 8, 8, 3, 1, 1, "c1")});
  h = b.op("Relu", {b.op("Add", {b.conv2d(r, 8, 8, 3, 1, 1, "c2"), h})});
  h = b.op("AveragePool", {h}, pad1);
  h = b.op("GlobalAveragePool", {h});
  h = b.op("Flatten", {h}, {{"axis", A::of_int(1)}});
  h = b.op("Mul", {b.linear(h, 8, 4, "fc"), b.initializer("scale", Tensor::scalar<float>(scale))});
  b.output(h, "y", DType::Float32, {-1, 4});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

std::map<std::string, Tensor> feeds(int64_t batch) {
  return {{"x", test_util::random_f32({batch, 3, 12, 12}, 11, -1.f, 1.f)}};
}

size_t count_ops(const Model& m, const std::string& op) {
  size_t n = 0;
  for (const Node& node : m.graph.nodes) n += node.op_type == op;
  return n;
}

// A session's output, and what its plan came from.
struct Ran {
  Tensor y;
  PlanStats stats;
  std::string warnings;
};

Ran run(const Model& m, const fs::path& cache, int64_t batch = 2, bool fuse = true) {
  testing::internal::CaptureStderr();
  Session s(m, {.fuse = fuse, .plan_cache_dir = cache.string()});
  Ran r{s.run(feeds(batch)).at("y"), {}, ""};
  r.stats = s.last_plan_stats();
  r.warnings = testing::internal::GetCapturedStderr();
  return r;
}

void expect_same_bytes(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "at " << i;
}

// The entry files the cache holds, by kind.
std::vector<fs::path> entries(const fs::path& cache, const std::string& name_part) {
  std::vector<fs::path> out;
  if (!fs::exists(cache / "plans")) return out;
  for (const auto& e : fs::recursive_directory_iterator(cache / "plans"))
    if (e.is_regular_file() && e.path().filename().string().find(name_part) != std::string::npos)
      out.push_back(e.path());
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

TEST(PlanCache, ASecondSessionLoadsTheGraphAndTheMemoryPlan) {
  test::TempDir dir;
  const Model m = conv_net();
  const Tensor want = Session(m).run(feeds(2)).at("y");
  const Ran first = run(m, dir.path());
  EXPECT_FALSE(first.stats.graph_from_cache);
  EXPECT_FALSE(first.stats.memory_plan_from_cache);
  EXPECT_EQ(entries(dir.path(), "graph.kplan").size(), 1u);
  EXPECT_EQ(entries(dir.path(), ".kplan").size(), 2u);  // the graph and one memory plan
  const Ran second = run(m, dir.path());
  EXPECT_TRUE(second.stats.graph_from_cache);
  EXPECT_TRUE(second.stats.memory_plan_from_cache);
  EXPECT_EQ(second.warnings, "");
  EXPECT_EQ(second.stats.peak_bytes, first.stats.peak_bytes);
  EXPECT_EQ(second.stats.num_steps, first.stats.num_steps);
  expect_same_bytes(first.y, want);
  expect_same_bytes(second.y, want);
  // The graph loaded is the fused one: the layout pass's ops, not the model's Convs.
  Session cached(m, {.plan_cache_dir = dir.path().string()});
  EXPECT_EQ(count_ops(cached.model(), "ConvChannelsLast"), 3u);
  EXPECT_EQ(count_ops(cached.model(), "Conv"), 0u);
  // Its weights are the model's own tensors (named in the entry, not copied into it).
  EXPECT_EQ(cached.model().graph.initializers.at("fc.weight").storage(),
            m.graph.initializers.at("fc.weight").storage());
  EXPECT_LT(fs::file_size(entries(dir.path(), "graph.kplan")[0]), 8000u);
}

TEST(PlanCache, AnotherModelOrFuseSettingIsNotServedTheFirstOnesPlan) {
  test::TempDir dir;
  run(conv_net(1.f), dir.path());
  // The same graph with another constant's value: another key.
  const Model other = conv_net(2.f);
  const Ran r = run(other, dir.path());
  EXPECT_FALSE(r.stats.graph_from_cache);
  expect_same_bytes(r.y, Session(other).run(feeds(2)).at("y"));
  const Ran unfused = run(conv_net(1.f), dir.path(), 2, false);
  EXPECT_FALSE(unfused.stats.graph_from_cache);
  EXPECT_EQ(entries(dir.path(), "graph.kplan").size(), 3u);
  EXPECT_TRUE(run(conv_net(1.f), dir.path(), 2, false).stats.graph_from_cache);
}

TEST(PlanCache, EachInputSignatureHasItsOwnMemoryPlan) {
  test::TempDir dir;
  const Model m = conv_net();
  run(m, dir.path(), 2);
  const Ran three = run(m, dir.path(), 3);
  EXPECT_TRUE(three.stats.graph_from_cache);
  EXPECT_FALSE(three.stats.memory_plan_from_cache);  // planned for batch 3, then stored
  expect_same_bytes(three.y, Session(m).run(feeds(3)).at("y"));
  EXPECT_TRUE(run(m, dir.path(), 3).stats.memory_plan_from_cache);
  EXPECT_TRUE(run(m, dir.path(), 2).stats.memory_plan_from_cache);
  EXPECT_EQ(entries(dir.path(), ".kplan").size(), 3u);
}

TEST(PlanCache, CorruptTruncatedAndForeignEntriesAreIgnoredWithAWarningAndWrittenAgain) {
  test::TempDir dir;
  const Model m = conv_net();
  const Tensor want = run(m, dir.path()).y;
  const fs::path graph = entries(dir.path(), "graph.kplan").at(0);
  std::string bytes = read(graph);
  bytes[bytes.size() - 100] ^= 0x20;  // one flipped bit in the payload
  write(graph, bytes);
  Ran r = run(m, dir.path());
  EXPECT_FALSE(r.stats.graph_from_cache);
  EXPECT_NE(r.warnings.find("plan cache: ignoring"), std::string::npos) << r.warnings;
  EXPECT_NE(r.warnings.find("changed or truncated"), std::string::npos) << r.warnings;
  expect_same_bytes(r.y, want);
  EXPECT_TRUE(run(m, dir.path()).stats.graph_from_cache);  // written again

  fs::path plan;
  for (const fs::path& p : entries(dir.path(), ".kplan"))
    if (p.filename() != "graph.kplan") plan = p;
  bytes = read(plan);
  write(plan, bytes.substr(0, bytes.size() - 10));  // a write cut short
  r = run(m, dir.path());
  EXPECT_TRUE(r.stats.graph_from_cache);
  EXPECT_FALSE(r.stats.memory_plan_from_cache);
  EXPECT_NE(r.warnings.find("changed or truncated"), std::string::npos) << r.warnings;
  expect_same_bytes(r.y, want);

  write(plan, "not a plan at all");
  r = run(m, dir.path());
  EXPECT_FALSE(r.stats.memory_plan_from_cache);
  EXPECT_NE(r.warnings.find("not a plan cache entry"), std::string::npos) << r.warnings;
  // Another model's entry under this one's name: its header says whose it is.
  const Model other = conv_net(3.f);
  run(other, dir.path());
  const auto cache = PlanCache::open(dir.path().string(), other, true);
  const auto mine = PlanCache::open(dir.path().string(), m, true);
  fs::copy_file(cache->graph_path(), mine->graph_path(), fs::copy_options::overwrite_existing);
  r = run(m, dir.path());
  EXPECT_FALSE(r.stats.graph_from_cache);
  EXPECT_NE(r.warnings.find("written for another key (stale)"), std::string::npos) << r.warnings;
  expect_same_bytes(r.y, want);
}

TEST(PlanCache, AMemoryPlanIsUsedOnlyForItsOwnBuffersAndOnlyIfItsOffsetsAreSound) {
  test::TempDir dir;
  const Model m = conv_net();
  const auto cache = PlanCache::open(dir.path().string(), m, true);
  const std::vector<BufferRequest> requests = {{256, 0, 2}, {128, 1, 3}, {512, 3, 4}};
  const MemoryPlan good = plan_memory(requests);
  cache->store_memory_plan("sig", requests, good);
  testing::internal::CaptureStderr();
  const auto loaded = cache->load_memory_plan("sig", requests);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->offsets, good.offsets);
  EXPECT_EQ(loaded->arena_bytes, good.arena_bytes);
  // Asked for other buffers (a kernel that now works in place, another build's rounding...): stale.
  std::vector<BufferRequest> other = requests;
  other[1].last = 4;
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache->load_memory_plan("sig", other).has_value());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("other buffers"), std::string::npos);
  // A well-formed entry whose offsets put two live buffers on the same bytes is refused.
  MemoryPlan overlapping = good;
  overlapping.offsets = {0, 0, 0};
  cache->store_memory_plan("sig", requests, overlapping);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache->load_memory_plan("sig", requests).has_value());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("share bytes"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(cache->load_memory_plan("another signature", requests).has_value());  // none stored
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(PlanCache, ACacheThatCannotBeWrittenIsAWarningNotAnError) {
  test::TempDir dir;
  write(dir / "file", "x");
  const Model m = conv_net();
  const Ran r = run(m, dir / "file" / "cache");  // a folder under a file cannot be made
  EXPECT_FALSE(r.stats.graph_from_cache);
  EXPECT_NE(r.warnings.find("plan cache: could not store"), std::string::npos) << r.warnings;
  expect_same_bytes(r.y, Session(m).run(feeds(2)).at("y"));
}

TEST(PlanCache, OverridableInitializersStayOverridable) {
  GraphBuilder b("affine", 5);
  const std::string x = b.input("x", DType::Float32, {2, 3});
  const std::string w = b.initializer("w", Tensor::from_vector<float>({3}, {1, 2, 3}));
  b.output(b.op("Add", {b.op("Mul", {x, w}), b.initializer("c", Tensor::scalar<float>(1.f))}), "y", DType::Float32,
           {2, 3});
  Model m = b.build();
  m.graph.overridable_initializers.push_back(ValueInfo::of("w", m.graph.initializers.at("w")));
  test::TempDir dir;
  const Tensor x0 = test_util::random_f32({2, 3}, 1, -1.f, 1.f), w1 = Tensor::from_vector<float>({3}, {5, 6, 7});
  for (int pass = 0; pass < 2; ++pass) {
    Session s(m, {.plan_cache_dir = dir.path().string()});
    EXPECT_EQ(s.run({{"x", x0}}).size(), 1u);
    EXPECT_EQ(s.last_plan_stats().graph_from_cache, pass == 1);
    ASSERT_EQ(s.inputs().size(), 1u);
    ASSERT_EQ(s.model().graph.overridable_initializers.size(), 1u);
    const Tensor y = s.run({{"x", x0}, {"w", w1}}).at("y");
    for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], x0.data<float>()[i] * (5 + i % 3) + 1);
  }
}

TEST(PlanCache, ModelsWithSubgraphsAreNotCached) {
  GraphBuilder b("branch", 5);
  const std::string x = b.input("x", DType::Float32, {2});
  Model m = b.build();
  EXPECT_NE(PlanCache::open("unused", m, true), nullptr);
  auto body = std::make_shared<Graph>();
  body->name = "then";
  Node n;
  n.op_type = "If";
  n.attrs["then_branch"] = Attribute{};
  n.attrs["then_branch"].kind = Attribute::Kind::Graph;
  n.attrs["then_branch"].g = body;
  m.graph.nodes.push_back(n);
  EXPECT_EQ(PlanCache::open("unused", m, true), nullptr);
  (void)x;
}

}  // namespace
}  // namespace kiln
