// Malformed inputs to load_model / save_model: each fails with the right error class and a message
// that names the file (and tensor) involved.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>

#include "core/atomic_file.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "onnx/onnx_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace onnx_test;
using kiln::test::expect_error;
using kiln::test::TempDir;

namespace fs = std::filesystem;

// Load and save errors are one line that names the file: expect_error, and no line break.
template <class E, class F>
void expect_one_line_error(F&& f, std::initializer_list<std::string> parts,
                           const kiln::test::SourceLocation& where = kiln::test::SourceLocation::current()) {
  const std::string msg = expect_error<E>(std::forward<F>(f), parts, where);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message (line " << where.line() << "): " << msg;
}

// Identity over a 1000-float initializer: big enough that cutting the file in half cuts a tensor.
onnx::ModelProto small_model() {
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
  w->add_dims(1000);
  w->set_raw_data(std::string(4000, '\x01'));
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->add_input("w");
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  out->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(1000);
  return m;
}

// X [1, 1, 3] and W [1, 1, 2, 2] into `op` (Conv: float; ConvInteger: uint8 with an X zero point).
onnx::ModelProto conv_with_ranks_3_and_4(const std::string& op, int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  const int type = op == "Conv" ? onnx::TensorProto::FLOAT : onnx::TensorProto::UINT8;
  const auto input = [&](const std::string& name, std::vector<int64_t> dims) {
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  };
  input("x", {1, 1, 3});
  input("w", {1, 1, 2, 2});
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("conv");
  n->add_input("x");
  n->add_input("w");
  if (op == "ConvInteger") {
    input("x_zero_point", {});
    n->add_input("x_zero_point");
  }
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(op == "Conv" ? type : onnx::TensorProto::INT32);
  for (const char* d : {"n", "c", "l"})
    out->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param(d);
  return m;
}

// Found by fuzz/onnx_model_fuzz.cpp: ONNX's own shape inference (libonnx 1.12) read out of bounds
// and crashed on a convolution whose W has a higher rank than its X. The loader's guarded schemas
// stop it: the model loads (without inferred hints), and a Session refuses it with Kiln's error.
TEST(OnnxLoadErrors, ConvolutionRanksThatDisagreeDoNotCrashShapeInference) {
  for (const auto& [op, opset] : {std::pair<std::string, int64_t>{"ConvInteger", 10}, {"Conv", 17}}) {
    SCOPED_TRACE(op);
    Model model;
    ASSERT_NO_THROW(model = load_model_from_bytes(conv_with_ranks_3_and_4(op, opset).SerializeAsString()));
    const DType dtype = op == "Conv" ? DType::Float32 : DType::Uint8;
    std::map<std::string, Tensor> feeds{{"x", Tensor::zeros(dtype, {1, 1, 3})},
                                        {"w", Tensor::zeros(dtype, {1, 1, 2, 2})}};
    if (op == "ConvInteger") feeds["x_zero_point"] = Tensor::zeros(dtype, {});
    EXPECT_THROW(Session(model).run(feeds), kiln::Error);
  }
}

// One node over float inputs of the given shapes (an empty shape: rank unknown), output shape left
// to inference.
onnx::ModelProto one_node(const std::string& op, const std::vector<std::vector<int64_t>>& inputs,
                          const std::vector<std::pair<std::string, std::vector<int64_t>>>& ints_attributes) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("node");
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto* v = g->add_input();
    v->set_name("in" + std::to_string(i));
    v->mutable_type()->mutable_tensor_type()->set_elem_type(i == 0 ? onnx::TensorProto::FLOAT
                                                                   : onnx::TensorProto::INT64);
    if (!inputs[i].empty()) {
      auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
      for (int64_t d : inputs[i]) shape->add_dim()->set_dim_value(d);
    }
    n->add_input(v->name());
  }
  for (const auto& [name, values] : ints_attributes) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }
  n->add_output("y");
  g->add_output()->set_name("y");
  auto* out = g->mutable_output(0)->mutable_type()->mutable_tensor_type();
  out->set_elem_type(onnx::TensorProto::FLOAT);
  for (const char* d : {"a", "b", "c", "d"}) out->mutable_shape()->add_dim()->set_dim_param(d);
  return m;
}

// Found by fuzz/onnx_model_fuzz.cpp: libonnx's convPoolShapeInference divides by each stride, so a
// stride of 0 was a SIGFPE inside shape inference. Now inference refuses it, the model loads
// without hints, and the Session names the bad attribute.
TEST(OnnxLoadErrors, ZeroStrideOrDilationDoesNotCrashShapeInference) {
  for (const char* op : {"MaxPool", "AveragePool", "LpPool", "Conv"}) {
    for (const char* attribute : {"strides", "dilations"}) {
      if (std::string(attribute) == "dilations" && std::string(op) != "MaxPool" && std::string(op) != "Conv") continue;
      SCOPED_TRACE(std::string(op) + " " + attribute);
      std::vector<std::vector<int64_t>> inputs{{1, 1, 4, 4}};
      if (std::string(op) == "Conv") inputs.push_back({1, 1, 2, 2});
      onnx::ModelProto proto = one_node(op, inputs, {{"kernel_shape", {2, 2}}, {attribute, {1, 0}}});
      if (std::string(op) == "Conv")
        proto.mutable_graph()->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
            onnx::TensorProto::FLOAT);
      Model model;
      ASSERT_NO_THROW(model = load_model_from_bytes(proto.SerializeAsString()));
      std::map<std::string, Tensor> feeds{{"in0", Tensor::zeros(DType::Float32, {1, 1, 4, 4})}};
      if (std::string(op) == "Conv") feeds["in1"] = Tensor::zeros(DType::Float32, {1, 1, 2, 2});
      expect_error<InvalidModel>([&] { Session(model).run(feeds); }, {"node", attribute, "must be positive"});
    }
  }
}

// MaxUnpool's inference read dimension 1 of an indices input whose shape is unknown (which only
// a model loaded without the checker can have) or of rank 1.
TEST(OnnxLoadErrors, MaxUnpoolWithoutIndexShapeDoesNotCrashShapeInference) {
  for (const std::vector<int64_t>& indices : {std::vector<int64_t>{}, std::vector<int64_t>{4}}) {
    SCOPED_TRACE(indices.size());
    const std::string bytes =
        one_node("MaxUnpool", {{1, 1, 2, 2}, indices}, {{"kernel_shape", {2, 2}}}).SerializeAsString();
    Model model;
    ASSERT_NO_THROW(model = load_model_from_bytes(bytes, "", {.run_checker = false}));
    EXPECT_EQ(model.graph.nodes.size(), 1u);
  }
}

TEST(OnnxLoadErrors, MissingFileIsIOErrorNamingIt) {
  TempDir dir;
  const std::string path = (dir / "absent.onnx").string();
  expect_one_line_error<IOError>([&] { load_model(path); }, {"cannot open model '" + path + "'", "No such file"});
}

TEST(OnnxLoadErrors, FolderIsIOError) {
  TempDir dir;
  expect_one_line_error<IOError>([&] { load_model(dir.path().string()); }, {dir.path().string(), "Is a directory"});
}

TEST(OnnxLoadErrors, EmptyFile) {
  TempDir dir;
  const std::string path = write_file(dir / "empty.onnx", "");
  expect_one_line_error<InvalidModel>([&] { load_model(path); }, {"'" + path + "' is not a valid ONNX model", "empty"});
}

TEST(OnnxLoadErrors, TruncatedFile) {
  TempDir dir;
  const std::string bytes = small_model().SerializeAsString();
  ASSERT_NO_THROW(load_model(write_file(dir / "whole.onnx", bytes)));  // the uncut model is fine
  const std::string path = write_file(dir / "half.onnx", bytes.substr(0, bytes.size() / 2));
  expect_one_line_error<InvalidModel>([&] { load_model(path); },
                                      {"'" + path + "' is not a valid ONNX model", "do not parse", "truncated"});
}

TEST(OnnxLoadErrors, RandomBytes) {
  TempDir dir;
  for (unsigned seed : {1u, 2u, 3u, 42u}) {
    std::mt19937 rng(seed);
    std::string bytes(4096, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    const std::string path = write_file(dir / ("noise" + std::to_string(seed) + ".onnx"), bytes);
    expect_one_line_error<InvalidModel>([&] { load_model(path); }, {"'" + path + "' is not a valid ONNX model"});
  }
}

TEST(OnnxLoadErrors, ParsableButNotAModel) {
  // Field 1 (ir_version) = 5 and nothing else: valid protobuf, no graph.
  expect_one_line_error<InvalidModel>([&] { load_model_from_bytes(std::string("\x08\x05", 2), "", {}, "tiny.onnx"); },
                                      {"'tiny.onnx' is not a valid ONNX model", "no graph"});
  onnx::ModelProto m = small_model();
  m.clear_opset_import();
  expect_one_line_error<InvalidModel>([&] { load_model_from_bytes(m.SerializeAsString(), "", {}, "noopset.onnx"); },
                                      {"'noopset.onnx'", "opset_import"});
  m = small_model();
  m.clear_ir_version();
  expect_one_line_error<InvalidModel>([&] { load_model_from_bytes(m.SerializeAsString(), "", {}, "noir.onnx"); },
                                      {"'noir.onnx'", "ir_version is 0"});
}

TEST(OnnxLoadErrors, CheckerFailureIsOneLineNamingTheFile) {
  onnx::ModelProto m = small_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  expect_one_line_error<InvalidModel>([&] { load_model_from_bytes(m.SerializeAsString(), "", {}, "bad.onnx"); },
                                      {"'bad.onnx' is not a valid ONNX model", "ONNX checker", "NoSuchOp"});
  // Without the checker the same model loads (the op is only unknown to a session).
  LoadOptions lenient;
  lenient.run_checker = false;
  EXPECT_EQ(load_model_from_bytes(m.SerializeAsString(), "", lenient).graph.nodes.at(0).op_type, "NoSuchOp");
}

TEST(OnnxLoadErrors, RawDataOfWrongLengthNamesTheTensor) {
  onnx::ModelProto m = small_model();
  m.mutable_graph()->mutable_initializer(0)->set_raw_data(std::string(3999, '\0'));
  expect_one_line_error<InvalidModel>(
      [&] { load_model_from_bytes(m.SerializeAsString(), "", {}, "short.onnx"); },
      {"'short.onnx'", "tensor 'w' (float[1000])", "3999 bytes of raw_data, expected 4000"});
}

TEST(OnnxLoadErrors, TypedFieldOfWrongLengthNamesTheTensor) {
  onnx::ModelProto m = small_model();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  for (int i = 0; i < 999; ++i) w->add_float_data(1.f);
  expect_one_line_error<InvalidModel>([&] { load_model_from_bytes(m.SerializeAsString(), "", {}, "typed.onnx"); },
                                      {"tensor 'w'", "999 values in float_data, expected 1000"});
}

TEST(OnnxLoadErrors, ComplexTensorsAreUnsupportedAndStringsMustBeInStringData) {
  onnx::ModelProto m = small_model();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->set_data_type(onnx::TensorProto::COMPLEX64);
  w->clear_dims();
  w->clear_raw_data();
  w->add_float_data(1.f);  // one complex64 value: real and imaginary parts
  w->add_float_data(2.f);
  auto* out = m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type();
  out->set_elem_type(onnx::TensorProto::COMPLEX64);
  out->clear_shape();
  LoadOptions o;
  o.run_checker = false;
  expect_one_line_error<Unsupported>([&] { load_model_from_bytes(m.SerializeAsString(), "", o, "s.onnx"); },
                                     {"'s.onnx'", "tensor 'w'", "complex64"});
  // A string tensor with raw bytes is malformed (ONNX keeps strings in string_data).
  w->set_data_type(onnx::TensorProto::STRING);
  w->clear_float_data();
  w->set_raw_data("hello");
  out->set_elem_type(onnx::TensorProto::STRING);
  expect_one_line_error<InvalidModel>([&] { load_model_from_bytes(m.SerializeAsString(), "", o, "s.onnx"); },
                                      {"tensor 'w'", "holds strings, which ONNX stores in string_data only"});
  w->clear_raw_data();
  w->add_string_data("hello");
  const Model loaded = load_model_from_bytes(m.SerializeAsString(), "", o, "s.onnx");
  EXPECT_EQ(loaded.graph.initializers.at("w").data<std::string>()[0], "hello");
}

TEST(OnnxSaveErrors, MissingFolderIsIOErrorAndLeavesNoTempFile) {
  TempDir dir;
  Model m;
  m.opsets[""] = 17;
  const std::string path = (dir / "no" / "such" / "model.onnx").string();
  expect_one_line_error<IOError>([&] { save_model(m, path); }, {"'" + path + "'", "No such file"});
  EXPECT_TRUE(fs::is_empty(dir.path()));
  expect_one_line_error<IOError>([&] { save_tensor_proto(Tensor::scalar<float>(1), "t", path); }, {"'" + path + "'"});
}

TEST(OnnxSaveErrors, TargetThatIsAFolderLeavesNoTempFile) {
  TempDir dir;
  fs::create_directory(dir / "taken");
  Model m;
  m.opsets[""] = 17;
  const std::string path = (dir / "taken").string();
  expect_one_line_error<IOError>([&] { save_model(m, path); }, {"'" + path + "'", "rename"});
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.path().filename() == "taken" ? 0 : 1;
  EXPECT_EQ(entries, 0u) << "a temporary file was left behind";
}

TEST(AtomicFile, UncommittedWriteLeavesTargetUntouched) {
  TempDir dir;
  const std::string path = write_file(dir / "data.bin", "old");
  std::string temp;
  {
    AtomicFile f(path);
    temp = f.temp_path();
    f.write("new contents");
    EXPECT_TRUE(fs::exists(temp));
  }
  EXPECT_FALSE(fs::exists(temp));
  std::ifstream in(path);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, "old");
  write_file_atomically(path, "new");
  std::ifstream again(path);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()), "new");
}

}  // namespace
}  // namespace kiln
