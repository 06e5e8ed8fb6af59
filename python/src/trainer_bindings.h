// Shared by the Trainer's binding files (trainer_args.cpp, callbacks.cpp, data.cpp, trainer.cpp):
// JSON <-> Python conversion, Python objects held by C++, and which Python Trainer runs now.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bindings.h"
#include "kiln/data.h"
#include "kiln/lr_schedulers.h"
#include "kiln/trainer.h"

namespace kiln::python {

namespace py = pybind11;

// None, bool, int, float, str, dict (str keys), list/tuple, numpy scalars and os.PathLike as JSON;
// TypeError naming `where` for anything else.
nlohmann::json json_from_py(const py::handle& obj, const std::string& where);
py::object py_from_json(const nlohmann::json& j);

// A Python object kept by C++ code that may drop it without the GIL (a dataset, a callback, a
// compute_metrics function held by the Trainer): the last owner takes the GIL to release it.
using PyRef = std::shared_ptr<py::object>;
PyRef hold(py::object obj);
// A learning-rate schedule computed in Python: lr_at(step) is the rate after `step` scheduler steps
// (python/src/lr_scheduler_py.cpp).
std::unique_ptr<trainer::LRScheduler> python_scheduler(const py::object& lr_at, double base_lr);
// ModelSource's optimizer override from kiln/trainer_optimizers.py's dict.
void set_optimizer(trainer::ModelSource& source, const py::dict& spec);

// A Python value as a tensor that owns a copy of its data: numpy arrays keep their dtype, Python
// floats and lists of floats become float32, ints int64 (as torch.tensor makes them). TypeError
// naming `what` for strings, objects and ragged lists.
Tensor tensor_from_py(const py::handle& value, const std::string& what);

// A Python dataset argument as a Kiln dataset: a bound kiln Dataset as itself, anything else
// (a sequence of dicts) through an adapter that calls Python under the GIL.
std::shared_ptr<const data::Dataset> dataset_from_py(const py::object& obj);
py::dict example_to_py(const data::Example& example);

// The Python side of the Trainer whose events are running: set by the Trainer binding for the
// duration of each call that can fire events, so that callbacks receive the user's
// TrainingArguments object, the model they passed, and views of the state and control that keep
// the Trainer alive.
struct ActiveTrainer {
  py::handle owner;  // the kiln._kiln.Trainer object
  py::handle args;   // the kiln.TrainingArguments the user passed
  py::handle model;  // the model argument the user passed
};
// The active Trainer whose state lives at `state`; else the one registered with a null state (a
// Trainer under construction, whose state's address is not known yet); else null.
const ActiveTrainer* active_trainer(const trainer::TrainerState* state);
class ActiveTrainerScope {
 public:
  ActiveTrainerScope(const trainer::TrainerState* state, ActiveTrainer trainer);
  ~ActiveTrainerScope();
  ActiveTrainerScope(const ActiveTrainerScope&) = delete;
  ActiveTrainerScope& operator=(const ActiveTrainerScope&) = delete;

 private:
  const trainer::TrainerState* state_;
};

// A callback given from Python: a bound C++ callback as itself; any other object (a subclass of
// kiln.TrainerCallback, or a Python subclass of a built-in) through an adapter that calls its on_*
// methods. callback_to_py is the inverse (the Python object the adapter wraps).
std::shared_ptr<trainer::TrainerCallback> callback_from_py(const py::object& obj);
py::object callback_to_py(const std::shared_ptr<trainer::TrainerCallback>& callback);

}  // namespace kiln::python
