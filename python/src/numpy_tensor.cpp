#include "numpy_tensor.h"

#include <fmt/format.h>

#include <memory>

#include "kiln/error.h"

namespace kiln::python {

namespace {

DType dtype_of(const py::dtype& d, const std::string& what) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 4) return DType::Float32;
  if (kind == 'f' && size == 8) return DType::Float64;
  if (kind == 'f' && size == 2) return DType::Float16;
  if (kind == 'b' && size == 1) return DType::Bool;
  if (kind == 'i') {
    switch (size) {
      case 1:
        return DType::Int8;
      case 2:
        return DType::Int16;
      case 4:
        return DType::Int32;
      case 8:
        return DType::Int64;
    }
  }
  if (kind == 'u') {
    switch (size) {
      case 1:
        return DType::Uint8;
      case 2:
        return DType::Uint16;
      case 4:
        return DType::Uint32;
      case 8:
        return DType::Uint64;
    }
  }
  throw TypeError(fmt::format("{}: numpy dtype '{}' has no Kiln equivalent", what,
                              std::string(py::str(static_cast<const py::handle&>(d)))));
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::Float32:
      return py::dtype::of<float>();
    case DType::Float64:
      return py::dtype::of<double>();
    case DType::Float16:
      return py::dtype("float16");
    case DType::Int64:
      return py::dtype::of<int64_t>();
    case DType::Int32:
      return py::dtype::of<int32_t>();
    case DType::Int16:
      return py::dtype::of<int16_t>();
    case DType::Int8:
      return py::dtype::of<int8_t>();
    case DType::Uint64:
      return py::dtype::of<uint64_t>();
    case DType::Uint32:
      return py::dtype::of<uint32_t>();
    case DType::Uint16:
      return py::dtype::of<uint16_t>();
    case DType::Uint8:
      return py::dtype::of<uint8_t>();
    case DType::Bool:
      return py::dtype::of<bool>();
    case DType::String:
      return py::dtype("O");
    case DType::BFloat16:
      break;
  }
  throw TypeError("bfloat16 tensors have no numpy dtype; cast them to float32 first");
}

// A string tensor holding a copy of a numpy str, bytes or object array's elements (objects must be
// str or bytes; bytes are taken as UTF-8).
Tensor string_tensor(const py::array& a, const std::string& what) {
  Shape shape(a.shape(), a.shape() + a.ndim());
  Tensor t = Tensor::empty(DType::String, shape);
  auto* out = t.data<std::string>();
  const py::list items = a.attr("ravel")().attr("tolist")();
  for (size_t i = 0; i < items.size(); ++i) {
    const py::handle item = items[i];
    if (py::isinstance<py::str>(item)) out[i] = item.cast<std::string>();
    else if (py::isinstance<py::bytes>(item)) out[i] = std::string(py::reinterpret_borrow<py::bytes>(item));
    else
      throw TypeError(fmt::format("{}: element {} is a {}; string tensors hold str or bytes", what, i,
                                  std::string(py::str(item.get_type().attr("__name__")))));
  }
  return t;
}

}  // namespace

Tensor borrow_array(const py::handle& obj, const std::string& what, py::object& keep) {
  if (!py::isinstance<py::array>(obj))
    throw TypeError(
        fmt::format("{}: expected a numpy array, got {}", what, std::string(py::str(obj.get_type().attr("__name__")))));
  py::array a = py::reinterpret_borrow<py::array>(obj);
  const char kind = a.dtype().kind();
  if (kind == 'U' || kind == 'S' || kind == 'O') return string_tensor(a, what);
  const DType dtype = dtype_of(a.dtype(), what);
  if (!(a.flags() & py::array::c_style)) a = py::array::ensure(a, py::array::c_style);
  keep = a;
  Shape shape(a.shape(), a.shape() + a.ndim());
  return Tensor::wrap(const_cast<void*>(a.data()), dtype, shape);
}

py::array to_array(const Tensor& t) {
  if (t.dtype() == DType::String) {  // an object array of str (the elements are copied)
    const Tensor c = t.contiguous();
    std::vector<py::ssize_t> shape(c.shape().begin(), c.shape().end());
    py::array out(py::dtype("O"), shape);
    auto* items = static_cast<PyObject**>(out.mutable_data());
    const auto* in = c.data<std::string>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      py::str item(in[i]);
      Py_XDECREF(items[i]);
      items[i] = item.release().ptr();
    }
    return out;
  }
  const Tensor c = t.contiguous();
  auto* holder = new Tensor(c);
  py::capsule owner(holder, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(c.shape().begin(), c.shape().end());
  return py::array(numpy_dtype(c.dtype()), shape, {}, c.raw_data(), owner);
}

py::array copy_to_array(const Tensor& t) { return to_array(t.clone()); }

}  // namespace kiln::python
