// `kiln-nn-export --spec JSON --input-shape 2,3,8,8 --out model.onnx ...`: builds a kiln::nn layer
// (or a Sequential of layers) from a JSON spec with torch's class and argument names, optionally
// loads a torch state_dict (.npz or safetensors), exports ONNX, and can run the module in Kiln
// (Module::operator(), which also updates BatchNorm's running statistics). The torch.nn parity
// tests (tests/python/test_nn_layers.py) drive it.
//
// A spec: {"type": "Conv2d", "args": {"in_channels": 3, "out_channels": 8, "kernel_size": 3,
//          "padding": "same"}}, or {"type": "Sequential", "modules": [spec, ...]}.
// Instead of a spec, `--zoo NAME [--config JSON]` builds a model zoo entry (exported with input
// "pixel_values" or the entry's input name, output "logits" and the entry's dynamic axes), and
// `--backbone NAME [--config JSON] [--out-indices 0,1,..]` an AutoBackbone (outputs named by its
// out_features); the zoo parity tests (tests/python/test_zoo_vision.py) drive these.
// Prints one JSON line: {"repr": ..., "state_dict": {key: shape}, "keys": [key, ... in order]}.
//
// Subcommands for the other parity tests (spec_exports.h):
//   kiln-nn-export core-files DIR                 the nn core's files (tests/python/test_nn_core.py)
//   kiln-nn-export transformer-layers SPEC_FILE   attention and transformer layers (test_nn_transformer.py)
//   kiln-nn-export zoo-transformers SPEC_FILE     bert, gpt2, vit (test_zoo_transformers.py)
// Errors: one line `kiln-nn-export: error: ...`, exit 1.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/nn/backbone.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/zoo.h"
#include "kiln/npy.h"
#include "kiln/safetensors.h"
#include "spec_exports.h"

namespace {

using json = nlohmann::json;
using namespace kiln::nn;

// Reads the torch keyword arguments of one spec, with defaults, naming the spec in errors.
class Args {
 public:
  Args(std::string type, json args) : type_(std::move(type)), args_(std::move(args)) {
    if (!args_.is_object()) throw kiln::InvalidArgument(fmt::format("{}: \"args\" must be an object", type_));
  }
  template <class T>
  T get(const std::string& key, T fallback) const {
    auto it = args_.find(key);
    return it == args_.end() || it->is_null() ? fallback : it->get<T>();
  }
  template <class T>
  T need(const std::string& key) const {
    if (!args_.contains(key)) throw kiln::InvalidArgument(fmt::format("{}: argument \"{}\" is required", type_, key));
    return args_.at(key).get<T>();
  }
  bool has(const std::string& key) const { return args_.contains(key) && !args_.at(key).is_null(); }
  // torch's `int or tuple`
  template <size_t D>
  ExpandingArray<D> array(const std::string& key) const {
    const json& v = args_.at(key);
    return v.is_array() ? ExpandingArray<D>(v.get<std::vector<int64_t>>()) : ExpandingArray<D>(v.get<int64_t>());
  }
  std::vector<int64_t> ints(const std::string& key) const {
    const json& v = args_.at(key);
    return v.is_array() ? v.get<std::vector<int64_t>>() : std::vector<int64_t>{v.get<int64_t>()};
  }

 private:
  std::string type_;
  json args_;
};

template <size_t D>
ConvOptions<D> conv_options(const Args& a) {
  ConvOptions<D> o(a.need<int64_t>("in_channels"), a.need<int64_t>("out_channels"), a.array<D>("kernel_size"));
  if (a.has("stride")) o.stride(a.array<D>("stride"));
  if (a.has("padding")) {
    const std::string mode = a.get<json>("padding", json()).is_string() ? a.need<std::string>("padding") : "";
    if (mode == "same") o.padding(kSame);
    else if (mode == "valid") o.padding(kValid);
    else if (!mode.empty())
      throw kiln::InvalidArgument(
          fmt::format("Invalid padding string '{}', should be one of {{'valid', 'same'}}", mode));
    else o.padding(a.array<D>("padding"));
  }
  if (a.has("dilation")) o.dilation(a.array<D>("dilation"));
  return o.groups(a.get<int64_t>("groups", 1))
      .bias(a.get<bool>("bias", true))
      .padding_mode(a.get<std::string>("padding_mode", "zeros"));
}

using Factory = std::function<ModulePtr(const Args&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> f = {
      {"Linear",
       [](const Args& a) -> ModulePtr {
         return std::make_shared<Linear>(a.need<int64_t>("in_features"), a.need<int64_t>("out_features"),
                                         a.get<bool>("bias", true));
       }},
      {"Embedding",
       [](const Args& a) -> ModulePtr {
         std::optional<int64_t> pad;
         if (a.has("padding_idx")) pad = a.need<int64_t>("padding_idx");
         return std::make_shared<Embedding>(a.need<int64_t>("num_embeddings"), a.need<int64_t>("embedding_dim"), pad);
       }},
      {"Conv1d", [](const Args& a) -> ModulePtr { return std::make_shared<Conv1d>(conv_options<1>(a)); }},
      {"Conv2d", [](const Args& a) -> ModulePtr { return std::make_shared<Conv2d>(conv_options<2>(a)); }},
      {"ConvTranspose2d",
       [](const Args& a) -> ModulePtr {
         ConvTranspose2dOptions o(a.need<int64_t>("in_channels"), a.need<int64_t>("out_channels"),
                                  a.array<2>("kernel_size"));
         if (a.has("stride")) o.stride(a.array<2>("stride"));
         if (a.has("padding")) o.padding(a.array<2>("padding"));
         if (a.has("output_padding")) o.output_padding(a.array<2>("output_padding"));
         if (a.has("dilation")) o.dilation(a.array<2>("dilation"));
         o.groups(a.get<int64_t>("groups", 1))
             .bias(a.get<bool>("bias", true))
             .padding_mode(a.get<std::string>("padding_mode", "zeros"));
         return std::make_shared<ConvTranspose2d>(o);
       }},
      {"BatchNorm1d",
       [](const Args& a) -> ModulePtr {
         return std::make_shared<BatchNorm1d>(a.need<int64_t>("num_features"), a.get<double>("eps", 1e-5),
                                              a.get<double>("momentum", 0.1), a.get<bool>("affine", true),
                                              a.get<bool>("track_running_stats", true));
       }},
      {"BatchNorm2d",
       [](const Args& a) -> ModulePtr {
         return std::make_shared<BatchNorm2d>(a.need<int64_t>("num_features"), a.get<double>("eps", 1e-5),
                                              a.get<double>("momentum", 0.1), a.get<bool>("affine", true),
                                              a.get<bool>("track_running_stats", true));
       }},
      {"LayerNorm",
       [](const Args& a) -> ModulePtr {
         return std::make_shared<LayerNorm>(a.ints("normalized_shape"), a.get<double>("eps", 1e-5),
                                            a.get<bool>("elementwise_affine", true), a.get<bool>("bias", true));
       }},
      {"GroupNorm",
       [](const Args& a) -> ModulePtr {
         return std::make_shared<GroupNorm>(a.need<int64_t>("num_groups"), a.need<int64_t>("num_channels"),
                                            a.get<double>("eps", 1e-5), a.get<bool>("affine", true));
       }},
      {"Dropout", [](const Args& a) -> ModulePtr { return std::make_shared<Dropout>(a.get<double>("p", 0.5)); }},
      {"ReLU", [](const Args&) -> ModulePtr { return std::make_shared<ReLU>(); }},
      {"GELU",
       [](const Args& a) -> ModulePtr { return std::make_shared<GELU>(a.get<std::string>("approximate", "none")); }},
      {"SiLU", [](const Args&) -> ModulePtr { return std::make_shared<SiLU>(); }},
      {"Tanh", [](const Args&) -> ModulePtr { return std::make_shared<Tanh>(); }},
      {"Sigmoid", [](const Args&) -> ModulePtr { return std::make_shared<Sigmoid>(); }},
      {"MaxPool2d",
       [](const Args& a) -> ModulePtr {
         MaxPool2dOptions o(a.array<2>("kernel_size"));
         if (a.has("stride")) o.stride(a.array<2>("stride"));
         if (a.has("padding")) o.padding(a.array<2>("padding"));
         if (a.has("dilation")) o.dilation(a.array<2>("dilation"));
         return std::make_shared<MaxPool2d>(o.ceil_mode(a.get<bool>("ceil_mode", false)));
       }},
      {"AvgPool2d",
       [](const Args& a) -> ModulePtr {
         AvgPool2dOptions o(a.array<2>("kernel_size"));
         if (a.has("stride")) o.stride(a.array<2>("stride"));
         if (a.has("padding")) o.padding(a.array<2>("padding"));
         return std::make_shared<AvgPool2d>(
             o.ceil_mode(a.get<bool>("ceil_mode", false)).count_include_pad(a.get<bool>("count_include_pad", true)));
       }},
      {"AdaptiveAvgPool2d",
       [](const Args& a) -> ModulePtr { return std::make_shared<AdaptiveAvgPool2d>(a.ints("output_size")); }},
      {"Flatten",
       [](const Args& a) -> ModulePtr {
         return std::make_shared<Flatten>(a.get<int64_t>("start_dim", 1), a.get<int64_t>("end_dim", -1));
       }},
      {"Identity", [](const Args&) -> ModulePtr { return std::make_shared<Identity>(); }},
  };
  return f;
}

ModulePtr build(const json& spec) {
  const std::string type = spec.at("type").get<std::string>();
  if (type == "Sequential") {
    std::vector<ModulePtr> modules;
    for (const json& m : spec.at("modules")) modules.push_back(build(m));
    return std::make_shared<Sequential>(std::move(modules));
  }
  auto it = factories().find(type);
  if (it == factories().end()) throw kiln::InvalidArgument(fmt::format("unknown module type '{}'", type));
  return it->second(Args(type, spec.value("args", json::object())));
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> dims;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) dims.push_back(std::stoll(item));
  return dims;
}

// What --spec, --zoo or --backbone built: the module, its input name, output names and dynamic axes.
struct Built {
  ModulePtr module;
  std::string input = "input";
  std::vector<std::string> outputs;
  DynamicAxes axes;
};

Built build_model(const std::string& spec_text, const std::string& zoo_name, const std::string& backbone,
                  const std::string& config_text, const std::vector<int64_t>& out_indices) {
  if (int(!spec_text.empty()) + int(!zoo_name.empty()) + int(!backbone.empty()) != 1)
    throw kiln::InvalidArgument("give exactly one of --spec, --zoo and --backbone");
  const json config = config_text.empty() ? json::object() : json::parse(config_text);
  Built b;
  if (!spec_text.empty()) {
    b.module = build(json::parse(spec_text));
  } else if (!zoo_name.empty()) {
    b.module = zoo::create_model(zoo_name, config);
    b.axes = zoo::dynamic_axes(zoo_name, config);
    b.input = zoo::example_inputs(zoo_name, config).at(0).first;
    b.outputs = {"logits"};
  } else {
    BackboneOptions o;
    if (!out_indices.empty()) o.out_indices = out_indices;
    auto bb = AutoBackbone::from_config(backbone, config, o);
    b.module = bb;
    b.input = "pixel_values";
    b.outputs = bb->out_features();
    b.axes["pixel_values"] = {{0, "batch"}};
  }
  return b;
}

// The options of a module export (no subcommand).
struct ModuleOptions {
  std::string spec_text, zoo_name, backbone, config_text, out, weights, input_shape, input_dtype = "float", run_input,
                                                                                     out_dir;
  std::vector<int64_t> dynamic, out_indices;
  bool eval = false;
  uint64_t seed = 0;
};

void add_module_options(CLI::App& app, ModuleOptions& o) {
  app.add_option("--spec", o.spec_text, "The module as JSON");
  app.add_option("--zoo", o.zoo_name, "A model zoo entry (resnet18, convnext_tiny, ...) instead of a spec");
  app.add_option("--backbone", o.backbone, "An AutoBackbone (resnet50, ...) instead of a spec");
  app.add_option("--config", o.config_text, "With --zoo / --backbone: config overrides as JSON");
  app.add_option("--out-indices", o.out_indices, "With --backbone: the stages to output")->delimiter(',');
  app.add_option("--input-shape", o.input_shape, "The example input shape, as 2,3,8,8 (required without a subcommand)");
  app.add_option("--input-dtype", o.input_dtype, "float, double or int64");
  app.add_option("--dynamic", o.dynamic, "Input dims exported as dynamic");
  app.add_option("--weights", o.weights, "A state_dict as .npz or safetensors, loaded strictly");
  app.add_option("--out", o.out, "Write the ONNX model here");
  app.add_flag("--eval", o.eval, "Export / run in eval mode");
  app.add_option("--seed", o.seed, "manual_seed before building");
  app.add_option("--run", o.run_input, "Run the module in Kiln on this .npy input");
  app.add_option("--out-dir", o.out_dir,
                 "With --run: write output.npy (the first output), output<i>.npy (each one) and, for a --spec, "
                 "state.safetensors (the state_dict after the run)");
}

int export_module(const ModuleOptions& o) {
  if (o.input_shape.empty()) throw kiln::InvalidArgument("--input-shape is required");
  manual_seed(o.seed);
  Built b = build_model(o.spec_text, o.zoo_name, o.backbone, o.config_text, o.out_indices);
  ModulePtr m = b.module;
  if (!o.weights.empty()) m->load_state_dict(load_weights_file(o.weights), true);
  m->train(!o.eval);
  const std::map<std::string, kiln::DType> dtypes{
      {"float", kiln::DType::Float32}, {"double", kiln::DType::Float64}, {"int64", kiln::DType::Int64}};
  if (!dtypes.count(o.input_dtype))
    throw kiln::InvalidArgument(fmt::format("--input-dtype '{}' is not float, double or int64", o.input_dtype));
  ExportOptions options;
  options.input_dtypes = {dtypes.at(o.input_dtype)};
  options.output_names = b.outputs;
  DynamicAxes axes = b.axes;
  for (int64_t d : o.dynamic) axes[b.input][d] = fmt::format("dim{}", d);
  if (!o.out.empty()) m->export_onnx(o.out, {{b.input, parse_shape(o.input_shape)}}, axes, options);

  if (!o.run_input.empty()) {
    const std::vector<kiln::Tensor> y = (*m)({kiln::load_npy(o.run_input)});
    std::filesystem::create_directories(o.out_dir);
    kiln::save_npy(y.at(0), o.out_dir + "/output.npy");
    for (size_t i = 0; i < y.size(); ++i) kiln::save_npy(y[i], fmt::format("{}/output{}.npy", o.out_dir, i));
    if (!o.spec_text.empty()) kiln::write_safetensors(o.out_dir + "/state.safetensors", m->state_dict());
  }
  json report{{"repr", m->repr()}, {"state_dict", json::object()}, {"keys", json::array()}};
  for (const auto& [key, t] : m->state_dict()) {
    report["state_dict"][key] = t.shape();
    report["keys"].push_back(key);  // in state_dict() order (JSON objects are unordered)
  }
  std::cout << report.dump() << "\n";
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{
      "Build a kiln::nn layer from a JSON spec (or a zoo model or backbone), load torch weights, export ONNX, run it"};
  ModuleOptions module;
  add_module_options(app, module);
  std::string core_dir, layers_spec, zoo_spec;
  CLI::App* core = app.add_subcommand("core-files", "Write the nn core's files for tests/python/test_nn_core.py");
  core->add_option("dir", core_dir, "The folder to write them in")->required();
  CLI::App* layers =
      app.add_subcommand("transformer-layers", "Export the attention and transformer layer cases of a spec");
  layers->add_option("spec_file", layers_spec, "The JSON spec (tools/nn_export/transformer_layers.cpp)")->required();
  CLI::App* zoo = app.add_subcommand("zoo-transformers", "Export the zoo transformer cases of a spec, with reports");
  zoo->add_option("spec_file", zoo_spec, "The JSON spec (tools/nn_export/zoo_transformers.cpp)")->required();
  app.require_subcommand(0, 1);
  CLI11_PARSE(app, argc, argv);

  if (*core) kiln::nn_export::write_core_files(core_dir);
  else if (*layers) kiln::nn_export::for_each_case(layers_spec, kiln::nn_export::export_transformer_layer);
  else if (*zoo) kiln::nn_export::for_each_case(zoo_spec, kiln::nn_export::export_zoo_transformer);
  else return export_module(module);
  return 0;
}

}  // namespace

namespace kiln::nn_export {

void for_each_case(const std::string& spec_path, const std::function<void(const nlohmann::json&)>& export_case) {
  std::ifstream f(spec_path);
  if (!f) throw kiln::IOError(fmt::format("cannot open the spec file '{}'", spec_path));
  const json spec = json::parse(f);
  size_t i = 0;
  for (const json& c : spec.at("cases")) {
    try {
      export_case(c);
    } catch (const std::exception& e) {
      throw kiln::Error(fmt::format("{}: case {} ({}): {}", spec_path, i, c.value("onnx", "no onnx path"), e.what()));
    }
    ++i;
  }
}

}  // namespace kiln::nn_export

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kiln-nn-export: error: " << e.what() << "\n";
    return 1;
  }
}
