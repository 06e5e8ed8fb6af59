// The pieces of the kiln._kiln extension module, each registered by its own file.
#pragma once

#include <pybind11/pybind11.h>

namespace kiln::python {

namespace py = pybind11;

void register_errors(py::module_& m);
void register_session(py::module_& m);
void register_training(py::module_& m);

}  // namespace kiln::python
