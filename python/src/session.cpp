// kiln._kiln.Session: runs a model from Python (the ONNX backend, inference users, ORTModule), and
// build_gradient_graph, which ORTModule differentiates exported torch modules with.
#include "kiln/session.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <list>
#include <memory>

#include "bindings.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "numpy_tensor.h"

namespace kiln::python {

Model load_any(const py::object& model, bool check) {
  LoadOptions options;
  options.run_checker = check;
  if (py::isinstance<py::bytes>(model)) {
    const std::string bytes = model.cast<std::string>();
    py::gil_scoped_release release;
    return load_model_from_bytes(bytes, "", options);
  }
  const std::string path = py::str(py::module_::import("os").attr("fspath")(model));
  py::gil_scoped_release release;
  return load_model(path, options);
}

namespace {

std::vector<std::string> names(const std::vector<ValueInfo>& vs) {
  std::vector<std::string> n;
  for (const auto& v : vs) n.push_back(v.name);
  return n;
}

const ValueInfo* declared_input(const Session& s, const std::string& name) {
  for (const ValueInfo& v : s.inputs())
    if (v.name == name) return &v;
  return nullptr;
}

// A feed: None is an empty optional (of the input's declared type), a list or tuple of arrays fed to
// a sequence input is a sequence, anything else an array (numpy reads lists for tensor inputs).
// `keep` holds what the tensors borrow.
Tensor feed_value(const py::handle& v, const std::string& name, const ValueInfo* declared,
                  std::list<py::object>& keep) {
  const std::string what = "input '" + name + "'";
  const DType dtype = declared && declared->has_type ? declared->dtype : DType::Float32;
  if (v.is_none()) {
    const bool sequence = declared && declared->kind == ValueKind::OptionalSequence;
    return Tensor::none(dtype, sequence ? ValueKind::OptionalSequence : ValueKind::OptionalTensor);
  }
  const bool sequence_input =
      declared && (declared->kind == ValueKind::Sequence || declared->kind == ValueKind::OptionalSequence);
  if (sequence_input && (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v))) {
    std::vector<Tensor> elements;
    size_t k = 0;
    for (const py::handle item : v)
      elements.push_back(borrow_array(item, fmt::format("{}[{}]", what, k++), keep.emplace_back()));
    return Tensor::sequence(elements.empty() ? dtype : elements[0].dtype(), std::move(elements));
  }
  return borrow_array(v, what, keep.emplace_back());
}

// An output: a tensor as a numpy array, a sequence as a list of them, an empty optional as None.
py::object output_value(const Tensor& t) {
  if (t.is_none()) return py::none();
  if (!t.is_sequence()) return to_array(t);
  py::list items;
  for (const Tensor& e : t.elements()) items.append(to_array(e));
  return items;
}

}  // namespace

void register_session(py::module_& m) {
  py::class_<Session, std::shared_ptr<Session>>(m, "Session")
      .def(py::init([](const py::object& model, int num_threads, bool check, const std::string& plan_cache_dir) {
             SessionOptions o;
             o.num_threads = num_threads;
             o.plan_cache_dir = plan_cache_dir;
             return std::make_shared<Session>(load_any(model, check), o);
           }),
           // check=False skips ONNX's checker (graphs Kiln made, whose outputs may lack a type);
           // plan_cache_dir: SessionOptions::plan_cache_dir
           py::arg("model"), py::arg("num_threads") = 0, py::arg("check") = true, py::arg("plan_cache_dir") = "")
      .def(
          "plan",
          [](Session& s, const std::map<std::string, std::vector<int64_t>>& shapes,
             const std::set<std::string>& bound) {
            // Plans for inputs of these shapes (the model's declared dtypes) without running.
            std::map<std::string, TensorMeta> metas;
            for (const auto& [name, shape] : shapes) {
              const ValueInfo* v = declared_input(s, name);
              metas[name] = TensorMeta{v && v->has_type ? v->dtype : DType::Float32, shape, false, Tensor()};
            }
            PlanStats st;
            {
              py::gil_scoped_release release;
              st = s.plan_shapes(metas, bound);
            }
            py::dict d;
            d["peak_bytes"] = st.peak_bytes;
            d["num_steps"] = st.num_steps;
            d["num_folded"] = st.num_folded;
            d["graph_from_cache"] = st.graph_from_cache;
            d["memory_plan_from_cache"] = st.memory_plan_from_cache;
            return d;
          },
          py::arg("shapes"), py::arg("bound") = std::set<std::string>())
      .def_property_readonly("input_names", [](const Session& s) { return names(s.inputs()); })
      .def_property_readonly("output_names", [](const Session& s) { return names(s.outputs()); })
      .def(
          "run",
          [](Session& s, const py::dict& feeds, const std::optional<std::vector<std::string>>& outputs) {
            std::map<std::string, Tensor> in;
            std::list<py::object> keep;
            for (const auto& [k, v] : feeds) {
              const std::string name = py::str(k);
              in[name] = feed_value(v, name, declared_input(s, name), keep);
            }
            const std::vector<std::string> wanted = outputs ? *outputs : names(s.outputs());
            std::map<std::string, Tensor> out;
            {
              py::gil_scoped_release release;
              out = s.run(in, wanted);
            }
            py::dict result;  // in the order asked for (graph output order by default)
            for (const auto& name : wanted) result[py::str(name)] = output_value(out.at(name));
            return result;
          },
          py::arg("feeds"), py::arg("output_names") = py::none())
      // Session::run_with_binding from Python: inputs and outputs by position (input_names and
      // output_names order). An output given as a C-contiguous, writeable array of the output's
      // dtype and shape is written in place; None gets a new array. Returns the output arrays.
      .def(
          "run_bound",
          [](Session& s, const py::sequence& inputs, const py::sequence& outputs) {
            const std::vector<std::string> in_names = names(s.inputs()), out_names = names(s.outputs());
            if (inputs.size() != in_names.size() || outputs.size() != out_names.size())
              throw InvalidArgument(fmt::format("run_bound: {} inputs and {} outputs given; the model has {} and {}",
                                                inputs.size(), outputs.size(), in_names.size(), out_names.size()));
            std::vector<Tensor> in(inputs.size()), out(outputs.size());
            std::vector<py::object> keep(inputs.size() + outputs.size());
            for (size_t i = 0; i < in.size(); ++i)
              in[i] = borrow_array(inputs[i], "input '" + in_names[i] + "'", keep[i]);
            for (size_t i = 0; i < out.size(); ++i) {
              if (outputs[i].is_none()) continue;
              const std::string what = "output '" + out_names[i] + "'";
              if (!py::isinstance<py::array>(outputs[i])) throw TypeError(what + ": expected a numpy array or None");
              const auto a = py::reinterpret_borrow<py::array>(outputs[i]);
              if (!(a.flags() & py::array::c_style) || !a.writeable())
                throw InvalidArgument(what + ": the array must be C-contiguous and writeable");
              out[i] = borrow_array(a, what, keep[in.size() + i]);
            }
            {
              py::gil_scoped_release release;
              s.run_with_binding(in, out);
            }
            py::list result;
            for (size_t i = 0; i < out.size(); ++i)
              result.append(outputs[i].is_none() ? py::object(to_array(out[i])) : py::object(outputs[i]));
            return result;
          },
          py::arg("inputs"), py::arg("outputs"));
  // The forward + backward graph of a model (kiln/autodiff.h) as ONNX bytes, and parameter ->
  // gradient output names: what kiln.training.ortmodule differentiates exported modules with.
  m.def(
      "build_gradient_graph",
      [](const py::bytes& model, const std::string& loss, const std::vector<std::string>& requires_grad) {
        const std::string bytes = model;
        GradientGraph g;
        std::string out;
        {
          py::gil_scoped_release release;
          GradientOptions o;
          o.loss = loss;
          o.requires_grad = requires_grad;
          g = build_gradient_graph(load_model_from_bytes(bytes), o);
          out = serialize_model(g.model);
        }
        py::dict grads;
        for (const auto& [param, grad] : g.grads) grads[py::str(param)] = py::str(grad);
        return py::make_tuple(py::bytes(out), grads);
      },
      py::arg("model"), py::arg("loss"), py::arg("requires_grad"));
}

}  // namespace kiln::python
