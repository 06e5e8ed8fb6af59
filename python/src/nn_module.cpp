// kiln._kiln.nn: kiln::nn's Module, containers and Tracer for Python. Python subclasses of
// kiln.nn.Module are PythonModule objects whose forward calls back into Python with the active
// tracer set, so that the Python Var operators and kiln.nn.functional emit into it. Everything
// torch-shaped (attribute registration, hooks' signatures, state_dict as an OrderedDict, error
// texts) is python/kiln/nn/module.py's job; this layer converts and keeps the GIL rules.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <vector>

#include "kiln/error.h"
#include "kiln/nn/module.h"
#include "kiln/onnx_io.h"
#include "nn_bindings.h"
#include "numpy_tensor.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

using nn::Module;
using nn::ModulePtr;
using nn::Tracer;
using nn::Var;

// Tracers of the Python forwards running on this thread, innermost last. A Python forward runs
// only inside Module::call, which hands it the tracer; Var operators find it here.
thread_local std::vector<Tracer*> g_tracers;

class TracerScope {
 public:
  explicit TracerScope(Tracer& t) { g_tracers.push_back(&t); }
  ~TracerScope() { g_tracers.pop_back(); }
  TracerScope(const TracerScope&) = delete;
  TracerScope& operator=(const TracerScope&) = delete;
};

// A module whose forward is its Python object's. It holds a weak reference to that object (which
// owns it), so that no reference cycle runs through C++ where Python's collector cannot see it.
class PythonModule : public Module {
 public:
  PythonModule(std::string type_name, py::object owner_ref)
      : type_name_(std::move(type_name)), owner_(hold(std::move(owner_ref))) {}

  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    py::gil_scoped_acquire gil;
    const py::object self = owner();
    TracerScope scope(t);
    return self.attr("_kiln_forward")(inputs).cast<std::vector<Var>>();
  }
  std::string type_name() const override { return type_name_; }
  std::string extra_repr() const override {
    py::gil_scoped_acquire gil;
    const py::object self = (*owner_)();
    if (self.is_none()) return "";
    return py::str(self.attr("extra_repr")());
  }
  py::object owner() const {
    py::object self = (*owner_)();
    if (self.is_none())
      throw InvalidArgument(
          fmt::format("{}: its Python module object was deleted while a container still holds it", type_name_));
    return self;
  }

 private:
  std::string type_name_;
  PyRef owner_;  // a weakref.ref to the Python module
};

Attribute attribute_from_py(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v)) return Attribute::of_int(v.cast<int64_t>());
  if (py::isinstance<py::float_>(v)) return Attribute::of_float(v.cast<float>());
  if (py::isinstance<py::str>(v)) return Attribute::of_string(v.cast<std::string>());
  if (py::isinstance<py::array>(v)) return Attribute::of_tensor(tensor_from_py(v, "attribute '" + key + "'"));
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(v);
    bool all_int = true, all_str = seq.size() > 0;
    for (const auto& e : seq) {
      all_int = all_int && (py::isinstance<py::int_>(e) || py::isinstance<py::bool_>(e));
      all_str = all_str && py::isinstance<py::str>(e);
    }
    if (all_int) return Attribute::of_ints(seq.cast<std::vector<int64_t>>());
    if (all_str) return Attribute::of_strings(seq.cast<std::vector<std::string>>());
    return Attribute::of_floats(seq.cast<std::vector<float>>());
  }
  throw TypeError(fmt::format("ONNX attribute '{}': {} is not an int, float, str, array or list of them", key,
                              std::string(py::repr(v))));
}

std::vector<Var> vars_from_py(const py::sequence& seq) {
  std::vector<Var> out;
  for (const auto& v : seq) out.push_back(v.is_none() ? Tracer::none() : v.cast<Var>());
  return out;
}

py::list tensors_to_py(const std::vector<Tensor>& ts) {
  py::list out;
  for (const auto& t : ts) out.append(t.defined() ? py::object(to_array(t)) : py::object(py::none()));
  return out;
}

py::list named_tensors_to_py(const std::vector<std::pair<std::string, Tensor*>>& named) {
  py::list out;
  for (const auto& [name, t] : named) out.append(py::make_tuple(name, to_array(*t)));
  return out;
}

// Export arguments as Python gives them: [(name, shape)], {name: {axis: dim_name}}, dtype names.
struct ExportArgs {
  nn::InputShapes inputs;
  nn::DynamicAxes axes;
  nn::ExportOptions options;
};

ExportArgs export_args(const nn::InputShapes& inputs, const nn::DynamicAxes& axes,
                       const std::vector<std::string>& input_dtypes, const std::vector<std::string>& output_names,
                       int64_t opset) {
  ExportArgs a{inputs, axes, {}};
  for (const auto& d : input_dtypes) a.options.input_dtypes.push_back(dtype_from_name(d));
  a.options.output_names = output_names;
  a.options.opset = opset;
  return a;
}

nn::RemovableHandle add_pre_hook(Module& m, const py::object& fn) {
  PyRef held = hold(fn);
  return m.register_forward_pre_hook([held](Module&, const std::vector<Tensor>& inputs) {
    py::gil_scoped_acquire gil;
    (*held)(tensors_to_py(inputs));
  });
}

nn::RemovableHandle add_hook(Module& m, const py::object& fn) {
  PyRef held = hold(fn);
  return m.register_forward_hook(
      [held](Module&, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
        py::gil_scoped_acquire gil;
        (*held)(tensors_to_py(inputs), tensors_to_py(outputs));
      });
}

void register_tracer(py::module_& nn) {
  py::class_<Var>(nn, "_Var")
      .def_readonly("name", &Var::name)
      .def_property_readonly("dtype", [](const Var& v) { return std::string(dtype_name(v.dtype)); })
      .def_readonly("shape", &Var::shape)
      .def("__repr__", [](const Var& v) {
        return fmt::format("_Var('{}', {}, [{}])", v.name, dtype_name(v.dtype), fmt::join(v.shape, ", "));
      });
  nn.def("_tracing", [] { return !g_tracers.empty(); });
  nn.def("_none", &Tracer::none);  // an omitted optional value (torch's None)
  nn.def(
      "_op",
      [](const std::string& op_type, const py::sequence& inputs, const py::dict& attrs,
         const std::vector<std::pair<std::string, std::vector<int64_t>>>& outputs) {
        Tracer& t = active_tracer(op_type);
        std::map<std::string, Attribute> a;
        for (const auto& [k, v] : attrs) {
          const std::string key = py::str(k);
          a[key] = attribute_from_py(key, v);
        }
        std::vector<std::pair<DType, std::vector<int64_t>>> outs;
        for (const auto& [dtype, shape] : outputs) outs.emplace_back(dtype_from_name(dtype), shape);
        return t.op_multi(op_type, vars_from_py(inputs), std::move(a), std::move(outs));
      },
      py::arg("op_type"), py::arg("inputs"), py::arg("attrs"), py::arg("outputs"));
  nn.def(
      "_constant",
      [](const py::object& value, const std::string& hint) {
        Tracer& t = active_tracer("a constant");
        return t.constant(tensor_from_py(value, "constant '" + hint + "'"), hint);
      },
      py::arg("value"), py::arg("hint") = "const");
  nn.def("_parameter", [](const Module& m, const std::string& name) { return active_tracer(name).parameter(m, name); });
  nn.def("_update_buffer",
         [](const Module& m, const std::string& name, const Var& v) { active_tracer(name).update_buffer(m, name, v); });
  nn.def("_call", [](Module& m, const py::sequence& inputs) {
    return m.call(active_tracer(m.type_name()), vars_from_py(inputs));
  });
}

using ModuleClass = py::class_<Module, ModulePtr>;

// A module's own parameters, buffers and children, and its repr.
void def_module_structure(ModuleClass& cls) {
  cls.def_property_readonly("type_name", &Module::type_name)
      .def("extra_repr", &Module::extra_repr)
      .def("repr", &Module::repr)
      .def(
          "register_parameter",
          [](Module& m, const std::string& name, const py::object& value, bool requires_grad) {
            m.register_parameter(name, tensor_from_py(value, "parameter '" + name + "'"), requires_grad);
          },
          py::arg("name"), py::arg("value"), py::arg("requires_grad") = true)
      .def(
          "register_buffer",
          [](Module& m, const std::string& name, const py::object& value, bool persistent) {
            m.register_buffer(name, tensor_from_py(value, "buffer '" + name + "'"), persistent);
          },
          py::arg("name"), py::arg("value"), py::arg("persistent") = true)
      .def("add_module", &Module::add_module)
      // The parameter or buffer `name` of this module itself, as ("parameter" | "buffer", array
      // sharing its memory), or None.
      .def("local_tensor",
           [](Module& m, const std::string& name) -> py::object {
             for (const auto& [n, t] : m.named_parameters(false))
               if (n == name) return py::make_tuple("parameter", to_array(*t));
             for (const auto& [n, t] : m.named_buffers(false))
               if (n == name) return py::make_tuple("buffer", to_array(*t));
             return py::none();
           })
      .def(
          "named_parameters", [](Module& m, bool recurse) { return named_tensors_to_py(m.named_parameters(recurse)); },
          py::arg("recurse") = true)
      .def(
          "named_buffers", [](Module& m, bool recurse) { return named_tensors_to_py(m.named_buffers(recurse)); },
          py::arg("recurse") = true)
      .def("named_children", &Module::named_children);
}

// requires_grad and train / eval, and the parameter count.
void def_module_modes(ModuleClass& cls) {
  cls.def("requires_grad", &Module::requires_grad)
      .def("requires_grad_", [](Module& m, bool v) { m.requires_grad_(v); })
      .def("frozen_parameters", &Module::frozen_parameters)
      .def("train", [](Module& m, bool mode) { m.train(mode); })
      .def_property_readonly("training", &Module::training)
      .def("num_parameters", &Module::num_parameters, py::arg("only_trainable") = false);
}

// state_dict in and out, in memory and as safetensors files.
void def_module_state_dict(ModuleClass& cls) {
  cls.def("state_dict",
          [](Module& m) {
            py::list out;
            for (const auto& [k, t] : m.state_dict()) out.append(py::make_tuple(k, to_array(t)));
            return out;
          })
      .def(
          "load_state_dict",
          [](Module& m, const py::dict& state, bool strict) {
            std::map<std::string, Tensor> tensors;
            for (const auto& [k, v] : state) {
              const std::string key = py::str(k);
              tensors[key] = tensor_from_py(v, "state_dict['" + key + "']");
            }
            nn::IncompatibleKeys r = m.load_state_dict(tensors, strict);
            return py::make_tuple(r.missing_keys, r.unexpected_keys);
          },
          py::arg("state_dict"), py::arg("strict") = true)
      .def("save_safetensors", [](Module& m, const std::string& path) { m.save_safetensors(path); })
      .def("load_safetensors", [](Module& m, const std::string& path, bool strict) {
        nn::IncompatibleKeys r = m.load_safetensors(path, strict);
        return py::make_tuple(r.missing_keys, r.unexpected_keys);
      });
}

// Forward hooks, ONNX export, and calling the module on arrays.
void def_module_hooks_export_and_run(ModuleClass& cls) {
  cls.def("register_forward_pre_hook", &add_pre_hook)
      .def("register_forward_hook", &add_hook)
      .def("to_onnx_bytes",
           [](Module& m, const nn::InputShapes& inputs, const nn::DynamicAxes& axes,
              const std::vector<std::string>& dtypes, const std::vector<std::string>& outputs, int64_t opset) {
             const ExportArgs a = export_args(inputs, axes, dtypes, outputs, opset);
             return py::bytes(serialize_model(m.to_onnx(a.inputs, a.axes, a.options)));
           })
      .def("export_onnx",
           [](Module& m, const std::string& path, const nn::InputShapes& inputs, const nn::DynamicAxes& axes,
              const std::vector<std::string>& dtypes, const std::vector<std::string>& outputs, int64_t opset) {
             const ExportArgs a = export_args(inputs, axes, dtypes, outputs, opset);
             m.export_onnx(path, a.inputs, a.axes, a.options);
           })
      // operator(): the inputs are copied (the caller's arrays may change while hooks run).
      .def("run", [](Module& m, const py::sequence& inputs) {
        std::vector<Tensor> in;
        for (size_t i = 0; i < inputs.size(); ++i) in.push_back(tensor_from_py(inputs[i], fmt::format("input {}", i)));
        std::vector<Tensor> out;
        {
          py::gil_scoped_release release;  // Python forwards and hooks take it back
          out = m(in);
        }
        return tensors_to_py(out);
      });
}

// The Python-defined module and the containers, all subclasses of _Module.
void register_module_subclasses(py::module_& nn) {
  py::class_<PythonModule, Module, std::shared_ptr<PythonModule>>(nn, "_PythonModule")
      .def(py::init<std::string, py::object>(), py::arg("type_name"), py::arg("owner_ref"))
      .def("owner", &PythonModule::owner);

  py::class_<nn::Sequential, Module, std::shared_ptr<nn::Sequential>>(nn, "_Sequential")
      .def(py::init<>())
      .def("push_back",
           [](nn::Sequential& s, const std::string& name, ModulePtr m) { s.push_back(name, std::move(m)); })
      .def("__len__", &nn::Sequential::size);
  py::class_<nn::ModuleList, Module, std::shared_ptr<nn::ModuleList>>(nn, "_ModuleList")
      .def(py::init<>())
      .def("append", &nn::ModuleList::append)
      .def("__len__", &nn::ModuleList::size);
  py::class_<nn::ModuleDict, Module, std::shared_ptr<nn::ModuleDict>>(nn, "_ModuleDict")
      .def(py::init<>())
      .def("insert", &nn::ModuleDict::insert)
      .def("keys", &nn::ModuleDict::keys);
}

void register_module_class(py::module_& nn) {
  py::class_<nn::RemovableHandle>(nn, "_RemovableHandle").def("remove", [](nn::RemovableHandle& h) {
    if (h.remove) h.remove();
    h.remove = nullptr;
  });

  ModuleClass cls(nn, "_Module");
  def_module_structure(cls);
  def_module_modes(cls);
  def_module_state_dict(cls);
  def_module_hooks_export_and_run(cls);
  register_module_subclasses(nn);

  nn.def("manual_seed", &nn::manual_seed, py::arg("seed"));
  nn.def("load_weights_file", [](const std::string& path) {
    py::dict out;
    for (const auto& [k, t] : nn::load_weights_file(path)) out[py::str(k)] = to_array(t);
    return out;
  });
}

}  // namespace

nn::Tracer& active_tracer(const std::string& what) {
  if (g_tracers.empty())
    throw InvalidArgument(
        fmt::format("{}: symbolic values (kiln.nn.Var) exist only while a module's forward is traced "
                    "(by export() or by calling the module on arrays)",
                    what));
  return *g_tracers.back();
}

DType dtype_from_name(const std::string& name) {
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8, DType::Int16,
                  DType::Int32, DType::Int64, DType::Uint8, DType::Uint16, DType::Uint32, DType::Uint64, DType::Bool})
    if (name == dtype_name(d)) return d;
  throw TypeError(
      fmt::format("'{}' is not a Kiln dtype name (float, double, float16, bfloat16, int8..int64, "
                  "uint8..uint64, bool)",
                  name));
}

void register_nn(py::module_& m) {
  py::module_ nn = m.def_submodule("nn", "kiln::nn (use kiln.nn)");
  register_tracer(nn);
  register_module_class(nn);
  register_nn_layers(nn);
  register_nn_zoo(nn);
}

}  // namespace kiln::python
