// Trigonometric and hyperbolic ops: Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh,
// Atanh. Plain libm calls (within an ulp; oneDNN 2.6 has none of these). Inputs outside an op's
// domain give NaN (asin(2)) or ±inf (atanh(±1)), as IEEE and numpy do.
#include <cmath>

#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

// One Op struct per function; the function is the only thing that differs.
template <class Fn>
struct TrigOp {
  using Types = FloatTypes;
  explicit TrigOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return Fn::apply(x);
  }
};

struct SinFn {
  template <class T>
  static T apply(T x) {
    return std::sin(x);
  }
};
struct CosFn {
  template <class T>
  static T apply(T x) {
    return std::cos(x);
  }
};
struct TanFn {
  template <class T>
  static T apply(T x) {
    return std::tan(x);
  }
};
struct AsinFn {
  template <class T>
  static T apply(T x) {
    return std::asin(x);
  }
};
struct AcosFn {
  template <class T>
  static T apply(T x) {
    return std::acos(x);
  }
};
struct AtanFn {
  template <class T>
  static T apply(T x) {
    return std::atan(x);
  }
};
struct SinhFn {
  template <class T>
  static T apply(T x) {
    return std::sinh(x);
  }
};
struct CoshFn {
  template <class T>
  static T apply(T x) {
    return std::cosh(x);
  }
};
struct AsinhFn {
  template <class T>
  static T apply(T x) {
    return std::asinh(x);
  }
};
struct AcoshFn {
  template <class T>
  static T apply(T x) {
    return std::acosh(x);
  }
};
struct AtanhFn {
  template <class T>
  static T apply(T x) {
    return std::atanh(x);
  }
};

// Sin..Atan since opset 7, the hyperbolic ones since 9; later versions only added dtypes.
const KernelRegistrar kRegistrars[] = {
    register_unary<TrigOp<SinFn>>("Sin", 7),     register_unary<TrigOp<CosFn>>("Cos", 7),
    register_unary<TrigOp<TanFn>>("Tan", 7),     register_unary<TrigOp<AsinFn>>("Asin", 7),
    register_unary<TrigOp<AcosFn>>("Acos", 7),   register_unary<TrigOp<AtanFn>>("Atan", 7),
    register_unary<TrigOp<SinhFn>>("Sinh", 9),   register_unary<TrigOp<CoshFn>>("Cosh", 9),
    register_unary<TrigOp<AsinhFn>>("Asinh", 9), register_unary<TrigOp<AcoshFn>>("Acosh", 9),
    register_unary<TrigOp<AtanhFn>>("Atanh", 9),
};

}  // namespace

}  // namespace kiln
