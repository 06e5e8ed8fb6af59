// The pieces of the kiln._kiln extension module, each registered by its own file.
#pragma once

#include <pybind11/pybind11.h>

#include "kiln/graph.h"

namespace kiln::python {

namespace py = pybind11;

void register_errors(py::module_& m);
void register_session(py::module_& m);
void register_training(py::module_& m);
// The Trainer (trainer_bindings.h): arguments, state, callbacks, datasets, Trainer.
void register_trainer_args(py::module_& m);
void register_callbacks(py::module_& m);
void register_data(py::module_& m);
void register_trainer(py::module_& m);
// kiln::nn (nn_module.cpp, nn_layers.cpp, nn_zoo.cpp): the submodule kiln._kiln.nn.
void register_nn(py::module_& m);
void register_text(py::module_& m);
void register_generation(py::module_& m);

// An ONNX model from a path (str or os.PathLike) or its bytes; `check` runs ONNX's checker.
Model load_any(const py::object& model, bool check = true);

}  // namespace kiln::python
