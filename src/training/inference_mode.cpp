#include "training/inference_mode.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiln/error.h"

namespace kiln::training {

void to_inference_mode(Graph& g) {
  std::set<std::string> removed;
  for (Node& n : g.nodes) {
    if (n.domain == kKilnDomain && n.op_type == "StopGradient") {  // a gradient marker: Identity here
      n.domain.clear();
      n.op_type = "Identity";
      continue;
    }
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization" && n.attr_int("training_mode", 0) != 0) {
      n.attrs["training_mode"] = Attribute::of_int(0);
      for (size_t i = 1; i < n.outputs.size(); ++i)
        if (!n.outputs[i].empty()) removed.insert(n.outputs[i]);
      n.outputs.resize(1);
    } else if (n.op_type == "Dropout") {
      if (n.inputs.size() > 2) n.inputs.resize(2);  // training_mode omitted: false
      // The mask output of an inference Dropout is all true; keep it (ONNX defines it).
    }
  }
  if (removed.empty()) return;
  for (const Node& n : g.nodes)
    for (const auto& i : n.inputs)
      if (removed.count(i))
        throw InvalidModel(
            fmt::format("{} reads '{}', a running statistic of a training-mode BatchNormalization; "
                        "it has no inference-mode equivalent",
                        n.label(), i));
  for (const auto& o : g.outputs)
    if (removed.count(o.name))
      throw InvalidModel(
          fmt::format("graph output '{}' is a running statistic of a training-mode "
                      "BatchNormalization; it has no inference-mode equivalent",
                      o.name));
  g.value_info.erase(std::remove_if(g.value_info.begin(), g.value_info.end(),
                                    [&](const ValueInfo& v) { return removed.count(v.name) != 0; }),
                     g.value_info.end());
}

}  // namespace kiln::training
