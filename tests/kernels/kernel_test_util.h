// Helpers shared by the kernel tests: node builders, run_node shortcuts, tensor factories and
// error/byte checks. Each test file used to carry its own copy; they live here once so that a
// fix (say, to how errors are matched) reaches every test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kernel.h"

// Not "testing": inside namespace kiln that would hide gtest's ::testing.
namespace kiln::test_util {

inline const std::vector<DType> kAllDTypes = {
    DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32, DType::Int16,
    DType::Int8,    DType::Uint64,  DType::Uint32,  DType::Uint16,   DType::Uint8, DType::Bool};

// A node "n" with inputs x0..x{inputs-1} and output "y" (or y0..y{outputs-1} when there are several).
inline Node make_node(const std::string& op, size_t inputs, std::map<std::string, Attribute> attrs = {},
                      size_t outputs = 1) {
  Node n;
  n.name = "n";
  n.op_type = op;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back("x" + std::to_string(i));
  if (outputs == 1) n.outputs = {"y"};
  else
    for (size_t i = 0; i < outputs; ++i) n.outputs.push_back("y" + std::to_string(i));
  n.attrs = std::move(attrs);
  return n;
}

// A node "n" with the given input names and output "y".
inline Node make_node(const std::string& op, std::vector<std::string> inputs,
                      std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = "n";
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  return n;
}

inline Tensor run1(const Node& n, const std::vector<Tensor>& in, int64_t opset = 17) {
  return run_node(n, in, opset).at(0);
}

// Elements (i * 7 + offset) % 101 (bool: odd or not): distinct enough to catch misplaced bytes.
inline Tensor filled(DType dtype, const Shape& shape, int offset = 0) {
  Tensor t = Tensor::empty(dtype, shape);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = from_double<T>(static_cast<double>((i * 7 + offset) % 101 % (dtype == DType::Bool ? 2 : 101)));
  });
  return t;
}

// Float32 elements drawn uniformly (as floats) from [lo, hi).
inline Tensor random_f32(const Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

// Float64 or Float32 elements drawn uniformly (as doubles) from [lo, hi).
inline Tensor random_real(DType dt, const Shape& shape, uint32_t seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::Float64) t.data<double>()[i] = dist(gen);
    else t.data<float>()[i] = static_cast<float>(dist(gen));
  }
  return t;
}

inline Tensor ints(const std::vector<int64_t>& v) {
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
}

inline std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.item_as_double(i));
  return v;
}

// The linear index into a tensor of shape s that broadcasting pairs with element `linear` of out.
inline int64_t source_index(const Shape& s, const Shape& out, int64_t linear) {
  int64_t offset = 0, stride = 1;
  for (size_t i = out.size(); i-- > 0;) {
    const int64_t idx = linear % out[i];
    linear /= out[i];
    const size_t back = out.size() - 1 - i;
    if (back < s.size()) {
      const size_t d = s.size() - 1 - back;
      if (s[d] != 1) offset += idx * stride;
      stride *= s[d];
    }
  }
  return offset;
}

// Sets KILN_BF16 (low_precision.h) for a scope, then puts back what was there.
class Bf16Mode {
 public:
  explicit Bf16Mode(const char* mode) {
    if (const char* v = ::getenv("KILN_BF16")) saved_ = v;
    ::setenv("KILN_BF16", mode, 1);
  }
  ~Bf16Mode() { saved_ ? (void)::setenv("KILN_BF16", saved_->c_str(), 1) : (void)::unsetenv("KILN_BF16"); }
  Bf16Mode(const Bf16Mode&) = delete;
  Bf16Mode& operator=(const Bf16Mode&) = delete;

 private:
  std::optional<std::string> saved_;
};

// t converted to dtype `to` by the Cast kernel (16-bit types: rounded to nearest even).
inline Tensor cast_to(const Tensor& t, DType to) {
  Node c;
  c.name = "cast";
  c.op_type = "Cast";
  c.inputs = {"x"};
  c.outputs = {"y"};
  c.attrs["to"] = Attribute::of_int(dtype_to_onnx(to));
  return run_node(c, {t}).at(0);
}

inline void expect_bytes_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << got.describe();
}

// Runs the kernel as the training Optimizer does: resolved and prepared directly, with output o
// written into inputs[alias[o]] when alias[o] is set (in place), else into a fresh tensor.
inline std::vector<Tensor> run_aliased(const Node& node, std::vector<Tensor>& inputs,
                                       const std::vector<std::optional<size_t>>& alias) {
  std::vector<std::optional<DType>> dtypes;
  InferContext ictx{node, 1, {}};
  for (const Tensor& t : inputs) {
    dtypes.push_back(t.dtype());
    ictx.inputs.push_back(TensorMeta::of(t));
  }
  auto kernel = KernelRegistry::global().resolve_node(node, 1, dtypes).create(node);
  const std::vector<TensorMeta> metas = kernel->infer(ictx);
  kernel->prepare(ictx, metas);
  std::vector<Tensor> fresh(metas.size());
  ComputeContext cctx{node, {}, {}};
  for (const Tensor& t : inputs) cctx.inputs.push_back(&t);
  for (size_t o = 0; o < metas.size(); ++o) {
    if (alias.at(o)) {
      cctx.outputs.push_back(&inputs[*alias[o]]);
    } else {
      fresh[o] = Tensor::empty(metas[o].dtype, metas[o].shape);
      cctx.outputs.push_back(&fresh[o]);
    }
  }
  kernel->compute(cctx);
  std::vector<Tensor> out;
  for (size_t o = 0; o < metas.size(); ++o) out.push_back(alias[o] ? inputs[*alias[o]] : fresh[o]);
  return out;
}

}  // namespace kiln::test_util
