// Kernels and their registry.
//
// How to add an op: in the op family's file under src/kernels/cpu/, write a class deriving from
// Kernel with infer() (output dtypes and shapes from input metas, once per input signature) and
// compute() (the work, on planned buffers), and register it next to its code:
//
//   static const KernelRegistrar reg({"", "Relu", 13, kMaxOpset, {DType::Float32}},
//                                    [](const Node& n) { return std::make_unique<ReluKernel>(n); });
//
// The registry resolves (domain, op, opset, dtype of input `type_input`) and names all four when
// nothing matches. Nothing else needs to change.
#pragma once

#include <climits>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln {

inline constexpr int kMaxOpset = INT_MAX;

// What the planner knows of a value: dtype, shape and, when known at plan time, its contents
// (initializers, constants, shape arithmetic). `dynamic` means the shape is known only at run time.
// A sequence or optional (`kind`, include/kiln/tensor.h) is always `dynamic`: its contents decide
// everything after it, so the steps that read it infer at run time; `dtype` is its elements'.
struct TensorMeta {
  DType dtype = DType::Float32;
  Shape shape;
  bool dynamic = false;
  Tensor value;  // defined when the contents are known at plan time
  ValueKind kind = ValueKind::Tensor;

  static TensorMeta of(const Tensor& t) { return {t.dtype(), t.shape(), !t.is_tensor(), Tensor(), t.kind()}; }
  // A sequence or optional of elements of `dtype`, known at run time.
  static TensorMeta of_kind(ValueKind kind, DType dtype) {
    return {dtype, {}, kind != ValueKind::Tensor, Tensor(), kind};
  }
  // For messages: "float[2, 3]"; "sequence(float)" for a sequence or optional.
  std::string describe() const;
};

// Thrown by InferContext::value() when an input's contents are not known at plan time. The planner
// then infers that node at run time, when the contents are there (a data-dependent shape).
class ValueUnknown : public Unsupported {
  using Unsupported::Unsupported;
};

struct InferContext {
  const Node& node;
  int64_t opset;
  std::vector<std::optional<TensorMeta>> inputs;  // nullopt: optional input omitted

  size_t num_inputs() const { return inputs.size(); }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i].has_value(); }
  // Throws InvalidModel naming the node if input i is absent.
  const TensorMeta& input(size_t i) const;
  const Shape& shape(size_t i) const { return input(i).shape; }
  DType dtype(size_t i) const { return input(i).dtype; }
  // The contents of input i, which the op needs to infer shapes (Reshape's shape, Slice's starts).
  // Throws ValueUnknown at plan time if they are computed at run time; the planner then defers the
  // node's shape inference to run time.
  const Tensor& value(size_t i) const;
  bool has_value(size_t i) const { return has_input(i) && input(i).value.defined(); }
};

struct ComputeContext {
  const Node& node;
  std::vector<const Tensor*> inputs;  // nullptr for omitted optional inputs
  std::vector<Tensor*> outputs;       // planned buffers (undefined for omitted outputs)
  uint64_t run_index = 0;             // which run of its Session this is: random draws key on it

  const Tensor& input(size_t i) const;
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  Tensor& output(size_t i) { return *outputs.at(i); }
};

class Kernel {
 public:
  explicit Kernel(const Node& node) : node_(node) {}
  virtual ~Kernel() = default;
  // Output dtypes and shapes (and, for shape ops, values) from the inputs; validates attributes
  // and shapes, throwing errors that name tensors and shapes (the executor adds the node).
  virtual std::vector<TensorMeta> infer(const InferContext& ctx) = 0;
  // Called once per plan after infer, with concrete shapes: build oneDNN primitives and the like.
  virtual void prepare(const InferContext& ctx, const std::vector<TensorMeta>& outputs) {
    (void)ctx;
    (void)outputs;
  }
  virtual void compute(ComputeContext& ctx) = 0;
  // Output 0 may be written over input `i`'s buffer when that input dies here (elementwise ops).
  virtual std::optional<size_t> inplace_input() const { return std::nullopt; }
  // Output `output` may be written over input `input`'s memory: the kernel reads each element of
  // that input before writing the same element of that output. A caller binding an output to an
  // input's memory (Session::run_with_binding) is checked against this.
  virtual bool output_may_overwrite(size_t output, size_t input) const {
    return output == 0 && inplace_input() == input;
  }
  // The kernel reads only input `i`'s shape, never its elements (SumToShapeOf's target, Shape):
  // the planner does not keep that input's buffer alive for this read.
  virtual bool reads_only_shape(size_t input) const {
    (void)input;
    return false;
  }
  // Output 0 is input 0's buffer reinterpreted (Reshape, Flatten, Squeeze, Identity): no copy.
  virtual bool output_aliases_input() const { return false; }
  // False for ops whose result must not be computed at plan time even with constant inputs.
  virtual bool foldable() const { return true; }
  // True for ops that take sequences and optionals as well as tensors (the sequence and optional
  // ops, Identity, If, Loop): any other kernel given one is a TypeError naming the node, from the
  // planner or, for values known only then, at run time. Such a kernel writes a non-tensor output
  // by assigning it (`ctx.output(i) = Tensor::sequence(...)`): its planned output is undefined.
  virtual bool takes_non_tensors() const { return false; }

 protected:
  const Node& node_;
};

struct KernelDef {
  std::string domain;
  std::string op_type;
  int64_t since_version = 1;
  int64_t end_version = kMaxOpset;  // inclusive
  std::vector<DType> dtypes;        // accepted dtypes of input `type_input`; empty: any
  size_t type_input = 0;
  std::function<std::unique_ptr<Kernel>(const Node&)> create;
};

class KernelRegistry {
 public:
  static KernelRegistry& global();
  void add(KernelDef def);
  // The kernel for this node; throws Unsupported naming op, domain, opset and dtype when none fits.
  const KernelDef& resolve(const std::string& domain, const std::string& op_type, int64_t opset, DType dtype) const;
  const KernelDef* find(const std::string& domain, const std::string& op_type, int64_t opset, DType dtype) const;
  // The kernel for a node given the dtypes of its inputs (nullopt: omitted): each candidate is
  // checked against the dtype of its own `type_input`. Throws Unsupported like resolve().
  const KernelDef& resolve_node(const Node& node, int64_t opset,
                                const std::vector<std::optional<DType>>& input_dtypes) const;
  // Whether any kernel exists for the op at this opset, whatever the dtype.
  bool has_op(const std::string& domain, const std::string& op_type, int64_t opset) const;
  const std::vector<KernelDef>& all() const { return defs_; }

 private:
  std::vector<KernelDef> defs_;
};

// Documentation of an op Kiln defines (domain ai.kiln), registered next to its kernel and printed
// into docs/ops.md by `kiln ops --json`.
struct OpDoc {
  std::string domain;
  std::string op_type;
  std::string summary;
  std::vector<std::string> inputs;  // "name: meaning"
  std::vector<std::string> outputs;
  std::string math;
};
const std::vector<OpDoc>& op_docs();
struct OpDocRegistrar {
  explicit OpDocRegistrar(OpDoc doc);
};

// Runs one node eagerly on the given inputs (an undefined Tensor marks an omitted optional input):
// resolves its kernel, infers, allocates, computes. All inputs count as known values, so ops that
// read shapes from inputs work. Used for constant folding and kernel tests.
std::vector<Tensor> run_node(const Node& node, const std::vector<Tensor>& inputs, int64_t opset = 17);

// How this process runs bfloat16 matrix products (mixed precision): natively in oneDNN where the CPU
// has bfloat16 instructions (AVX512-BF16, AMX-BF16), else in float32 on the widened operands
// (kernels/cpu/low_precision.h; KILN_BF16=emulate forces that). `kiln ops` and the bench print it.
const char* bf16_compute_path();

struct KernelRegistrar {
  KernelRegistrar(KernelDef def, std::function<std::unique_ptr<Kernel>(const Node&)> create);
};

}  // namespace kiln
