// save_model -> onnx checker -> load_model keeps every node, attribute and tensor byte for byte.
#include <gtest/gtest.h>
#include <onnx/checker.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "kiln/onnx_io.h"
#include "onnx/onnx_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace onnx_test;
using kiln::test::TempDir;

namespace fs = std::filesystem;

// A tensor of each dtype, filled with values that exercise the bits (negatives, fractions, NaN-free).
Tensor sample(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_real_distribution<double> dist(-100.0, 100.0);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = dist(rng);
      if constexpr (std::is_same_v<T, bool>) p[i] = v > 0;
      else if constexpr (std::is_unsigned_v<T>) p[i] = static_cast<T>(v < 0 ? -v : v);
      else p[i] = from_double<T>(v);
    }
  });
  return t;
}

ValueInfo tensor_info(const std::string& name, DType dtype, std::vector<Dim> dims) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_type = true;
  v.has_shape = true;
  v.dims = std::move(dims);
  return v;
}

Node make_node(std::string name, std::string op, std::vector<std::string> in, std::vector<std::string> out,
               std::string domain = "") {
  Node n;
  n.name = std::move(name);
  n.op_type = std::move(op);
  n.domain = std::move(domain);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// One graph attribute: a branch of If that yields a constant or the outer value.
std::shared_ptr<Graph> branch(const std::string& name, bool constant) {
  auto g = std::make_shared<Graph>();
  g->name = name;
  if (constant) {
    Node c = make_node("", "Constant", {}, {name + "_out"});
    c.attrs["value"] = Attribute::of_tensor(Tensor::from_vector<float>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
    g->nodes.push_back(c);
  } else {
    g->nodes.push_back(make_node(name + "_id", "Identity", {"y"}, {name + "_out"}));
  }
  g->outputs.push_back(tensor_info(name + "_out", DType::Float32, {{-1, "batch"}, {4, ""}}));
  return g;
}

Model build_model() {
  Model m;
  m.opsets = {{"", 17}, {"ai.kiln", 1}};
  m.ir_version = 8;
  m.producer_name = "kiln-test";
  m.producer_version = "0.1";
  m.domain = "ai.kiln.test";
  m.model_version = 3;
  m.doc_string = "round trip";
  m.metadata = {{"author", "kiln"}, {"purpose", "test"}};
  Graph& g = m.graph;
  g.name = "main";
  g.doc_string = "the main graph";
  g.inputs.push_back(tensor_info("x", DType::Float32, {{-1, "batch"}, {4, ""}}));
  g.inputs.push_back(tensor_info("cond", DType::Bool, {}));
  g.overridable_initializers.push_back(tensor_info("bias", DType::Float32, {{4, ""}}));
  g.initializers["w"] = sample(DType::Float32, {4, 4}, 1);
  g.initializers["bias"] = sample(DType::Float32, {4}, 2);
  g.initializers["half"] = sample(DType::Float16, {3}, 3);
  g.initializers["brain"] = sample(DType::BFloat16, {2, 2}, 4);
  g.initializers["shape"] = Tensor::from_vector<int64_t>({2}, {-1, 4});
  g.initializers["small"] = sample(DType::Int8, {5}, 5);
  g.initializers["mask"] = sample(DType::Bool, {4}, 6);
  g.initializers["dbl"] = sample(DType::Float64, {2}, 7);
  g.initializers["u16"] = sample(DType::Uint16, {3}, 8);
  g.initializers["i32"] = sample(DType::Int32, {3}, 9);
  g.initializers["u64"] = sample(DType::Uint64, {2}, 10);
  g.initializers["scalar"] = Tensor::scalar<float>(2.5f);
  g.initializers["empty"] = Tensor::empty(DType::Float32, {0, 3});

  Node c = make_node("const", "Constant", {}, {"c"});
  c.attrs["value"] = Attribute::of_tensor(sample(DType::Float32, {4}, 11));
  g.nodes.push_back(c);
  g.nodes.push_back(make_node("mm", "MatMul", {"x", "w"}, {"mm"}));
  Node gemm = make_node("gemm", "Gemm", {"x", "w", "bias"}, {"y"});
  gemm.attrs["alpha"] = Attribute::of_float(0.5f);
  gemm.attrs["transB"] = Attribute::of_int(1);
  gemm.doc_string = "y = 0.5 x w^T + bias";
  g.nodes.push_back(gemm);
  Node add = make_node("", "Add", {"mm", "c"}, {"sum"});
  g.nodes.push_back(add);
  Node reshape = make_node("reshape", "Reshape", {"sum", "shape"}, {"r"});
  reshape.attrs["allowzero"] = Attribute::of_int(0);
  g.nodes.push_back(reshape);
  Node iff = make_node("if", "If", {"cond"}, {"branch"});
  iff.attrs["then_branch"].kind = Attribute::Kind::Graph;
  iff.attrs["then_branch"].g = branch("then", true);
  iff.attrs["else_branch"].kind = Attribute::Kind::Graph;
  iff.attrs["else_branch"].g = branch("else", false);
  g.nodes.push_back(iff);
  // A custom-domain node carries every attribute kind (the checker validates ONNX ops' attributes
  // against their schemas, so only a non-ONNX op may have them all).
  Node probe = make_node("probe", "Probe", {"r", ""}, {"p", "q"}, "ai.kiln");
  probe.attrs["f"] = Attribute::of_float(-1.25f);
  probe.attrs["i"] = Attribute::of_int(-7);
  probe.attrs["s"] = Attribute::of_string(std::string("bytes\0and text", 14));
  probe.attrs["t"] = Attribute::of_tensor(sample(DType::BFloat16, {2, 3}, 12));
  probe.attrs["floats"] = Attribute::of_floats({0.5f, -3.0f, 1e-8f});
  probe.attrs["ints"] = Attribute::of_ints({1, -2, int64_t(1) << 40});
  probe.attrs["strings"] = Attribute::of_strings({"a", "", "ccc"});
  probe.attrs["tensors"].kind = Attribute::Kind::Tensors;
  probe.attrs["tensors"].tensors = {sample(DType::Int8, {3}, 13), sample(DType::Float64, {1, 2}, 14)};
  probe.attrs["g"].kind = Attribute::Kind::Graph;
  probe.attrs["g"].g = branch("probe_body", true);
  ValueInfo optional_sequence = tensor_info("", DType::Int64, {{-1, "n"}});
  optional_sequence.kind = ValueKind::OptionalSequence;
  probe.attrs["type"] = Attribute::of_type(optional_sequence);
  g.nodes.push_back(probe);

  g.outputs.push_back(tensor_info("y", DType::Float32, {{-1, "batch"}, {4, ""}}));
  g.outputs.push_back(tensor_info("branch", DType::Float32, {{-1, ""}, {4, ""}}));
  g.outputs.push_back(tensor_info("p", DType::Float32, {{-1, "batch"}, {4, ""}}));
  ValueInfo hint = tensor_info("sum", DType::Float32, {{-1, "batch"}, {4, ""}});
  hint.doc_string = "a hint";
  g.value_info.push_back(hint);
  for (const ValueKind kind : {ValueKind::Sequence, ValueKind::OptionalTensor, ValueKind::OptionalSequence}) {
    ValueInfo v = tensor_info(std::string("kind_") + value_kind_name(kind), DType::Float16, {{3, ""}});
    v.kind = kind;
    g.value_info.push_back(v);
  }
  ValueInfo rank_unknown;  // typed, rank unknown: must not come back as a scalar
  rank_unknown.name = "mm";
  rank_unknown.has_type = true;
  g.value_info.push_back(rank_unknown);
  ValueInfo untyped;
  untyped.name = "c";
  untyped.has_shape = true;
  untyped.dims = {{4, ""}};
  g.value_info.push_back(untyped);
  return m;
}

void expect_tensor_eq(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(b.defined()) << what;
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what << " differs";
}

void expect_value_info_eq(const std::vector<ValueInfo>& a, const std::vector<ValueInfo>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << what;
    EXPECT_EQ(a[i].describe(), b[i].describe()) << what << " " << a[i].name;
    EXPECT_EQ(a[i].doc_string, b[i].doc_string) << what << " " << a[i].name;
  }
}

void expect_graph_eq(const Graph& a, const Graph& b);

void expect_attr_eq(const Attribute& a, const Attribute& b, const std::string& what) {
  ASSERT_EQ(a.kind, b.kind) << what;
  switch (a.kind) {
    case Attribute::Kind::Float:
      EXPECT_EQ(a.f, b.f) << what;
      break;
    case Attribute::Kind::Int:
      EXPECT_EQ(a.i, b.i) << what;
      break;
    case Attribute::Kind::String:
      EXPECT_EQ(a.s, b.s) << what;
      break;
    case Attribute::Kind::Tensor:
      expect_tensor_eq(a.t, b.t, what);
      break;
    case Attribute::Kind::Graph:
      expect_graph_eq(*a.g, *b.g);
      break;
    case Attribute::Kind::Type:
      EXPECT_EQ(a.type->describe(), b.type->describe()) << what;
      break;
    case Attribute::Kind::Floats:
      EXPECT_EQ(a.floats, b.floats) << what;
      break;
    case Attribute::Kind::Ints:
      EXPECT_EQ(a.ints, b.ints) << what;
      break;
    case Attribute::Kind::Strings:
      EXPECT_EQ(a.strings, b.strings) << what;
      break;
    case Attribute::Kind::Tensors:
      ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
      for (size_t i = 0; i < a.tensors.size(); ++i) expect_tensor_eq(a.tensors[i], b.tensors[i], what);
      break;
  }
}

void expect_graph_eq(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.doc_string, b.doc_string);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const Node& x = a.nodes[i];
    const Node& y = b.nodes[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op_type, y.op_type);
    EXPECT_EQ(x.domain, y.domain);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.outputs, y.outputs);
    EXPECT_EQ(x.doc_string, y.doc_string);
    ASSERT_EQ(x.attrs.size(), y.attrs.size()) << x.label();
    for (const auto& [key, attr] : x.attrs) {
      ASSERT_TRUE(y.has_attr(key)) << x.label() << " lost " << key;
      expect_attr_eq(attr, y.attrs.at(key), x.label() + "." + key);
    }
  }
  expect_value_info_eq(a.inputs, b.inputs, "inputs");
  expect_value_info_eq(a.overridable_initializers, b.overridable_initializers, "overridable initializers");
  expect_value_info_eq(a.outputs, b.outputs, "outputs");
  expect_value_info_eq(a.value_info, b.value_info, "value_info");
  ASSERT_EQ(a.initializers.size(), b.initializers.size());
  for (const auto& [name, t] : a.initializers) {
    ASSERT_TRUE(b.initializers.count(name)) << name;
    expect_tensor_eq(t, b.initializers.at(name), name);
  }
}

TEST(OnnxRoundTrip, SaveCheckLoadKeepsEverything) {
  TempDir dir;
  const Model original = build_model();
  const std::string path = (dir / "model.onnx").string();
  save_model(original, path);
  EXPECT_NO_THROW(onnx::checker::check_model(path));

  const Model loaded = load_model(path, LoadOptions{true, false, true});
  EXPECT_EQ(loaded.source_path, path);
  EXPECT_EQ(loaded.opsets, original.opsets);
  EXPECT_EQ(loaded.ir_version, 8);
  EXPECT_EQ(loaded.producer_name, "kiln-test");
  EXPECT_EQ(loaded.producer_version, "0.1");
  EXPECT_EQ(loaded.domain, "ai.kiln.test");
  EXPECT_EQ(loaded.model_version, 3);
  EXPECT_EQ(loaded.doc_string, "round trip");
  EXPECT_EQ(loaded.metadata, original.metadata);
  expect_graph_eq(original.graph, loaded.graph);

  // Saving what was loaded reproduces the file exactly.
  const std::string again = (dir / "again.onnx").string();
  save_model(loaded, again);
  EXPECT_EQ(read_bytes(path), read_bytes(again));
  EXPECT_EQ(serialize_model(loaded), read_bytes(path));
}

TEST(OnnxRoundTrip, ShapeInferenceFillsValueInfo) {
  Model m = build_model();
  m.graph.value_info.clear();
  const Model loaded = load_model_from_bytes(serialize_model(m));
  const ValueInfo* mm = loaded.graph.find_value_info("mm");
  ASSERT_NE(mm, nullptr) << "shape inference added no value_info for 'mm'";
  EXPECT_EQ(mm->describe(), "float[batch, 4]");
  const ValueInfo* r = loaded.graph.find_value_info("r");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->has_type);
  EXPECT_EQ(r->dtype, DType::Float32);
}

// Protobuf's default 64 MiB parse limit must not apply to model files.
TEST(OnnxRoundTrip, LoadsModelsLargerThan64MiB) {
  TempDir dir;
  Model m;
  m.opsets[""] = 17;
  m.graph.name = "big";
  Tensor w = Tensor::empty(DType::Float32, {18 << 20});  // 72 MiB
  float* p = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] = static_cast<float>(i % 1000) * 0.5f;
  m.graph.initializers["w"] = w;
  Node n;
  n.op_type = "Identity";
  n.inputs = {"w"};
  n.outputs = {"y"};
  m.graph.nodes.push_back(n);
  m.graph.outputs.push_back(tensor_info("y", DType::Float32, {{18 << 20, ""}}));
  const std::string path = (dir / "big.onnx").string();
  save_model(m, path);
  ASSERT_GT(fs::file_size(path), 64u << 20);
  const Model loaded = load_model(path);
  const Tensor& back = loaded.graph.initializers.at("w");
  ASSERT_EQ(back.numel(), w.numel());
  EXPECT_EQ(std::memcmp(back.raw_data(), w.raw_data(), w.nbytes()), 0);
}

TEST(OnnxRoundTrip, OverwritesAtomicallyWithoutTempFiles) {
  TempDir dir;
  const std::string path = (dir / "model.onnx").string();
  { std::ofstream(path) << "old contents"; }
  save_model(build_model(), path);
  EXPECT_EQ(read_bytes(path), serialize_model(build_model()));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "model.onnx");
  }
  EXPECT_EQ(files, 1u);
}

TEST(OnnxRoundTrip, TensorProtoFilesRoundTripEveryDtype) {
  TempDir dir;
  int seed = 100;
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                  DType::Int16, DType::Int8, DType::Uint64, DType::Uint32, DType::Uint16, DType::Uint8, DType::Bool}) {
    const Tensor t = sample(d, {2, 3}, ++seed);
    const std::string path = (dir / (std::string(dtype_name(d)) + ".pb")).string();
    save_tensor_proto(t, "input_0", path);
    expect_tensor_eq(t, load_tensor_proto(path), dtype_name(d));
  }
  // A strided view is written in logical order.
  const Tensor m = Tensor::from_vector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const std::string path = (dir / "t.pb").string();
  save_tensor_proto(m.permute({1, 0}), "t", path);
  const Tensor back = load_tensor_proto(path);
  EXPECT_EQ(back.shape(), (Shape{3, 2}));
  EXPECT_EQ(back.to_int64_vector(), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
}

}  // namespace
}  // namespace kiln
