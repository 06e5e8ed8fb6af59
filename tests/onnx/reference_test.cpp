// Kiln's ONNX I/O against the reference: files written by Python's onnx package (typed *_data fields
// as onnx.helper encodes them, raw_data from numpy_helper) load with the right values, and files
// Kiln writes read back in Python with the right values.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiln/onnx_io.h"
#include "onnx/onnx_test_util.h"
#include "onnx/tensor_proto.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace onnx_test;
using kiln::test::TempDir;

namespace fs = std::filesystem;

const std::vector<DType> kAllDtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64,
                                       DType::Int32,   DType::Int16,   DType::Int8,    DType::Uint64,   DType::Uint32,
                                       DType::Uint16,  DType::Uint8,   DType::Bool};

// The six values each test tensor holds, exact in every dtype of its kind.
std::vector<double> values_for(DType d) {
  if (d == DType::Bool) return {1, 0, 1, 0, 0, 1};
  if (is_floating(d)) return {1.5, -2.25, 3, 0, -0.5, 100};
  if (d == DType::Uint8 || d == DType::Uint16 || d == DType::Uint32 || d == DType::Uint64) return {1, 2, 3, 0, 5, 200};
  return {1, -2, 3, 0, -5, 100};
}

void expect_values(const Tensor& t, DType d, const std::string& what) {
  ASSERT_TRUE(t.defined()) << what;
  EXPECT_EQ(t.dtype(), d) << what;
  EXPECT_EQ(t.shape(), (Shape{2, 3})) << what;
  const auto want = values_for(d);
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(t.item_as_double(i), want[static_cast<size_t>(i)]) << what << " [" << i << "]";
}

bool python_has_onnx() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import onnx, numpy' >/dev/null 2>&1") == 0;
  return ok;
}

int run_python(const fs::path& dir, const std::string& script) {
  const fs::path file = dir / "script.py";
  std::ofstream(file) << script;
  return std::system(("/usr/bin/python3 " + file.string() + " " + dir.string()).c_str());
}

// The same dtype table on the Python side, in Kiln's dtype_name spelling.
const char* kPythonPrelude = R"PY(
import sys, os
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
d = sys.argv[1]
TYPES = {"float": TensorProto.FLOAT, "double": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
         "bfloat16": TensorProto.BFLOAT16, "int64": TensorProto.INT64, "int32": TensorProto.INT32,
         "int16": TensorProto.INT16, "int8": TensorProto.INT8, "uint64": TensorProto.UINT64,
         "uint32": TensorProto.UINT32, "uint16": TensorProto.UINT16, "uint8": TensorProto.UINT8,
         "bool": TensorProto.BOOL}
def values(name):
    if name == "bool": return [1, 0, 1, 0, 0, 1]
    if name in ("float", "double", "float16", "bfloat16"): return [1.5, -2.25, 3, 0, -0.5, 100]
    if name.startswith("uint"): return [1, 2, 3, 0, 5, 200]
    return [1, -2, 3, 0, -5, 100]
)PY";

TEST(OnnxReference, LoadsTensorsWrittenByPythonOnnx) {
  if (!python_has_onnx()) GTEST_SKIP() << "/usr/bin/python3 with onnx and numpy is not available";
  TempDir dir;
  const std::string script = std::string(kPythonPrelude) + R"PY(
inits = []
for name, t in TYPES.items():
    v = values(name)
    if name == "bool": v = [bool(x) for x in v]
    inits.append(helper.make_tensor("typed_" + name, t, [2, 3], v))           # typed *_data fields
    if name != "bfloat16":                                                   # numpy has no bfloat16
        dt = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t]
        inits.append(numpy_helper.from_array(np.array(v).astype(dt).reshape(2, 3), "raw_" + name))
node = helper.make_node("Identity", ["typed_float"], ["y"])
graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
onnx.save(model, os.path.join(d, "model.onnx"))
x = numpy_helper.from_array((np.arange(6, dtype=np.float32) * 0.25).reshape(2, 3), "x")
open(os.path.join(d, "input_0.pb"), "wb").write(x.SerializeToString())
)PY";
  ASSERT_EQ(run_python(dir.path(), script), 0);
  const Model m = load_model((dir / "model.onnx").string());
  for (DType d : kAllDtypes) {
    const std::string name = dtype_name(d);
    ASSERT_TRUE(m.graph.initializers.count("typed_" + name)) << name;
    expect_values(m.graph.initializers.at("typed_" + name), d, "typed_" + name);
    if (d != DType::BFloat16) expect_values(m.graph.initializers.at("raw_" + name), d, "raw_" + name);
  }
  const Tensor x = load_tensor_proto((dir / "input_0.pb").string());
  ASSERT_EQ(x.describe(), "float[2, 3]");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x.data<float>()[i], 0.25f * static_cast<float>(i));
}

TEST(OnnxReference, PythonOnnxReadsWhatKilnWrites) {
  if (!python_has_onnx()) GTEST_SKIP() << "/usr/bin/python3 with onnx and numpy is not available";
  TempDir dir;
  Model m;
  m.opsets[""] = 17;
  m.graph.name = "g";
  for (DType d : kAllDtypes) {
    Tensor t = Tensor::empty(d, {2, 3});
    const auto v = values_for(d);
    visit_dtype(d, [&](auto tag) {
      using T = decltype(tag);
      for (int i = 0; i < 6; ++i) t.data<T>()[i] = from_double<T>(v[static_cast<size_t>(i)]);
    });
    m.graph.initializers[std::string("w_") + dtype_name(d)] = t;
    save_tensor_proto(t, dtype_name(d), (dir / (std::string(dtype_name(d)) + ".pb")).string());
  }
  Node n;
  n.op_type = "Identity";
  n.inputs = {"w_float"};
  n.outputs = {"y"};
  m.graph.nodes.push_back(n);
  ValueInfo y;
  y.name = "y";
  y.has_type = y.has_shape = true;
  y.dims = {{2, ""}, {3, ""}};
  m.graph.outputs.push_back(y);
  save_model(m, (dir / "model.onnx").string());
  const std::string script = std::string(kPythonPrelude) + R"PY(
model = onnx.load(os.path.join(d, "model.onnx"))
onnx.checker.check_model(model)
got = {t.name: t for t in model.graph.initializer}
for name, t in TYPES.items():
    for proto in (got["w_" + name], onnx.load_tensor(os.path.join(d, name + ".pb"))):
        assert proto.data_type == t, (name, proto.data_type)
        if name == "bfloat16":   # numpy_helper cannot decode it; the top halves of float32 bits
            bits = np.frombuffer(proto.raw_data, dtype=np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(2, 3)
        else:
            arr = numpy_helper.to_array(proto)
        assert arr.shape == (2, 3), (name, arr.shape)
        want = np.array(values(name), dtype=np.float64).reshape(2, 3)
        assert np.array_equal(arr.astype(np.float64), want), (name, arr, want)
)PY";
  EXPECT_EQ(run_python(dir.path(), script), 0);
}

// onnx.helper's encodings without Python: 16-bit floats as bit patterns in int32_data.
TEST(OnnxReference, TypedFieldsDecodeLikeOnnxHelper) {
  onnx::TensorProto p;
  p.set_name("h");
  p.set_data_type(onnx::TensorProto::FLOAT16);
  p.add_dims(3);
  for (int bits : {0x3c00, 0xc000, 0x7bff}) p.add_int32_data(bits);  // 1, -2, 65504
  const Tensor h = onnxio::tensor_from_proto(p, {});
  EXPECT_EQ(h.item_as_double(0), 1.0);
  EXPECT_EQ(h.item_as_double(1), -2.0);
  EXPECT_EQ(h.item_as_double(2), 65504.0);

  p.set_data_type(onnx::TensorProto::BOOL);
  p.clear_int32_data();
  for (int v : {0, 1, 7}) p.add_int32_data(v);  // any nonzero is true
  const Tensor b = onnxio::tensor_from_proto(p, {});
  EXPECT_EQ(b.to_int64_vector(), (std::vector<int64_t>{0, 1, 1}));

  p.set_data_type(onnx::TensorProto::UINT32);
  p.clear_int32_data();
  for (uint64_t v : {0ull, 4000000000ull, 1ull}) p.add_uint64_data(v);
  EXPECT_EQ(onnxio::tensor_from_proto(p, {}).item_as_double(1), 4000000000.0);
}

}  // namespace
}  // namespace kiln
