// The zoo's registry: entries register themselves (a static registrar per model file) and are
// looked up by name, with their default config merged with the caller's overrides.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "kiln/error.h"
#include "kiln/nn/zoo.h"

namespace kiln::nn::zoo {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ZooEntry> entries;
};

Registry& registry() {
  static Registry r;
  return r;
}

ZooEntry entry_for(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.entries.find(name);
  if (it == r.entries.end()) {
    std::string names;
    for (const auto& [n, e] : r.entries) names += (names.empty() ? "" : ", ") + n;
    throw InvalidArgument(fmt::format("no model '{}' in the zoo; it has: {}", name, names));
  }
  return it->second;
}

}  // namespace

void register_model(ZooEntry entry) {
  if (entry.name.empty() || !entry.create || !entry.example_inputs)
    throw InvalidArgument("zoo::register_model: an entry needs a name, create and example_inputs");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.entries[entry.name] = std::move(entry);
}

std::vector<std::string> model_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [n, e] : r.entries) names.push_back(n);
  return names;
}

Config config_for(const std::string& name, const Config& overrides) {
  const ZooEntry e = entry_for(name);
  Config config = e.default_config.is_object() ? e.default_config : Config::object();
  if (!overrides.is_null() && !overrides.is_object())
    throw InvalidArgument(fmt::format("the config of '{}' must be a JSON object, got {}", name, overrides.dump()));
  if (overrides.is_object())
    for (auto it = overrides.begin(); it != overrides.end(); ++it) {
      if (!config.contains(it.key())) {
        std::string known;
        for (auto k = config.begin(); k != config.end(); ++k) known += (known.empty() ? "" : ", ") + k.key();
        throw InvalidArgument(fmt::format("'{}' has no config key '{}'; its keys: {}", name, it.key(), known));
      }
      config[it.key()] = it.value();
    }
  return config;
}

ModulePtr create_model(const std::string& name, const Config& overrides) {
  return entry_for(name).create(config_for(name, overrides));
}

InputShapes example_inputs(const std::string& name, const Config& overrides) {
  return entry_for(name).example_inputs(config_for(name, overrides));
}

DynamicAxes dynamic_axes(const std::string& name, const Config& overrides) {
  const ZooEntry e = entry_for(name);
  if (e.dynamic_axes) return e.dynamic_axes(config_for(name, overrides));
  DynamicAxes axes;  // the batch dimension of every input, and of the output
  for (const auto& [input, shape] : e.example_inputs(config_for(name, overrides))) axes[input] = {{0, "batch"}};
  axes["logits"] = {{0, "batch"}};
  return axes;
}

ExportOptions export_options(const std::string& name, const Config& overrides) {
  const ZooEntry e = entry_for(name);
  ExportOptions o;
  const Config config = config_for(name, overrides);
  o.output_names = e.output_names ? e.output_names(config) : std::vector<std::string>{"logits"};
  if (e.input_dtypes) {
    o.input_dtypes = e.input_dtypes(config);
    const size_t inputs = e.example_inputs(config).size();
    if (o.input_dtypes.size() != inputs)
      throw InvalidArgument(
          fmt::format("zoo entry '{}' gives {} input dtypes for {} inputs", name, o.input_dtypes.size(), inputs));
  }
  return o;
}

Model export_model(const std::string& name, const Config& overrides, uint64_t seed) {
  manual_seed(seed);
  ModulePtr model = create_model(name, overrides);
  model->train();
  return model->to_onnx(example_inputs(name, overrides), dynamic_axes(name, overrides),
                        export_options(name, overrides));
}

}  // namespace kiln::nn::zoo
