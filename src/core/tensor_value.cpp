// The values a Tensor handle carries besides tensors: ONNX's sequences and empty optionals
// (include/kiln/tensor.h, ValueKind).
#include <fmt/format.h>

#include "kiln/tensor.h"

namespace kiln {

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Tensor:
      return "tensor";
    case ValueKind::Sequence:
      return "sequence";
    case ValueKind::OptionalTensor:
      return "optional tensor";
    case ValueKind::OptionalSequence:
      return "optional sequence";
  }
  return "value";
}

bool value_kind_fits(ValueKind declared, ValueKind actual) {
  switch (declared) {
    case ValueKind::Tensor:
    case ValueKind::Sequence:
      return actual == declared;
    case ValueKind::OptionalTensor:
      return actual == ValueKind::Tensor || actual == ValueKind::OptionalTensor;
    case ValueKind::OptionalSequence:
      return actual == ValueKind::Sequence || actual == ValueKind::OptionalSequence;
  }
  return false;
}

Tensor Tensor::sequence(DType dtype, std::vector<Tensor> elements) {
  for (size_t i = 0; i < elements.size(); ++i) {
    const Tensor& e = elements[i];
    if (!e.defined() || !e.is_tensor())
      throw TypeError(fmt::format("sequence element {} is {}, not a tensor", i, e.describe()));
    if (e.dtype() != dtype)
      throw TypeError(fmt::format("sequence of {} given element {} of type {}", dtype_name(dtype), i, e.describe()));
  }
  Tensor t = empty(dtype, {0});
  t.kind_ = ValueKind::Sequence;
  t.elements_ = std::make_shared<const std::vector<Tensor>>(std::move(elements));
  return t;
}

Tensor Tensor::none(DType dtype, ValueKind kind) {
  if (kind != ValueKind::OptionalTensor && kind != ValueKind::OptionalSequence)
    throw InvalidArgument(fmt::format("Tensor::none: an empty value is an optional, not a {}", value_kind_name(kind)));
  Tensor t = empty(dtype, {0});
  t.kind_ = kind;
  return t;
}

const std::vector<Tensor>& Tensor::elements() const {
  if (!is_sequence()) throw TypeError(fmt::format("{} is not a sequence", describe()));
  return *elements_;
}

}  // namespace kiln
