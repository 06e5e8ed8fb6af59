#include <gtest/gtest.h>

#include <filesystem>

#include "graph_builder.h"
#include "kiln/onnx_io.h"
#include "test_util.h"

namespace kiln {
namespace {

// Newer PyTorch exporters write IR version 9 or 10; the checker of Debian's ONNX knows up to 8.
TEST(OnnxIrVersion, NewerIrVersionsLoadAndCheck) {
  GraphBuilder b("g", 1);
  std::string x = b.input("x", DType::Float32, {-1, 4});
  b.output(b.op("Relu", {x}), "y", DType::Float32, {-1, 4});
  Model m = b.build();
  m.ir_version = 10;
  const kiln::test::TempDir tmp;
  const auto path = tmp / "ir10.onnx";
  save_model(m, path.string());
  Model loaded = load_model(path.string());
  EXPECT_EQ(loaded.ir_version, 10);
  EXPECT_EQ(loaded.graph.nodes.size(), 2u);
}

}  // namespace
}  // namespace kiln
