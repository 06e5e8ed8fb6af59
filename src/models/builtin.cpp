#include "models/builtin.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "kiln/error.h"
#include "kiln/nn/zoo.h"

namespace kiln {

namespace {

// Renames a graph input and every use of it.
void rename_input(Model& m, const std::string& from, const std::string& to) {
  for (ValueInfo& v : m.graph.inputs)
    if (v.name == from) v.name = to;
  for (Node& n : m.graph.nodes)
    for (std::string& in : n.inputs)
      if (in == from) in = to;
}

}  // namespace

Model make_builtin_model(const std::string& name, uint64_t seed, const nlohmann::json& config) {
  const std::vector<std::string> names = builtin_model_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw InvalidArgument(
        fmt::format("unknown built-in model '{}'; built-in models (the model zoo): {}", name, fmt::join(names, ", ")));
  Model m = nn::zoo::export_model(name, config.is_null() ? nlohmann::json::object() : config, seed);
  // Kiln's image datasets (IDX, npz) hold images in "input"; HF's name would need a renamed column.
  if (m.graph.inputs.size() == 1 && m.graph.inputs[0].name == "pixel_values") rename_input(m, "pixel_values", "input");
  return m;
}

std::vector<std::string> builtin_model_names() { return nn::zoo::model_names(); }

}  // namespace kiln
