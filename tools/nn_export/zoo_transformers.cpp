// `kiln-nn-export zoo-transformers SPEC`: the Kiln side of tests/python/test_zoo_transformers.py.
// Creates zoo models (or the ViT backbone) from a JSON spec, loads torch's state_dict by name,
// exports ONNX (which the Python test runs with `kiln run` and compares against torch) and writes a
// report of what it built.
//
// Spec: {"cases": [{"model": "bert" | "gpt2" | "vit", "config": {overrides}, "seed": 0,
//   "weights": "w.safetensors" (optional), "strict": true, "train": false, "onnx": "out.onnx",
//   "backbone": {"out_indices": [...]} or {"out_features": [...]} (optional: AutoBackbone instead),
//   "report": "report.json"}]}
// Report: {"state_dict": [[key, shape], ...] (in order), "missing_keys", "unexpected_keys", "inputs": [names],
//   "outputs": [names], "repr"; backbones add "stage_names", "out_features", "out_indices", "channels"}.
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/nn/backbone.h"
#include "kiln/nn/zoo.h"
#include "kiln/onnx_io.h"
#include "spec_exports.h"

namespace kiln::nn_export {
namespace {

using namespace kiln::nn;
using nlohmann::json;

std::shared_ptr<Backbone> make_backbone(const json& c) {
  BackboneOptions o;
  const json& b = c.at("backbone");
  if (b.contains("out_indices")) o.out_indices = b.at("out_indices").get<std::vector<int64_t>>();
  if (b.contains("out_features")) o.out_features = b.at("out_features").get<std::vector<std::string>>();
  return AutoBackbone::from_config(c.at("model"), c.value("config", json::object()), o);
}

}  // namespace

void export_zoo_transformer(const json& c) {
  const std::string model = c.at("model");
  const json config = c.value("config", json::object());
  manual_seed(c.value("seed", uint64_t{0}));
  std::shared_ptr<Backbone> backbone = c.contains("backbone") ? make_backbone(c) : nullptr;
  ModulePtr m = backbone ? ModulePtr(backbone) : zoo::create_model(model, config);

  json report{{"missing_keys", json::array()}, {"unexpected_keys", json::array()}};
  if (c.contains("weights")) {
    const IncompatibleKeys r = m->load_state_dict(load_weights_file(c.at("weights")), c.value("strict", true));
    report["missing_keys"] = r.missing_keys;
    report["unexpected_keys"] = r.unexpected_keys;
  }
  m->train(c.value("train", false));

  const InputShapes inputs = zoo::example_inputs(model, config);
  ExportOptions options = zoo::export_options(model, config);
  DynamicAxes axes = zoo::dynamic_axes(model, config);
  if (backbone) {
    options.output_names = backbone->out_features();
    axes.erase("logits");
    for (const auto& name : backbone->out_features()) axes[name] = {{0, "batch"}};
    report["stage_names"] = backbone->stage_names();
    report["out_features"] = backbone->out_features();
    report["out_indices"] = backbone->out_indices();
    report["channels"] = backbone->channels();
  }
  const Model onnx = m->to_onnx(inputs, axes, options);
  save_model(onnx, c.at("onnx"));

  report["state_dict"] = json::array();  // [key, shape] pairs in state_dict order
  for (const auto& [key, t] : m->state_dict()) report["state_dict"].push_back({key, t.shape()});
  for (const auto& v : onnx.graph.inputs) report["inputs"].push_back(v.name);
  for (const auto& v : onnx.graph.outputs) report["outputs"].push_back(v.name);
  report["repr"] = m->repr();
  std::ofstream(c.at("report").get<std::string>()) << report.dump();
}

}  // namespace kiln::nn_export
