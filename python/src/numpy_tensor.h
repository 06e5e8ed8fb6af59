// numpy arrays <-> kiln::Tensor for the Python extension.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "kiln/tensor.h"

namespace kiln::python {

namespace py = pybind11;

// A Tensor over the array's memory (no copy; the array must outlive the Tensor). Arrays that are
// not C-contiguous are copied into a contiguous array first, which `keep` then holds. TypeError
// naming `what` for dtypes Kiln lacks (object, strings, complex).
Tensor borrow_array(const py::handle& obj, const std::string& what, py::object& keep);

// A numpy array that shares the tensor's memory (its storage is kept alive by the array).
py::array to_array(const Tensor& t);
// A numpy array holding a copy of the tensor.
py::array copy_to_array(const Tensor& t);

}  // namespace kiln::python
