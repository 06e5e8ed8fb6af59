// External data: tensors read from files beside the model, confined to the model's folder.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/onnx_io.h"
#include "onnx/onnx_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace onnx_test;
using kiln::test::expect_error;
using kiln::test::TempDir;

namespace fs = std::filesystem;

// A scratch folder with the model's own folder "model" inside, so that paths can escape it.
struct ModelDir : TempDir {
  ModelDir() { fs::create_directories(model_dir()); }
  fs::path model_dir() const { return path() / "model"; }
};

// 16 bytes of junk, then float[2, 3] = {0.5, 1.5, ..., 5.5}, then 8 bytes of junk.
std::string weights_file() {
  std::string bytes(16, '\x7f');
  for (int i = 0; i < 6; ++i) {
    const float v = 0.5f + static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&v), 4);
  }
  return bytes + std::string(8, '\x7f');
}

// Identity(w) with w float[2, 3] stored at `location` (offset 16, length 24 unless overridden).
std::string write_model(const fs::path& dir, const std::string& location, const std::string& offset = "16",
                        const std::string& length = "24") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_dims(3);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const std::string& key, const std::string& value) {
    if (value.empty()) return;
    auto* e = w->add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  add("location", location);
  add("offset", offset);
  add("length", length);
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->add_input("w");
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  auto* tt = out->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  const fs::path path = dir / "model.onnx";
  write_file(path, m.SerializeAsString());
  return path.string();
}

void expect_weights(const Model& m) {
  const Tensor& w = m.graph.initializers.at("w");
  ASSERT_EQ(w.describe(), "float[2, 3]");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w.data<float>()[i], 0.5f + static_cast<float>(i)) << i;
}

TEST(OnnxExternalData, LoadsFromOffsetAndLength) {
  ModelDir dir;
  write_file(dir.model_dir() / "weights.bin", weights_file());
  expect_weights(load_model(write_model(dir.model_dir(), "weights.bin")));
}

TEST(OnnxExternalData, LoadsFromSubfolderAndWithoutLength) {
  ModelDir dir;
  // Without a length the tensor runs to the end of the file.
  write_file(dir.model_dir() / "data" / "w.bin", weights_file().substr(0, 40));
  expect_weights(load_model(write_model(dir.model_dir(), "data/w.bin", "16", "")));
}

TEST(OnnxExternalData, SymlinkInsideTheFolderIsAllowed) {
  ModelDir dir;
  write_file(dir.model_dir() / "data" / "w.bin", weights_file());
  fs::create_symlink("data/w.bin", dir.model_dir() / "link.bin");
  expect_weights(load_model(write_model(dir.model_dir(), "link.bin")));
}

TEST(OnnxExternalData, MissingFile) {
  ModelDir dir;
  const std::string path = write_model(dir.model_dir(), "nope.bin");
  expect_error<IOError>([&] { load_model(path); }, {"external data file 'nope.bin' for tensor 'w' not found in '" +
                                                    dir.model_dir().string() + "'"});
}

TEST(OnnxExternalData, DotDotIsRefused) {
  ModelDir dir;
  write_file(dir / "x.bin", weights_file());  // exists, so only the path rule can refuse it
  const std::string path = write_model(dir.model_dir(), "../x.bin");
  expect_error<InvalidModel>([&] { load_model(path); },
                             {path, "tensor 'w'", "'../x.bin'", "outside the model's folder"});
  const std::string nested = write_model(dir.model_dir(), "data/../../x.bin");
  expect_error<InvalidModel>([&] { load_model(nested); }, {"'data/../../x.bin'", "outside the model's folder"});
}

TEST(OnnxExternalData, AbsolutePathIsRefused) {
  ModelDir dir;
  const fs::path target = dir.model_dir() / "weights.bin";  // even one inside the folder
  write_file(target, weights_file());
  const std::string path = write_model(dir.model_dir(), target.string());
  expect_error<InvalidModel>([&] { load_model(path); },
                             {"tensor 'w'", "'" + target.string() + "'", "outside the model's folder", "absolute"});
}

TEST(OnnxExternalData, SymlinkEscapingTheFolderIsRefused) {
  ModelDir dir;
  write_file(dir / "secret" / "w.bin", weights_file());
  fs::create_symlink(dir / "secret" / "w.bin", dir.model_dir() / "link.bin");
  fs::create_directory_symlink(dir / "secret", dir.model_dir() / "linkdir");
  const std::string path = write_model(dir.model_dir(), "link.bin");
  expect_error<InvalidModel>([&] { load_model(path); }, {"tensor 'w'", "'link.bin'", "outside the model's folder"});
  const std::string via_dir = write_model(dir.model_dir(), "linkdir/w.bin");
  expect_error<InvalidModel>([&] { load_model(via_dir); }, {"'linkdir/w.bin'", "outside the model's folder"});
}

TEST(OnnxExternalData, RangeBeyondTheEndOfTheFile) {
  ModelDir dir;
  write_file(dir.model_dir() / "weights.bin", weights_file());  // 48 bytes
  const std::string far = write_model(dir.model_dir(), "weights.bin", "100", "24");
  expect_error<InvalidModel>([&] { load_model(far); }, {"tensor 'w'", "offset 100", "beyond the end", "48 bytes"});
  const std::string longer = write_model(dir.model_dir(), "weights.bin", "40", "24");
  expect_error<InvalidModel>([&] { load_model(longer); }, {"tensor 'w'", "[40, 64)", "beyond the end"});
  const std::string wrong = write_model(dir.model_dir(), "weights.bin", "0", "20");
  expect_error<InvalidModel>([&] { load_model(wrong); }, {"tensor 'w'", "needs 24 bytes", "20 bytes long"});
  const std::string negative = write_model(dir.model_dir(), "weights.bin", "-8", "24");
  expect_error<InvalidModel>([&] { load_model(negative); }, {"tensor 'w'", "offset '-8'"});
}

TEST(OnnxExternalData, FromBytesWithoutBaseFolderIsRefused) {
  ModelDir dir;
  write_file(dir.model_dir() / "weights.bin", weights_file());
  std::ifstream in(write_model(dir.model_dir(), "weights.bin"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  expect_error<InvalidModel>([&] { load_model_from_bytes(bytes); },
                             {"'<memory>'", "tensor 'w'", "'weights.bin'", "without a base folder"});
  expect_weights(load_model_from_bytes(bytes, dir.model_dir().string()));
}

TEST(OnnxExternalData, SkippedWhenAskedNotToLoad) {
  ModelDir dir;
  write_file(dir.model_dir() / "weights.bin", weights_file());
  LoadOptions o;
  o.load_external_data = false;
  const Model m = load_model(write_model(dir.model_dir(), "weights.bin"), o);
  EXPECT_EQ(m.graph.initializers.count("w"), 0u);
  const ValueInfo* w = m.graph.find_value_info("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->describe(), "float[2, 3]");
}

}  // namespace
}  // namespace kiln
