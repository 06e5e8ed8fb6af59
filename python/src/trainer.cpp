// kiln._kiln.Trainer: the C++ Trainer with Python datasets, compute_metrics and callbacks. The GIL
// is released while it trains, evaluates and predicts; the Python pieces take it back when called.
// python/kiln/trainer.py gives it Hugging Face's signatures.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>

#include "kiln/error.h"
#include "kiln/hp_search.h"
#include "kiln/onnx_io.h"
#include "numpy_tensor.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

using namespace kiln::trainer;

// The Trainer with the Python objects callbacks receive.
struct PyTrainer {
  py::object args;   // the kiln.TrainingArguments the user passed
  py::object model;  // the model argument the user passed
  std::unique_ptr<Trainer> trainer;

  ActiveTrainer active(const py::handle& self) const { return {self, args, model}; }
  Trainer& get() const {
    if (!trainer) throw InvalidArgument("the Trainer was not constructed");
    return *trainer;
  }
};

ModelSource model_source(const py::dict& spec) {
  const std::string kind = spec["kind"].cast<std::string>();
  const std::string path = spec["path"].cast<std::string>();
  ModelSource s;
  if (kind == "onnx") s = ModelSource::onnx(path, training::loss_type_from_string(spec["loss"].cast<std::string>()));
  else if (kind == "artifacts") s = ModelSource::artifacts(path);
  else if (kind == "builtin") s = ModelSource::builtin(path);
  else throw InvalidArgument(fmt::format("model kind '{}': expected onnx, artifacts or builtin", kind));
  if (spec.contains("logits_output") && !spec["logits_output"].is_none())
    s.logits_output = spec["logits_output"].cast<std::string>();
  if (spec.contains("frozen_params") && !spec["frozen_params"].is_none())
    s.frozen_params = spec["frozen_params"].cast<std::vector<std::string>>();
  if (spec.contains("optimizer") && !spec["optimizer"].is_none()) set_optimizer(s, spec["optimizer"].cast<py::dict>());
  return s;
}

Metrics metrics_from_py(const py::handle& result, const std::string& what) {
  if (!py::isinstance<py::dict>(result))
    throw TypeError(fmt::format("{} must return a dict of metric name -> number, not {}", what,
                                std::string(py::str(result.get_type().attr("__name__")))));
  Metrics metrics;
  for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(result)) {
    const std::string key = py::str(k);
    try {
      metrics[key] = py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>();
    } catch (py::error_already_set&) {
      throw TypeError(fmt::format("{} returned '{}': {} (a {}); metrics must be numbers", what, key,
                                  std::string(py::repr(v)), std::string(py::str(v.get_type().attr("__name__")))));
    }
  }
  return metrics;
}

Logs logs_from_py(const py::dict& logs) {
  Logs out;
  for (const auto& [k, v] : logs) {
    const std::string key = py::str(k);
    try {
      out.emplace_back(key, py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>());
    } catch (py::error_already_set&) {
      throw TypeError(
          fmt::format("Trainer.log: '{}' is {}; logged values must be numbers", key, std::string(py::repr(v))));
    }
  }
  return out;
}

py::dict metrics_to_py(const Metrics& metrics) {
  py::dict out;
  for (const auto& [k, v] : metrics) out[py::str(k)] = v;
  return out;
}

ComputeMetrics compute_metrics_from_py(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  PyRef held = hold(fn);
  return [held](const EvalPrediction& p) {
    py::gil_scoped_acquire gil;
    const py::object eval_prediction = py::module_::import("kiln.trainer_utils").attr("EvalPrediction");
    const auto array_or_none = [](const Tensor& t) { return t.defined() ? py::object(copy_to_array(t)) : py::none(); };
    const py::object result = (*held)(eval_prediction(copy_to_array(p.predictions), array_or_none(p.label_ids),
                                                      array_or_none(p.inputs), array_or_none(p.losses)));
    return metrics_from_py(result, "compute_metrics");
  };
}

PreprocessLogits preprocess_from_py(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  PyRef held = hold(fn);
  return [held](const Tensor& logits, const Tensor& labels) {
    py::gil_scoped_acquire gil;
    const py::object py_labels = labels.defined() ? py::object(copy_to_array(labels)) : py::none();
    return tensor_from_py((*held)(copy_to_array(logits), py_labels), "the result of preprocess_logits_for_metrics");
  };
}

std::shared_ptr<const data::Dataset> optional_dataset(const py::object& obj) {
  return obj.is_none() ? nullptr : dataset_from_py(obj);
}

using TrainerClass = py::class_<PyTrainer, std::shared_ptr<PyTrainer>>;

// Trainer(...): the C++ Trainer over the Python-side model spec, datasets and callbacks.
void def_construction(TrainerClass& cls) {
  cls.def(py::init([](const py::dict& model_spec, const TrainingArguments& args, const py::object& py_args,
                      const py::object& model, const py::object& train_dataset, const py::object& eval_dataset,
                      const py::object& compute_metrics, const py::object& preprocess, const py::list& callbacks) {
            auto t = std::make_shared<PyTrainer>();
            t->args = py_args;
            t->model = model;
            ModelSource source = model_source(model_spec);
            auto train = optional_dataset(train_dataset);
            auto eval = optional_dataset(eval_dataset);
            ComputeMetrics metrics = compute_metrics_from_py(compute_metrics);
            PreprocessLogits logits = preprocess_from_py(preprocess);
            std::vector<std::shared_ptr<TrainerCallback>> cbs;
            for (const auto& cb : callbacks) cbs.push_back(callback_from_py(py::reinterpret_borrow<py::object>(cb)));
            // on_init_end fires before the state's address is known: callbacks get the user's args
            // and model, and a copy of the (initial) state.
            ActiveTrainerScope scope(nullptr, {py::handle(), py_args, model});
            py::gil_scoped_release release;
            t->trainer = std::make_unique<Trainer>(std::move(source), args, std::move(train), std::move(eval),
                                                   std::move(metrics), std::move(logits), std::move(cbs));
            return t;
          }),
          py::arg("model_spec"), py::arg("args"), py::arg("py_args"), py::arg("model"), py::arg("train_dataset"),
          py::arg("eval_dataset"), py::arg("compute_metrics"), py::arg("preprocess_logits_for_metrics"),
          py::arg("callbacks"));
}

// train / evaluate / predict / log, with the GIL released while the C++ loop runs.
void def_training_loop(TrainerClass& cls) {
  cls.def(
         "train",
         [](const py::object& self, const std::string& resume) {
           const PyTrainer& t = self.cast<const PyTrainer&>();
           ActiveTrainerScope scope(&t.get().state(), t.active(self));
           TrainOutput out;
           {
             py::gil_scoped_release release;
             out = t.get().train(resume);
           }
           return py::make_tuple(out.global_step, out.training_loss, metrics_to_py(out.metrics));
         },
         py::arg("resume_from_checkpoint") = "")
      .def(
          "evaluate",
          [](const py::object& self, const py::object& dataset, const std::string& prefix) {
            const PyTrainer& t = self.cast<const PyTrainer&>();
            auto ds = optional_dataset(dataset);
            ActiveTrainerScope scope(&t.get().state(), t.active(self));
            Metrics out;
            {
              py::gil_scoped_release release;
              out = t.get().evaluate(ds, prefix);
            }
            return metrics_to_py(out);
          },
          py::arg("eval_dataset") = py::none(), py::arg("metric_key_prefix") = "eval")
      .def(
          "predict",
          [](const py::object& self, const py::object& dataset, const std::string& prefix) {
            const PyTrainer& t = self.cast<const PyTrainer&>();
            auto ds = dataset_from_py(dataset);
            ActiveTrainerScope scope(&t.get().state(), t.active(self));
            PredictionOutput out;
            {
              py::gil_scoped_release release;
              out = t.get().predict(ds, prefix);
            }
            const py::object preds = out.predictions.defined() ? py::object(to_array(out.predictions)) : py::none();
            const py::object labels = out.label_ids.defined() ? py::object(to_array(out.label_ids)) : py::none();
            return py::make_tuple(preds, labels, metrics_to_py(out.metrics));
          },
          py::arg("test_dataset"), py::arg("metric_key_prefix") = "test")
      .def("log",
           [](const py::object& self, const py::dict& logs) {
             const PyTrainer& t = self.cast<const PyTrainer&>();
             ActiveTrainerScope scope(&t.get().state(), t.active(self));
             t.get().log(logs_from_py(logs));
           })
      // A subclass's Trainer.log: the loop's logs go to hook(dict) (under the GIL).
      .def("set_log_hook",
           [](PyTrainer& t, const py::object& hook) {
             PyRef held = hold(hook);
             t.get().set_log_hook([held](Logs logs) {
               py::gil_scoped_acquire gil;
               py::dict d;
               for (const auto& [k, v] : logs) d[py::str(k)] = v;
               (*held)(d);
             });
           })
      // HF's prediction_step on the eval model: (loss, logits or None, labels or None) of one batch.
      .def(
          "prediction_step",
          [](PyTrainer& t, const py::dict& batch, bool prediction_loss_only) {
            data::Example example;
            for (const auto& [k, v] : batch) {
              const std::string name = py::str(k);
              example[name] = tensor_from_py(v, fmt::format("prediction_step: column '{}'", name));
            }
            PredictionStep step;
            {
              py::gil_scoped_release release;
              step = t.get().prediction_step(example, prediction_loss_only);
            }
            const auto array_or_none = [](const Tensor& x) {
              return x.defined() ? py::object(to_array(x)) : py::none();
            };
            return py::make_tuple(step.loss, array_or_none(step.logits), array_or_none(step.labels));
          },
          py::arg("batch"), py::arg("prediction_loss_only"))
      // A subclass's evaluation_loop / prediction_step: hook(metric_key_prefix, description) runs the
      // evaluation in Python and returns its metrics (the predictions stay on the Python side).
      .def("set_evaluation_hook",
           [](PyTrainer& t, const py::object& hook) {
             PyRef held = hold(hook);
             t.get().set_evaluation_hook([held](const std::string& prefix, const std::string& description) {
               py::gil_scoped_acquire gil;
               PredictionOutput out;
               out.metrics = metrics_from_py((*held)(prefix, description), "evaluation_loop");
               return out;
             });
           })
      .def("on_prediction_step",
           [](const py::object& self) {
             const PyTrainer& t = self.cast<const PyTrainer&>();
             ActiveTrainerScope scope(&t.get().state(), t.active(self));
             t.get().on_prediction_step();
           })
      // HF's `optimizers` schedule or create_scheduler: factory(base_lr, warmup, total) returns a
      // callable lr_at(step) (kiln/trainer_optimizers.py), run as an LRScheduler.
      .def("set_scheduler_factory", [](PyTrainer& t, const py::object& factory) {
        PyRef held = hold(factory);
        t.get().set_scheduler_factory([held](double base_lr, int64_t warmup, int64_t total) {
          py::gil_scoped_acquire gil;
          return python_scheduler((*held)(base_lr, warmup, total), base_lr);
        });
      });
}

// Saving the model, state and metrics, and loading weights back.
void def_saving(TrainerClass& cls) {
  cls.def(
         "save_model",
         [](const PyTrainer& t, const std::string& dir) {
           py::gil_scoped_release release;
           t.get().save_model(dir);
         },
         py::arg("output_dir") = "")
      .def("save_state", [](const PyTrainer& t) { t.get().save_state(); })
      .def("load_model_weights",
           [](const PyTrainer& t, const std::string& folder) { t.get().load_model_weights(folder); })
      .def("log_metrics",
           [](const PyTrainer& t, const std::string& split, const py::dict& metrics) {
             t.get().log_metrics(split, metrics_from_py(metrics, "log_metrics"));
           })
      .def("save_metrics", [](const PyTrainer& t, const std::string& split, const py::dict& metrics, bool combined) {
        t.get().save_metrics(split, metrics_from_py(metrics, "save_metrics"), combined);
      });
}

// TrainerState / TrainerControl and the callback list.
void def_state_and_callbacks(TrainerClass& cls) {
  cls.def_property_readonly(
         "state", [](const PyTrainer& t) { return &t.get().state(); }, py::return_value_policy::reference_internal)
      .def_property_readonly(
          "control", [](const PyTrainer& t) { return &t.get().control(); }, py::return_value_policy::reference_internal)
      .def("callbacks",
           [](const PyTrainer& t) {
             py::list out;
             for (const auto& cb : t.get().callbacks()) out.append(callback_to_py(cb));
             return out;
           })
      .def("add_callback", [](const PyTrainer& t, const py::object& cb) { t.get().add_callback(callback_from_py(cb)); })
      .def("pop_callback_at", [](const PyTrainer& t, size_t index) -> py::object {
        const auto& all = t.get().callbacks();
        if (index >= all.size()) return py::none();
        const std::shared_ptr<TrainerCallback> cb = all[index];
        py::object obj = callback_to_py(cb);
        t.get().pop_callback(cb);
        return obj;
      });
}

// The model's input and output names, sizes and weights.
void def_model_access(TrainerClass& cls) {
  cls.def("input_names", [](const PyTrainer& t, bool training) { return t.get().input_columns(training); })
      .def("output_names", [](const PyTrainer& t, bool training) { return t.get().module().output_names(training); })
      // HF's floating_point_ops(inputs): Kiln's estimate, 6 x parameters x tokens.
      .def("floating_point_ops",
           [](const PyTrainer& t, const py::dict& inputs) {
             data::Example batch;
             for (const auto& [k, v] : inputs) {
               const std::string name = py::str(k);
               batch[name] = tensor_from_py(v, "inputs['" + name + "']");
             }
             return t.get().floating_point_ops(batch);
           })
      .def("num_parameters",
           [](const PyTrainer& t, bool trainable) { return t.get().module().get_parameters_size(trainable); })
      // The bytes of optimizer state (moments) this rank holds: with ZeRO, its shard's.
      .def("optimizer_state_bytes",
           [](const PyTrainer& t) {
             size_t n = 0;
             for (const auto& [slot, tensors] : t.get().checkpoint_state().optimizer_state().slots)
               for (const auto& [param, tensor] : tensors)
                 if (tensor.defined()) n += tensor.nbytes();
             return n;
           })
      // The model's current weights by initializer name (copies): what kiln.nn modules load back
      // after training.
      .def("parameter_values", [](const PyTrainer& t) {
        py::dict out;
        for (const auto& [name, p] : t.get().checkpoint_state().parameters())
          if (p.has_data()) out[py::str(name)] = copy_to_array(p.data());
        return out;
      });
}

void register_trainer_class(py::module_& m) {
  TrainerClass cls(m, "Trainer");
  def_construction(cls);
  def_training_loop(cls);
  def_saving(cls);
  def_state_and_callbacks(cls);
  def_model_access(cls);
}

}  // namespace

void register_trainer(py::module_& m) {
  register_trainer_class(m);
  m.def(
      "onnx_io_names",
      [](const std::string& path) {
        Model model;
        {
          py::gil_scoped_release release;
          model = load_model(path);
        }
        std::vector<std::string> inputs, outputs;
        for (const auto& v : model.graph.inputs) inputs.push_back(v.name);
        for (const auto& v : model.graph.outputs) outputs.push_back(v.name);
        return py::make_tuple(inputs, outputs);
      },
      py::arg("path"));
  m.def("builtin_model_names", &ModelSource::builtin_names);
  // kiln/hp_search.py's "random" backend draws with the C++ search's sampler: the same seed and
  // the same order of suggestions give `kiln hpsearch`'s values.
  py::class_<HpSampler>(m, "HpSampler")
      .def(py::init<uint64_t>(), py::arg("seed"))
      .def("suggest_float", &HpSampler::suggest_float, py::arg("low"), py::arg("high"), py::arg("log") = false,
           py::arg("step") = 0.0)
      .def("suggest_int", &HpSampler::suggest_int, py::arg("low"), py::arg("high"), py::arg("step") = 1,
           py::arg("log") = false)
      .def("suggest_index", &HpSampler::suggest_index, py::arg("n"));
}

}  // namespace kiln::python
