// Shared by the kiln::nn binding files (nn_module.cpp, nn_layers.cpp, nn_zoo.cpp): the tracer a
// Python forward emits into, and conversions. python/kiln/nn/ gives these torch.nn's interface.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "kiln/nn/module.h"

namespace kiln::python {

namespace py = pybind11;

// The tracer of the innermost Python forward running on this thread; InvalidArgument naming
// `what` when none runs (a Var used outside forward).
nn::Tracer& active_tracer(const std::string& what);

// An ONNX type name ("float", "int64", "bool", ...; dtype_name's) as a DType; TypeError otherwise.
DType dtype_from_name(const std::string& name);

void register_nn_layers(py::module_& nn);  // nn_layers.cpp
void register_nn_zoo(py::module_& nn);     // nn_zoo.cpp

}  // namespace kiln::python
