// Ops whose output is bool: the comparisons Equal, Less, Greater, LessOrEqual, GreaterOrEqual
// (numpy broadcasting, 16-bit floats compared in float, NaN unequal to everything), the logical
// And, Or, Xor, Not on bool tensors, and the float tests IsNaN and IsInf.
#include <cmath>

#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

struct EqualOp {
  template <class C>
  static bool apply(C a, C b) {
    return a == b;
  }
};
struct LessOp {
  template <class C>
  static bool apply(C a, C b) {
    return a < b;
  }
};
struct GreaterOp {
  template <class C>
  static bool apply(C a, C b) {
    return a > b;
  }
};
struct LessOrEqualOp {
  template <class C>
  static bool apply(C a, C b) {
    return a <= b;
  }
};
struct GreaterOrEqualOp {
  template <class C>
  static bool apply(C a, C b) {
    return a >= b;
  }
};
struct AndOp {
  static bool apply(bool a, bool b) { return a && b; }
};
struct OrOp {
  static bool apply(bool a, bool b) { return a || b; }
};
struct XorOp {
  static bool apply(bool a, bool b) { return a != b; }
};

using ComparableTypes = NumericTypes;
using EquatableTypes = TypeList<float, double, Half, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                                uint32_t, uint64_t, bool>;
using BoolTypes = TypeList<bool>;

// y = op(a, b) under broadcasting; a and b share a dtype from Types, y is bool.
template <class Op, class Types>
class PredicateKernel final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    check_same_dtype(node_, ctx);
    const Shape out = broadcast_inputs(ctx, 2);
    inplace_ = same_as_output(ctx, 2, DType::Bool, out);  // the output can reuse a bool input of its shape
    return {TensorMeta{DType::Bool, out, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const BroadcastPlan<2> plan = make_broadcast_plan<2>({a.shape(), b.shape()});
    dispatch(Types{}, a.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      broadcast_binary(plan, a.data<T>(), b.data<T>(), ctx.output(0).data<bool>(),
                       [](T x, T y) { return Op::apply(load(x), load(y)); });
    });
  }

  std::optional<size_t> inplace_input() const override { return inplace_; }

 private:
  std::optional<size_t> inplace_;
};

struct NotOp {
  using Types = BoolTypes;
  explicit NotOp(const Node&) {}
  bool operator()(bool x) const { return !x; }
};

// y = test(x) for float x, y bool.
template <class Test>
class FloatTestKernel final : public Kernel {
 public:
  explicit FloatTestKernel(const Node& n) : Kernel(n), test_(n) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    return {TensorMeta{DType::Bool, ctx.shape(0), false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch(FloatTypes{}, x.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      map_unary(x.data<T>(), ctx.output(0).data<bool>(), x.numel(), [this](T v) { return test_(load(v)); });
    });
  }

 private:
  Test test_;
};

struct IsNaNTest {
  explicit IsNaNTest(const Node&) {}
  template <class C>
  bool operator()(C v) const {
    return std::isnan(v);
  }
};

struct IsInfTest {
  bool positive, negative;
  explicit IsInfTest(const Node& n)
      : positive(n.attr_int("detect_positive", 1) != 0), negative(n.attr_int("detect_negative", 1) != 0) {}
  template <class C>
  bool operator()(C v) const {
    return std::isinf(v) && (v > C(0) ? positive : negative);
  }
};

template <class Op, class Types>
KernelRegistrar register_predicate(const char* op, int64_t since, int64_t end = kMaxOpset) {
  return register_kernel<PredicateKernel<Op, Types>, Types>(op, since, end);
}

// Comparisons on numbers before opset 11 (7 for Equal's ints) only lacked some dtypes; every
// version accepts all of them here. Bool Equal is in the spec from opset 11 (and in ORT from 7).
const KernelRegistrar kRegistrars[] = {
    register_predicate<EqualOp, EquatableTypes>("Equal", 7),
    register_predicate<LessOp, ComparableTypes>("Less", 7),
    register_predicate<GreaterOp, ComparableTypes>("Greater", 7),
    register_predicate<LessOrEqualOp, ComparableTypes>("LessOrEqual", 12),
    register_predicate<GreaterOrEqualOp, ComparableTypes>("GreaterOrEqual", 12),
    register_predicate<AndOp, BoolTypes>("And", 7),
    register_predicate<OrOp, BoolTypes>("Or", 7),
    register_predicate<XorOp, BoolTypes>("Xor", 7),
    register_unary<NotOp>("Not", 1),
    register_kernel<FloatTestKernel<IsNaNTest>, FloatTypes>("IsNaN", 9),
    register_kernel<FloatTestKernel<IsInfTest>, FloatTypes>("IsInf", 10),
};

}  // namespace

}  // namespace kiln
