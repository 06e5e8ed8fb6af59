// kiln::nn::zoo and the backbones for Python (kiln.nn.zoo, kiln.AutoBackbone). Configs travel as
// JSON (HF's field names), converted by py_json.cpp.
#include <pybind11/stl.h>

#include <map>
#include <optional>

#include "kiln/nn/backbone.h"
#include "kiln/nn/zoo.h"
#include "kiln/onnx_io.h"
#include "nn_bindings.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

nn::zoo::Config config_from_py(const py::dict& config) { return json_from_py(config, "config"); }

}  // namespace

void register_nn_zoo(py::module_& nn) {
  nn.def("zoo_model_names", &nn::zoo::model_names);
  nn.def("zoo_config", [](const std::string& name, const py::dict& overrides) {
    return py_from_json(nn::zoo::config_for(name, config_from_py(overrides)));
  });
  nn.def("zoo_create", [](const std::string& name, const py::dict& overrides) {
    return nn::zoo::create_model(name, config_from_py(overrides));
  });
  nn.def("zoo_example_inputs", [](const std::string& name, const py::dict& overrides) {
    return nn::zoo::example_inputs(name, config_from_py(overrides));
  });
  nn.def("zoo_dynamic_axes", [](const std::string& name, const py::dict& overrides) {
    return nn::zoo::dynamic_axes(name, config_from_py(overrides));
  });
  // The zoo model of this config holding `weights`' state_dict, exported in eval mode with the
  // entry's inputs, dtypes, dynamic axes and output names (generation's decoder-with-past and
  // encoder-decoder parts of a model being trained).
  nn.def("zoo_export_bytes", [](const std::string& name, const py::dict& overrides, nn::Module& weights) {
    const nn::zoo::Config config = config_from_py(overrides);
    nn::ModulePtr m = nn::zoo::create_model(name, config);
    std::map<std::string, Tensor> state;
    for (const auto& [key, value] : weights.state_dict()) state.emplace(key, value);
    m->load_state_dict(state, true);
    m->eval();
    return py::bytes(
        serialize_model(m->to_onnx(nn::zoo::example_inputs(name, config), nn::zoo::dynamic_axes(name, config),
                                   nn::zoo::export_options(name, config))));
  });

  py::class_<nn::Backbone, nn::Module, std::shared_ptr<nn::Backbone>>(nn, "_Backbone")
      .def_property_readonly("stage_names", &nn::Backbone::stage_names)
      .def_property_readonly("out_features", &nn::Backbone::out_features)
      .def_property_readonly("out_indices", &nn::Backbone::out_indices)
      .def_property_readonly("out_feature_channels", &nn::Backbone::out_feature_channels)
      .def_property_readonly("channels", &nn::Backbone::channels)
      .def("set_out_features", &nn::Backbone::set_out_features)
      .def("set_out_indices", &nn::Backbone::set_out_indices);
  nn.def("backbone_names", &nn::AutoBackbone::names);
  nn.def(
      "backbone_from_config",
      [](const std::string& name, const py::dict& config, std::optional<std::vector<std::string>> out_features,
         std::optional<std::vector<int64_t>> out_indices) {
        return nn::AutoBackbone::from_config(name, config_from_py(config),
                                             {std::move(out_features), std::move(out_indices)});
      },
      py::arg("name"), py::arg("config"), py::arg("out_features") = py::none(), py::arg("out_indices") = py::none());
}

}  // namespace kiln::python
