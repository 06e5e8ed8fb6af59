// kiln._kiln's TrainingArguments (from / to a dict through TrainingArguments::from_json / to_json),
// TrainerState (read-only, log_history as dicts) and TrainerControl (mutable flags; the object a
// callback receives is the Trainer's own, so setting a flag steers the C++ loop).
// python/kiln/training_args.py and trainer_callback.py give them Hugging Face's signatures.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <fstream>

#include "kiln/distributed.h"
#include "kiln/error.h"
#include "kiln/ipu_config.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

using namespace kiln::trainer;

void register_args(py::module_& m) {
  py::class_<TrainingArguments>(m, "TrainingArguments")
      .def(py::init([](const py::dict& values) {
             return TrainingArguments::from_json(json_from_py(values, "TrainingArguments"));
           }),
           py::arg("values"))
      .def("to_dict", [](const TrainingArguments& a) { return py_from_json(a.to_json()); })
      .def("to_json_string", &TrainingArguments::to_json_string)
      .def("get_warmup_steps", &TrainingArguments::get_warmup_steps, py::arg("num_training_steps"))
      .def("world_size", &TrainingArguments::world_size)
      .def("process_index", &TrainingArguments::process_index)
      .def("local_process_index", &TrainingArguments::local_process_index)
      .def("should_log", &TrainingArguments::should_log)
      .def("should_save", &TrainingArguments::should_save)
      .def_static("option_names", &TrainingArguments::option_names)
      .def_static(
          "parse_args_with_remaining",
          [](const std::vector<std::string>& argv) {
            std::vector<std::string> remaining;
            TrainingArguments args = TrainingArguments::parse_args(argv, &remaining);
            return py::make_tuple(std::move(args), remaining);
          },
          py::arg("argv"))
      .def("__eq__", [](const TrainingArguments& a, const TrainingArguments& b) { return a == b; });
}

std::string control_repr(const TrainerControl& c) {
  auto b = [](bool v) { return v ? "True" : "False"; };
  return fmt::format(
      "TrainerControl(should_training_stop={}, should_epoch_stop={}, should_save={}, should_evaluate={}, "
      "should_log={})",
      b(c.should_training_stop), b(c.should_epoch_stop), b(c.should_save), b(c.should_evaluate), b(c.should_log));
}

void register_control(py::module_& m) {
  py::class_<TrainerControl>(m, "TrainerControl")
      .def(py::init([](bool training_stop, bool epoch_stop, bool save, bool evaluate, bool log) {
             return TrainerControl{training_stop, epoch_stop, save, evaluate, log};
           }),
           py::arg("should_training_stop") = false, py::arg("should_epoch_stop") = false,
           py::arg("should_save") = false, py::arg("should_evaluate") = false, py::arg("should_log") = false)
      .def_readwrite("should_training_stop", &TrainerControl::should_training_stop)
      .def_readwrite("should_epoch_stop", &TrainerControl::should_epoch_stop)
      .def_readwrite("should_save", &TrainerControl::should_save)
      .def_readwrite("should_evaluate", &TrainerControl::should_evaluate)
      .def_readwrite("should_log", &TrainerControl::should_log)
      // HF's resets, for callbacks written against them.
      .def("_new_training", [](TrainerControl& c) { c.should_training_stop = false; })
      .def("_new_epoch", [](TrainerControl& c) { c.should_epoch_stop = false; })
      .def("_new_step", [](TrainerControl& c) { c.should_save = c.should_evaluate = c.should_log = false; })
      .def("state", [](const TrainerControl& c) { return py_from_json(c.state()); })
      .def("load_state", [](TrainerControl& c, const py::dict& s) { c.load_state(json_from_py(s, "state")); })
      .def("__eq__", [](const TrainerControl& a, const TrainerControl& b) { return a == b; })
      .def("__repr__", &control_repr);
}

void register_state(py::module_& m) {
  py::class_<TrainerState>(m, "TrainerState")
      .def(py::init<>())
      .def_readonly("epoch", &TrainerState::epoch)
      .def_readonly("global_step", &TrainerState::global_step)
      .def_readonly("max_steps", &TrainerState::max_steps)
      .def_readonly("logging_steps", &TrainerState::logging_steps)
      .def_readonly("eval_steps", &TrainerState::eval_steps)
      .def_readonly("save_steps", &TrainerState::save_steps)
      .def_readonly("train_batch_size", &TrainerState::train_batch_size)
      .def_readonly("num_train_epochs", &TrainerState::num_train_epochs)
      .def_readonly("num_input_tokens_seen", &TrainerState::num_input_tokens_seen)
      .def_readonly("total_flos", &TrainerState::total_flos)
      .def_readonly("best_metric", &TrainerState::best_metric)
      .def_readonly("best_global_step", &TrainerState::best_global_step)
      .def_readonly("best_model_checkpoint", &TrainerState::best_model_checkpoint)
      .def_readonly("is_local_process_zero", &TrainerState::is_local_process_zero)
      .def_readonly("is_world_process_zero", &TrainerState::is_world_process_zero)
      .def_readonly("is_hyper_param_search", &TrainerState::is_hyper_param_search)
      .def_property_readonly("log_history",
                             [](const TrainerState& s) {
                               py::list out;
                               for (const auto& entry : s.log_history) out.append(py_from_json(entry));
                               return out;
                             })
      .def_property_readonly("stateful_callbacks",
                             [](const TrainerState& s) { return py_from_json(s.stateful_callbacks); })
      .def("to_dict", [](const TrainerState& s) { return py_from_json(s.to_json()); })
      .def("to_json_string", [](const TrainerState& s) { return s.to_json().dump(2) + "\n"; })
      .def(
          "save_to_json",
          [](const TrainerState& s, const std::string& path) {
            std::ofstream out(path, std::ios::binary);
            if (!out) throw IOError(fmt::format("{}: cannot write the trainer state", path));
            out << s.to_json().dump(2) << "\n";
            if (!out) throw IOError(fmt::format("{}: writing the trainer state failed", path));
          },
          py::arg("json_path"))
      .def_static(
          "load_from_json",
          [](const std::string& path) {
            std::ifstream in(path, std::ios::binary);
            if (!in) throw IOError(fmt::format("{}: cannot open the trainer state", path));
            nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
            if (j.is_discarded()) throw CorruptFile(fmt::format("{}: not a valid JSON file", path));
            try {
              return TrainerState::from_json(j);
            } catch (Error& e) {
              e.add_context(path + ": ");
              throw;
            }
          },
          py::arg("json_path"))
      .def("__repr__", [](const TrainerState& s) {
        return fmt::format("TrainerState(epoch={}, global_step={}, max_steps={}, log_history=[{} entries])", s.epoch,
                           s.global_step, s.max_steps, s.log_history.size());
      });
}

}  // namespace

// kiln.distributed: the process's place in a distributed run (kiln/distributed.h).
void register_distributed(py::module_& m) {
  m.def("dist_info", [] {
    const auto w = dist::world();
    py::dict d;
    d["rank"] = w->rank();
    d["world_size"] = w->size();
    d["local_rank"] = w->local_rank();
    d["local_world_size"] = w->local_size();
    d["backend"] = w->backend();
    return d;
  });
  m.def("dist_barrier", [] {
    const auto w = dist::world();
    py::gil_scoped_release release;
    w->barrier();
  });
}

// kiln.graphcore.IPUConfig's checks and JSON forms (kiln/ipu_config.h): a dict in, the resolved
// dict out.
void register_ipu_config(py::module_& m) {
  m.def("ipu_config_resolve", [](const py::dict& values) {
    return py_from_json(IPUConfig::from_dict(json_from_py(values, "IPUConfig")).to_dict());
  });
  m.def("ipu_config_update", [](const py::dict& values, const std::string& overrides) {
    IPUConfig c = IPUConfig::from_dict(json_from_py(values, "IPUConfig"));
    c.update_from_string(overrides);
    return py_from_json(c.to_dict());
  });
  m.def("ipu_config_load",
        [](const std::string& dir_or_json) { return py_from_json(IPUConfig::from_pretrained(dir_or_json).to_dict()); });
  m.def("ipu_config_save", [](const py::dict& values, const std::string& dir) {
    IPUConfig::from_dict(json_from_py(values, "IPUConfig")).save_pretrained(dir);
  });
  m.def("ipu_layers_per_stage", [](const py::dict& values, int64_t layers) {
    return IPUConfig::from_dict(json_from_py(values, "IPUConfig")).layers_per_stage(layers);
  });
}

void register_trainer_args(py::module_& m) {
  register_ipu_config(m);
  register_distributed(m);
  register_args(m);
  register_control(m);
  register_state(m);
}

}  // namespace kiln::python
