// kiln._kiln: the compiled core of the Python package. The Python modules under python/kiln/ give
// it onnxruntime.training's names and signatures; this layer only converts and releases the GIL.
#include "bindings.h"
#include "kiln/version.h"

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln's compiled core (use the kiln package, not this module)";
  m.attr("__version__") = kiln::kVersion;
  kiln::python::register_errors(m);
  kiln::python::register_session(m);
  kiln::python::register_training(m);
  kiln::python::register_trainer_args(m);
  kiln::python::register_callbacks(m);
  kiln::python::register_data(m);
  kiln::python::register_trainer(m);
  kiln::python::register_nn(m);
  kiln::python::register_text(m);
  kiln::python::register_generation(m);
}
