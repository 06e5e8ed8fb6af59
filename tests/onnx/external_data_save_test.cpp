// save_model with external data (SaveOptions): initializers of size_threshold bytes or more go to
// "<file>.data" beside the model, 64-byte aligned, and load back bit for bit with the small ones
// still inline; saving over the model alternates between two data files so that the data the old
// model reads is never overwritten, and removes the old one; an inline save removes both; Auto
// keeps a small model inline. The over-2 GiB round trip itself: tests/large (make test-large).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "graph_builder.h"
#include "kiln/onnx_io.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using kiln::test::TempDir;
using kiln::testing::random_tensor;
namespace fs = std::filesystem;

Model two_weights(uint64_t seed) {
  GraphBuilder b("two_weights", seed);
  const std::string x = b.input("x", DType::Float32, {2, 64});
  const std::string big = b.initializer("big", random_tensor({64, 32}, seed));      // 8 KiB
  const std::string small = b.initializer("small", random_tensor({32}, seed + 1));  // 128 bytes
  b.output(b.op("Add", {b.op("MatMul", {x, big}), small}), "y", DType::Float32, {2, 32});
  return b.build();
}

onnx::ModelProto read_proto(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())));
  return m;
}

void expect_same_initializers(const Model& got, const Model& want) {
  ASSERT_EQ(got.graph.initializers.size(), want.graph.initializers.size());
  for (const auto& [name, t] : want.graph.initializers) {
    const Tensor& g = got.graph.initializers.at(name);
    ASSERT_EQ(g.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(g.raw_data(), t.raw_data(), t.nbytes()), 0) << name;
  }
}

TEST(OnnxSaveExternalData, LargeInitializersGoBesideTheModelAndLoadBack) {
  const TempDir dir;
  const fs::path path = dir.path() / "m.onnx";
  const Model model = two_weights(1);
  SaveOptions always;
  always.external_data = SaveOptions::ExternalData::Always;
  save_model(model, path.string(), always);
  ASSERT_TRUE(fs::exists(dir.path() / "m.onnx.data"));
  EXPECT_EQ(fs::file_size(dir.path() / "m.onnx.data"), 64u * 32u * 4u);
  const onnx::ModelProto proto = read_proto(path);
  for (const auto& init : proto.graph().initializer()) {
    const bool external = init.data_location() == onnx::TensorProto::EXTERNAL;
    EXPECT_EQ(external, init.name() == "big") << init.name();
    if (!external) continue;
    std::map<std::string, std::string> entries;
    for (const auto& e : init.external_data()) entries[e.key()] = e.value();
    EXPECT_EQ(entries,
              (std::map<std::string, std::string>{{"location", "m.onnx.data"}, {"offset", "0"}, {"length", "8192"}}));
  }
  expect_same_initializers(load_model(path.string()), model);
}

TEST(OnnxSaveExternalData, SavingOverAModelNeverOverwritesTheDataItReads) {
  const TempDir dir;
  const fs::path path = dir.path() / "m.onnx";
  SaveOptions always;
  always.external_data = SaveOptions::ExternalData::Always;
  save_model(two_weights(1), path.string(), always);
  const Model second = two_weights(2);
  save_model(second, path.string(), always);
  // The new data went to the other name; the first model's file is gone.
  EXPECT_FALSE(fs::exists(dir.path() / "m.onnx.data"));
  ASSERT_TRUE(fs::exists(dir.path() / "m.onnx.1.data"));
  expect_same_initializers(load_model(path.string()), second);
  const Model third = two_weights(3);
  save_model(third, path.string(), always);
  EXPECT_TRUE(fs::exists(dir.path() / "m.onnx.data"));
  EXPECT_FALSE(fs::exists(dir.path() / "m.onnx.1.data"));
  expect_same_initializers(load_model(path.string()), third);
  // An inline save leaves no data file behind; Auto keeps a small model inline.
  save_model(second, path.string());
  EXPECT_FALSE(fs::exists(dir.path() / "m.onnx.data"));
  EXPECT_FALSE(fs::exists(dir.path() / "m.onnx.1.data"));
  const onnx::ModelProto inline_proto = read_proto(path);
  for (const auto& init : inline_proto.graph().initializer())
    EXPECT_NE(init.data_location(), onnx::TensorProto::EXTERNAL) << init.name();
  expect_same_initializers(load_model(path.string()), second);
}

// Offsets are 64-byte aligned, whatever the tensors' sizes; size_threshold sets what stays inline.
TEST(OnnxSaveExternalData, OffsetsAreAlignedAndTheThresholdIsKept) {
  const TempDir dir;
  GraphBuilder b("odd", 5);
  const std::string x = b.input("x", DType::Float32, {3});
  std::string y = x;
  for (int i = 0; i < 4; ++i) y = b.op("Add", {y, b.initializer("w" + std::to_string(i), random_tensor({3}, i))});
  b.output(y, "y", DType::Float32, {3});
  const Model model = b.build();
  SaveOptions o;
  o.external_data = SaveOptions::ExternalData::Always;
  o.size_threshold = 12;  // every 12-byte tensor goes out
  const fs::path path = dir.path() / "odd.onnx";
  save_model(model, path.string(), o);
  int external = 0;
  const onnx::ModelProto out = read_proto(path);
  for (const auto& init : out.graph().initializer()) {
    ASSERT_EQ(init.data_location(), onnx::TensorProto::EXTERNAL) << init.name();
    for (const auto& e : init.external_data()) {
      if (e.key() == "offset") {
        EXPECT_EQ(std::stoull(e.value()) % 64, 0u) << init.name();
      }
    }
    ++external;
  }
  EXPECT_EQ(external, 4);
  expect_same_initializers(load_model(path.string()), model);
  o.size_threshold = 13;  // none does
  save_model(model, path.string(), o);
  const onnx::ModelProto in = read_proto(path);
  for (const auto& init : in.graph().initializer())
    EXPECT_NE(init.data_location(), onnx::TensorProto::EXTERNAL) << init.name();
}

}  // namespace
}  // namespace kiln
