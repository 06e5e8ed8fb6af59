// kiln._kiln's training API: CheckpointState, Module, Optimizer, LinearLRScheduler and
// generate_artifacts. python/kiln/training/ wraps them with onnxruntime.training's signatures.
#include "kiln/training.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <tuple>

#include "bindings.h"
#include "kiln/artifacts.h"
#include "kiln/data_parallel.h"
#include "kiln/distributed.h"
#include "kiln/error.h"
#include "kiln/grad_scaler.h"
#include "kiln/onnx_io.h"
#include "numpy_tensor.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

using namespace kiln::training;
using StatePtr = std::shared_ptr<CheckpointState>;

std::string fspath(const py::object& path) { return py::str(py::module_::import("os").attr("fspath")(path)); }

py::object property_value(const PropertyValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return py::int_(*i);
  if (const auto* f = std::get_if<float>(&v)) return py::float_(*f);
  return py::str(std::get<std::string>(v));
}

PropertyValue to_property(const std::string& name, const py::object& value) {
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value)) {
    try {
      return value.cast<int64_t>();
    } catch (const py::cast_error&) {
      throw InvalidArgument(
          fmt::format("property '{}': {} does not fit in 64 bits", name, std::string(py::str(value))));
    }
  }
  if (py::isinstance<py::float_>(value)) return value.cast<float>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  throw TypeError(fmt::format("property '{}': values are int, float or str, not {}", name,
                              std::string(py::str(value.get_type().attr("__name__")))));
}

std::vector<Tensor> borrow_all(const py::sequence& inputs, const std::vector<std::string>& names,
                               std::vector<py::object>& keep) {
  std::vector<Tensor> tensors;
  keep.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string what = i < names.size() ? "input '" + names[i] + "'" : fmt::format("input {}", i);
    tensors.push_back(borrow_array(inputs[i], what, keep[i]));
  }
  return tensors;
}

void register_state(py::module_& m) {
  py::class_<CheckpointState, StatePtr>(m, "CheckpointState")
      .def_static("load",
                  [](const py::object& path) {
                    const std::string p = fspath(path);
                    py::gil_scoped_release release;
                    return std::make_shared<CheckpointState>(CheckpointState::load_checkpoint(p));
                  })
      .def_static("save",
                  [](const StatePtr& s, const py::object& path, bool include_optimizer_state) {
                    const std::string p = fspath(path);
                    py::gil_scoped_release release;
                    CheckpointState::save_checkpoint(*s, p, include_optimizer_state);
                  })
      .def("parameter_names", &CheckpointState::parameter_names)
      .def("has_parameter", [](const CheckpointState& s, const std::string& n) { return s.parameters().count(n) != 0; })
      .def("parameter_data",
           [](const CheckpointState& s, const std::string& n) { return copy_to_array(s.parameter(n).data()); })
      .def("set_parameter_data",
           [](CheckpointState& s, const std::string& n, const py::object& value) {
             py::object keep;
             Parameter& p = s.parameter(n);
             p.set_data(borrow_array(value, "parameter '" + n + "'", keep));
           })
      .def("parameter_grad",
           [](const CheckpointState& s, const std::string& n) -> py::object {
             const Tensor& g = s.parameter(n).grad();
             if (!g.defined()) return py::none();
             return copy_to_array(g);
           })
      .def("parameter_requires_grad",
           [](const CheckpointState& s, const std::string& n) { return s.parameter(n).requires_grad(); })
      .def("parameter_shape",
           [](const CheckpointState& s, const std::string& n) {
             const Shape& shape = s.parameter(n).shape();
             return std::vector<int64_t>(shape.begin(), shape.end());
           })
      .def("is_nominal", &CheckpointState::is_nominal)
      .def("property_names",
           [](const CheckpointState& s) {
             std::vector<std::string> names;
             for (const auto& [k, v] : s.properties()) names.push_back(k);
             return names;
           })
      .def("has_property", [](const CheckpointState& s, const std::string& n) { return s.properties().contains(n); })
      .def("get_property",
           [](const CheckpointState& s, const std::string& n) { return property_value(s.properties().get(n)); })
      .def("set_property", [](CheckpointState& s, const std::string& n,
                              const py::object& v) { s.properties().set(n, to_property(n, v)); })
      .def("erase_property", [](CheckpointState& s, const std::string& n) { return s.properties().erase(n); });
}

// Module with the state it trains kept alive.
struct PyModule {
  StatePtr state;
  std::unique_ptr<Module> module;
};

void register_module(py::module_& m) {
  py::class_<PyModule, std::shared_ptr<PyModule>>(m, "Module")
      .def(py::init([](const py::object& train, const StatePtr& state, const py::object& eval,
                       const std::string& device, int num_threads) {
             auto pm = std::make_shared<PyModule>();
             pm->state = state;
             const std::string train_path = fspath(train);
             std::optional<std::string> eval_path;
             if (!eval.is_none()) eval_path = fspath(eval);
             SessionOptions o;
             o.num_threads = num_threads;
             py::gil_scoped_release release;
             pm->module = std::make_unique<Module>(train_path, *state, eval_path, device, o);
             return pm;
           }),
           py::arg("train_model"), py::arg("state"), py::arg("eval_model"), py::arg("device"),
           py::arg("num_threads") = 0)
      .def("run",
           [](PyModule& pm, const py::sequence& inputs, bool training) {
             pm.module->train(training);
             std::vector<py::object> keep;
             const std::vector<Tensor> tensors = borrow_all(inputs, pm.module->input_names(training), keep);
             std::vector<Tensor> out;
             {
               py::gil_scoped_release release;
               out = (*pm.module)(tensors);
             }
             py::list result;
             for (const Tensor& t : out) result.append(to_array(t));
             return result;
           })
      .def("lazy_reset_grad", [](PyModule& pm) { pm.module->lazy_reset_grad(); })
      .def("get_parameters_size", [](const PyModule& pm, bool t) { return pm.module->get_parameters_size(t); })
      .def("get_contiguous_parameters",
           [](const PyModule& pm, bool t) { return to_array(pm.module->get_contiguous_parameters(t)); })
      .def("copy_buffer_to_parameters",
           [](PyModule& pm, const py::object& buffer, bool t) {
             py::object keep;
             const Tensor b = borrow_array(buffer, "buffer", keep);
             pm.module->copy_buffer_to_parameters(b, t);
           })
      .def("export_model_for_inferencing",
           [](const PyModule& pm, const py::object& path, const std::vector<std::string>& outputs,
              const std::string& precision) {
             const std::string p = fspath(path);
             const DType type = mixed_precision_from_string(precision);
             py::gil_scoped_release release;
             pm.module->export_model_for_inferencing(p, outputs, type);
           })
      .def("set_eval_precision",
           [](PyModule& pm, const std::string& precision) {
             const DType type = mixed_precision_from_string(precision);
             py::gil_scoped_release release;
             pm.module->set_eval_precision(type);
           })
      .def("mixed_precision", [](const PyModule& pm) { return pm.module->mixed_precision(); })
      .def("scales_loss", [](const PyModule& pm) { return pm.module->scales_loss(); })
      .def("set_loss_scale", [](PyModule& pm, float s) { pm.module->set_loss_scale(s); })
      .def("loss_scale", [](const PyModule& pm) { return pm.module->loss_scale(); })
      .def("input_names", [](const PyModule& pm, bool t) { return pm.module->input_names(t); })
      .def("output_names", [](const PyModule& pm, bool t) { return pm.module->output_names(t); })
      .def("parameter_names", [](const PyModule& pm) { return pm.module->parameter_names(); });
}

// DataParallel over this process's world (kiln/data_parallel.h), for the on-device API under mpirun.
struct PyDataParallel {
  std::shared_ptr<PyModule> module;
  std::unique_ptr<training::DataParallel> ddp;
};

void register_data_parallel(py::module_& m) {
  py::class_<PyDataParallel, std::shared_ptr<PyDataParallel>>(m, "DataParallel")
      .def(py::init([](const std::shared_ptr<PyModule>& module, double bucket_cap_mb, int zero_stage, bool overlap_comm,
                       bool reduce_scatter, double allgather_bucket_mb) {
        auto p = std::make_shared<PyDataParallel>();
        p->module = module;
        training::DataParallelOptions o;
        o.bucket_cap_mb = bucket_cap_mb;
        o.zero_stage = zero_stage;
        o.overlap_comm = overlap_comm;
        o.reduce_scatter = reduce_scatter;
        o.allgather_bucket_mb = allgather_bucket_mb;
        py::gil_scoped_release release;
        p->ddp = std::make_unique<training::DataParallel>(*module->module, dist::world(), o);
        return p;
      }))
      .def("set_sync", [](PyDataParallel& p, bool sync) { p.ddp->set_sync(sync); })
      .def("sync", [](const PyDataParallel& p) { return p.ddp->sync(); })
      .def("finish",
           [](PyDataParallel& p) {
             py::gil_scoped_release release;
             p.ddp->finish();
           })
      .def("broadcast_buffers",
           [](PyDataParallel& p) {
             py::gil_scoped_release release;
             p.ddp->broadcast_buffers();
           })
      .def("broadcast_parameters",
           [](PyDataParallel& p) {
             py::gil_scoped_release release;
             p.ddp->broadcast_parameters();
           })
      .def("gather_parameters",
           [](PyDataParallel& p) {
             py::gil_scoped_release release;
             p.ddp->gather_parameters();
           })
      .def("zero_stage", [](const PyDataParallel& p) { return p.ddp->zero_stage(); })
      .def("wait_seconds", [](const PyDataParallel& p) { return p.ddp->wait_seconds(); })
      .def("busy_seconds", [](const PyDataParallel& p) { return p.ddp->communicator().busy_seconds(); })
      .def("num_buckets", [](const PyDataParallel& p) { return p.ddp->num_buckets(); })
      .def("owned_elements", [](const PyDataParallel& p) { return p.ddp->owned_elements(); })
      .def("ranges_of", [](const PyDataParallel& p, int rank) {
        std::vector<std::tuple<std::string, int64_t, int64_t>> out;
        for (const auto& r : p.ddp->ranges_of(rank)) out.emplace_back(r.name, r.begin, r.end);
        return out;
      });
}

void register_grad_scaler(py::module_& m) {
  py::class_<GradScaler>(m, "GradScaler")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval,
                       bool dynamic) {
             return GradScaler({init_scale, growth_factor, backoff_factor, growth_interval, dynamic});
           }),
           py::arg("init_scale"), py::arg("growth_factor"), py::arg("backoff_factor"), py::arg("growth_interval"),
           py::arg("dynamic"))
      .def("scale", &GradScaler::scale)
      .def("growth_tracker", &GradScaler::growth_tracker)
      .def("unscale",
           [](const GradScaler& g, PyModule& pm, double factor) {
             py::gil_scoped_release release;
             return g.unscale(*pm.module, factor);
           })
      .def("update", &GradScaler::update)
      .def("state_dict", [](const GradScaler& g) { return py_from_json(g.state_dict()); })
      .def("load_state_dict",
           [](GradScaler& g, const py::object& state) { g.load_state_dict(json_from_py(state, "state_dict")); });
}

struct PyOptimizer {
  std::shared_ptr<PyModule> module;
  std::unique_ptr<Optimizer> optimizer;
};

struct PyScheduler {
  std::shared_ptr<PyOptimizer> optimizer;
  std::unique_ptr<LinearLRScheduler> scheduler;
};

void register_optimizer(py::module_& m) {
  py::class_<PyOptimizer, std::shared_ptr<PyOptimizer>>(m, "Optimizer")
      .def(py::init([](const py::object& path, const std::shared_ptr<PyModule>& module,
                       const std::optional<std::vector<std::tuple<std::string, int64_t, int64_t>>>& shard) {
             auto po = std::make_shared<PyOptimizer>();
             po->module = module;
             const std::string p = fspath(path);
             std::vector<ParameterRange> ranges;
             if (shard)
               for (const auto& [name, begin, end] : *shard) ranges.push_back({name, begin, end});
             py::gil_scoped_release release;
             po->optimizer = shard ? std::make_unique<Optimizer>(p, *module->module, ranges)
                                   : std::make_unique<Optimizer>(p, *module->module);
             return po;
           }),
           py::arg("path"), py::arg("module"), py::arg("shard") = py::none())
      .def("step",
           [](PyOptimizer& po) {
             py::gil_scoped_release release;
             po.optimizer->step();
           })
      .def("set_learning_rate", [](PyOptimizer& po, float lr) { po.optimizer->set_learning_rate(lr); })
      .def("get_learning_rate", [](const PyOptimizer& po) { return po.optimizer->get_learning_rate(); })
      .def("step_count", [](const PyOptimizer& po) { return po.optimizer->step_count(); });

  py::class_<PyScheduler, std::shared_ptr<PyScheduler>>(m, "LinearLRScheduler")
      .def(py::init([](const std::shared_ptr<PyOptimizer>& opt, int64_t warmup, int64_t total, float lr) {
        auto ps = std::make_shared<PyScheduler>();
        ps->optimizer = opt;
        ps->scheduler = std::make_unique<LinearLRScheduler>(*opt->optimizer, warmup, total, lr);
        return ps;
      }))
      .def("step", [](PyScheduler& ps) { ps.scheduler->step(); });
}

void register_artifacts(py::module_& m) {
  m.def(
      "generate_artifacts",
      [](const py::object& model, const py::object& directory, const py::dict& kw) {
        ArtifactOptions o;
        auto list = [&](const char* key) {
          return kw.contains(key) && !kw[key].is_none() ? kw[key].cast<std::vector<std::string>>()
                                                        : std::vector<std::string>{};
        };
        o.requires_grad = list("requires_grad");
        o.frozen_params = list("frozen_params");
        o.loss_input_names = list("loss_input_names");
        o.additional_output_names = list("additional_output_names");
        o.loss = loss_type_from_string(kw["loss"].cast<std::string>());
        if (!kw["optimizer"].is_none()) o.optimizer = optim_type_from_string(kw["optimizer"].cast<std::string>());
        o.prefix = kw["prefix"].cast<std::string>();
        o.nominal_checkpoint = kw["nominal_checkpoint"].cast<bool>();
        if (kw.contains("learning_rate")) o.learning_rate = kw["learning_rate"].cast<float>();
        if (kw.contains("recompute")) o.recompute.enabled = kw["recompute"].cast<bool>();
        o.recompute.boundaries = list("recompute_boundaries");
        if (kw.contains("mixed_precision"))
          o.mixed_precision = mixed_precision_from_string(kw["mixed_precision"].cast<std::string>());
        // The forward model: a path (its external data read from its folder), or serialized bytes
        // whose external data, if any, lives in kw["base_dir"].
        const bool is_path = !py::isinstance<py::bytes>(model);
        const std::string source = is_path ? fspath(model) : std::string(model.cast<py::bytes>());
        const std::string base_dir = kw.contains("base_dir") ? kw["base_dir"].cast<std::string>() : std::string();
        const std::string dir = fspath(directory);
        py::gil_scoped_release release;
        return generate_artifacts(is_path ? load_model(source) : load_model_from_bytes(source, base_dir), o, dir);
      },
      py::arg("model"), py::arg("directory"), py::arg("options"));
}

}  // namespace

void register_training(py::module_& m) {
  register_state(m);
  register_module(m);
  register_grad_scaler(m);
  register_data_parallel(m);
  register_optimizer(m);
  register_artifacts(m);
}

}  // namespace kiln::python
