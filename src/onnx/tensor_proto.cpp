#include "onnx/tensor_proto.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "onnx/external_data.h"

namespace kiln::onnxio {

// raw_data and external data are little endian; Kiln copies them as they are.
static_assert(std::endian::native == std::endian::little, "Kiln's ONNX I/O assumes a little-endian host");

using P = onnx::TensorProto;

namespace {

std::string describe(const P& proto, DType dtype, const Shape& shape) {
  return fmt::format("tensor '{}' ({}{})", proto.name(), dtype_name(dtype), to_string(shape));
}

// The typed field that holds a dtype's values when raw_data is not used (ONNX spreads 8- and 16-bit
// types, 16-bit floats as bit patterns, over int32_data and uint32 over uint64_data).
std::pair<int, const char*> typed_field_size(const P& p, DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return {p.float_data_size(), "float_data"};
    case DType::Float64:
      return {p.double_data_size(), "double_data"};
    case DType::Int64:
      return {p.int64_data_size(), "int64_data"};
    case DType::Uint64:
    case DType::Uint32:
      return {p.uint64_data_size(), "uint64_data"};
    case DType::String:
      return {p.string_data_size(), "string_data"};
    default:
      return {p.int32_data_size(), "int32_data"};
  }
}

// Copies a typed repeated field (its length already checked) into the tensor, converting each value.
template <class T, class Field, class Convert>
void fill_from(Tensor& t, const Field& field, Convert convert) {
  T* out = static_cast<T*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = convert(field.Get(static_cast<int>(i)));
}

template <class T>
T narrow(int32_t v) {
  return static_cast<T>(v);
}

void fill_from_typed_fields(const P& proto, Tensor& t) {
  switch (t.dtype()) {
    case DType::Float32:
      return fill_from<float>(t, proto.float_data(), [](float v) { return v; });
    case DType::Float64:
      return fill_from<double>(t, proto.double_data(), [](double v) { return v; });
    case DType::Int64:
      return fill_from<int64_t>(t, proto.int64_data(), [](int64_t v) { return v; });
    case DType::Int32:
      return fill_from<int32_t>(t, proto.int32_data(), [](int32_t v) { return v; });
    case DType::Int16:
      return fill_from<int16_t>(t, proto.int32_data(), narrow<int16_t>);
    case DType::Int8:
      return fill_from<int8_t>(t, proto.int32_data(), narrow<int8_t>);
    case DType::Uint16:
      return fill_from<uint16_t>(t, proto.int32_data(), narrow<uint16_t>);
    case DType::Uint8:
      return fill_from<uint8_t>(t, proto.int32_data(), narrow<uint8_t>);
    case DType::Bool:
      return fill_from<bool>(t, proto.int32_data(), [](int32_t v) { return v != 0; });
    case DType::Float16:
      return fill_from<Half>(t, proto.int32_data(), [](int32_t v) { return Half{static_cast<uint16_t>(v)}; });
    case DType::BFloat16:
      return fill_from<BFloat16>(t, proto.int32_data(), [](int32_t v) { return BFloat16{static_cast<uint16_t>(v)}; });
    case DType::Uint64:
      return fill_from<uint64_t>(t, proto.uint64_data(), [](uint64_t v) { return v; });
    case DType::Uint32:
      return fill_from<uint32_t>(t, proto.uint64_data(), [](uint64_t v) { return static_cast<uint32_t>(v); });
    case DType::String:
      return fill_from<std::string>(t, proto.string_data(), [](const std::string& v) { return v; });
  }
}

bool has_typed_data(const P& p) {
  return p.float_data_size() || p.int32_data_size() || p.int64_data_size() || p.double_data_size() ||
         p.uint64_data_size() || p.string_data_size();
}

// A bool byte other than 0 or 1 is undefined behaviour in C++; files may hold any nonzero byte.
void normalise_bools(Tensor& t) {
  if (t.dtype() != DType::Bool) return;
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) bytes[i] = bytes[i] != 0;
}

}  // namespace

std::string onnx_type_name(int32_t elem_type) {
  if (auto d = dtype_from_onnx(elem_type)) return dtype_name(*d);
  switch (elem_type) {
    case P::STRING:
      return "string";
    case P::COMPLEX64:
      return "complex64";
    case P::COMPLEX128:
      return "complex128";
    case P::UNDEFINED:
      return "undefined";
    default:
      return fmt::format("unknown({})", elem_type);
  }
}

bool is_external(const P& proto) { return proto.has_data_location() && proto.data_location() == P::EXTERNAL; }

Shape proto_shape(const P& proto) {
  Shape shape;
  int64_t count = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0)
      throw InvalidModel(fmt::format("tensor '{}' has a negative dimension in dims [{}]", proto.name(),
                                     fmt::join(proto.dims(), ", ")));
    if (__builtin_mul_overflow(count, d, &count))
      throw InvalidModel(fmt::format("tensor '{}' has dims [{}] whose element count overflows int64", proto.name(),
                                     fmt::join(proto.dims(), ", ")));
    shape.push_back(d);
  }
  return shape;
}

Tensor tensor_from_proto(const P& proto, const TensorSource& source) {
  const std::string& name = proto.name();
  const auto dtype = dtype_from_onnx(proto.data_type());
  if (!dtype) {
    const std::string type = onnx_type_name(proto.data_type());
    if (proto.data_type() == P::COMPLEX64 || proto.data_type() == P::COMPLEX128)
      throw Unsupported(fmt::format("tensor '{}' has element type {}, which Kiln does not support", name, type));
    throw InvalidModel(fmt::format("tensor '{}' has element type {}, which is not an ONNX tensor type", name, type));
  }
  if (proto.has_segment())
    throw Unsupported(fmt::format("tensor '{}' is a segment of a larger tensor, which Kiln does not support", name));
  const Shape shape = proto_shape(proto);
  const std::string what = describe(proto, *dtype, shape);
  // Every size is checked against the data before allocating: a corrupt file may claim any shape.
  const uint64_t count = static_cast<uint64_t>(numel(shape));
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(count, dtype_size(*dtype), &nbytes))
    throw InvalidModel(fmt::format("{} is too large to address", what));

  Tensor t;
  if (*dtype == DType::String && (is_external(proto) || proto.has_raw_data()))
    throw InvalidModel(fmt::format("{} holds strings, which ONNX stores in string_data only", what));
  if (is_external(proto)) {
    if (proto.has_raw_data() || has_typed_data(proto))
      throw InvalidModel(fmt::format("{} is stored externally but also carries inline data", what));
    const ExternalDataRef ref = resolve_external_data(proto, source.base_dir);
    check_external_range(ref, name, nbytes);
    t = Tensor::empty(*dtype, shape);
    read_external_data(ref, name, t.raw_data(), t.nbytes());
  } else if (proto.has_raw_data()) {
    if (proto.raw_data().size() != nbytes)
      throw InvalidModel(fmt::format("{} has {} bytes of raw_data, expected {} ({} elements of {} bytes)", what,
                                     proto.raw_data().size(), nbytes, count, dtype_size(*dtype)));
    t = Tensor::empty(*dtype, shape);
    std::memcpy(t.raw_data(), proto.raw_data().data(), nbytes);
  } else {
    const auto [size, field] = typed_field_size(proto, *dtype);
    if (count != 0 && !has_typed_data(proto))
      throw InvalidModel(fmt::format("{} has no data (no raw_data, typed data field or external data)", what));
    if (static_cast<uint64_t>(size) != count)
      throw InvalidModel(fmt::format("{} has {} values in {}, expected {}", what, size, field, count));
    t = Tensor::empty(*dtype, shape);
    fill_from_typed_fields(proto, t);
  }
  normalise_bools(t);
  return t;
}

void tensor_to_proto(const Tensor& tensor, const std::string& name, P* proto) {
  if (!tensor.defined()) throw InvalidArgument(fmt::format("cannot serialize tensor '{}': it is undefined", name));
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(dtype_to_onnx(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  const Tensor packed = tensor.contiguous();
  if (packed.dtype() == DType::String) {  // strings go to string_data, one by one
    const auto* s = packed.data<std::string>();
    for (int64_t i = 0; i < packed.numel(); ++i) proto->add_string_data(s[i]);
    return;
  }
  proto->set_raw_data(static_cast<const char*>(packed.raw_data()), packed.nbytes());
}

void external_tensor_to_proto(const Tensor& tensor, const std::string& name, const std::string& location,
                              uint64_t offset, P* proto) {
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(dtype_to_onnx(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  proto->set_data_location(P::EXTERNAL);
  for (const auto& [key, value] : {std::pair<const char*, std::string>{"location", location},
                                   {"offset", std::to_string(offset)},
                                   {"length", std::to_string(tensor.nbytes())}}) {
    auto* entry = proto->add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  }
}

}  // namespace kiln::onnxio
