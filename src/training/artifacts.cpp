// generate_artifacts: the forward model plus a loss becomes the eval model; its gradient graph
// becomes the training model; one update node per trainable parameter makes the optimizer model;
// the initializers become the checkpoint. Parameters are graph inputs of the training and eval
// models, so one CheckpointState feeds both and the optimizer updates it in place.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/artifacts.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "training/graph_edit.h"
#include "training/losses.h"
#include "training/optimizer_model.h"

namespace kiln::training {

namespace {

// Running statistics of training-mode BatchNormalization nodes: initializer -> the node output
// holding its updated value.
std::vector<std::pair<std::string, std::string>> running_statistics(const Graph& g) {
  std::vector<std::pair<std::string, std::string>> stats;
  for (const Node& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.attr_int("training_mode", 0) == 0) continue;
    for (size_t i = 1; i < 3 && i < n.outputs.size(); ++i) {
      const size_t in = i + 2;  // outputs running_mean, running_var <- inputs 3, 4
      if (n.outputs[i].empty() || in >= n.inputs.size() || !g.initializers.count(n.inputs[in])) continue;
      stats.emplace_back(n.inputs[in], n.outputs[i]);
    }
  }
  return stats;
}

// Initializers in the order nodes first read them (the order of the forward computation).
std::vector<std::string> initializers_in_use_order(const Graph& g) {
  std::vector<std::string> order;
  std::set<std::string> seen;
  for (size_t idx : g.topological_order())
    for (const auto& in : g.nodes[idx].inputs)
      if (!in.empty() && g.initializers.count(in) && seen.insert(in).second) order.push_back(in);
  return order;
}

// Values through which a gradient can reach `loss`: walking back from the loss through ops that
// have gradients, over floating-point values only.
std::set<std::string> gradient_reach(const Graph& g, const std::string& loss) {
  std::map<std::string, DType> dtypes;
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info})
    for (const auto& v : *list)
      if (v.has_type) dtypes[v.name] = v.dtype;
  for (const auto& [name, t] : g.initializers) dtypes[name] = t.dtype();
  auto floating = [&](const std::string& v) {
    auto it = dtypes.find(v);
    return it == dtypes.end() || is_floating(it->second);
  };
  std::set<std::string> reach{loss};
  const std::vector<size_t> order = g.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = g.nodes[*it];
    if (gradient_kind(n.domain, n.op_type) == GradientKind::NoGradient) continue;
    bool flows = false;
    for (const auto& o : n.outputs) flows = flows || (!o.empty() && reach.count(o) && floating(o));
    if (!flows) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty() || !floating(n.inputs[i])) continue;
      // BatchNormalization's running statistics do not enter a training-mode output.
      if (n.op_type == "BatchNormalization" && i >= 3 && n.attr_int("training_mode", 0) != 0) continue;
      reach.insert(n.inputs[i]);
    }
  }
  return reach;
}

bool is_value(const Graph& g, const std::string& name) {
  if (g.initializers.count(name)) return true;
  for (const auto& v : g.inputs)
    if (v.name == name) return true;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (o == name) return true;
  return false;
}

struct ParameterSets {
  std::vector<std::string> trainable, frozen, buffers;
  std::vector<std::pair<std::string, std::string>> updates;  // buffer -> updated value
  std::vector<std::string> all() const {
    std::vector<std::string> v = trainable;
    v.insert(v.end(), frozen.begin(), frozen.end());
    v.insert(v.end(), buffers.begin(), buffers.end());
    return v;
  }
};

// The frozen parameters: the options' list, else the "kiln.frozen_params" metadata that
// kiln::nn's export writes for requires_grad_(false) parameters (names no longer initializers of
// an edited model are skipped: the metadata is a default, not a request).
std::vector<std::string> frozen_list(const Model& m, const ArtifactOptions& o) {
  if (!o.frozen_params.empty()) return o.frozen_params;
  auto it = m.metadata.find("kiln.frozen_params");
  if (it == m.metadata.end()) return {};
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= it->second.size()) {
    const size_t comma = std::min(it->second.find(',', start), it->second.size());
    const std::string name = it->second.substr(start, comma - start);
    const bool requested = std::find(o.requires_grad.begin(), o.requires_grad.end(), name) != o.requires_grad.end();
    if (!name.empty() && m.graph.initializers.count(name) && !requested) names.push_back(name);
    start = comma + 1;
  }
  return names;
}

ParameterSets choose_parameters(const Model& m, const ArtifactOptions& o, const std::string& loss) {
  const Graph& g = m.graph;
  const std::vector<std::string> frozen_params = frozen_list(m, o);
  ParameterSets p;
  p.updates = running_statistics(g);
  std::set<std::string> buffers;
  for (const auto& [b, out] : p.updates)
    if (buffers.insert(b).second) p.buffers.push_back(b);
  // Running statistics of inference-mode BatchNormalization are constants, never trained.
  std::set<std::string> statistics = buffers;
  for (const Node& n : g.nodes)
    if (n.domain.empty() && n.op_type == "BatchNormalization")
      for (size_t i = 3; i < n.inputs.size() && i < 5; ++i) statistics.insert(n.inputs[i]);

  const std::set<std::string> frozen(frozen_params.begin(), frozen_params.end());
  const std::set<std::string> requested(o.requires_grad.begin(), o.requires_grad.end());
  for (const auto& name : o.requires_grad) {
    if (frozen.count(name))
      throw InvalidArgument(fmt::format("'{}' is listed both in requires_grad and in frozen_params", name));
    auto it = g.initializers.find(name);
    if (it == g.initializers.end())
      throw InvalidArgument(fmt::format("requires_grad names '{}', which is not an initializer of the model", name));
    if (!is_floating(it->second.dtype()))
      throw TypeError(fmt::format("requires_grad names '{}', which is {}; only floating-point parameters are trained",
                                  name, it->second.describe()));
    if (buffers.count(name))
      throw InvalidArgument(fmt::format("requires_grad names '{}', a running statistic of a training-mode "
                                        "BatchNormalization; it is updated by the forward pass, not trained", name));
  }
  for (const auto& name : frozen_params)
    if (!g.initializers.count(name))
      throw InvalidArgument(fmt::format("frozen_params names '{}', which is not an initializer of the model", name));

  if (!o.requires_grad.empty()) {
    p.trainable = o.requires_grad;
  } else {
    const std::set<std::string> reach = gradient_reach(g, loss);
    for (const auto& name : initializers_in_use_order(g))
      if (is_floating(g.initializers.at(name).dtype()) && !frozen.count(name) && !statistics.count(name) &&
          reach.count(name))
        p.trainable.push_back(name);
  }
  for (const auto& name : frozen_params)
    if (!buffers.count(name)) p.frozen.push_back(name);
  if (p.trainable.empty())
    throw InvalidArgument("no trainable parameter: no floating-point initializer reaches the loss through ops with "
                          "gradients (or all are frozen)");
  return p;
}

std::string json_list(const std::vector<std::string>& names) { return nlohmann::json(names).dump(); }

}  // namespace

Artifacts build_artifacts(const Model& forward, const ArtifactOptions& options) {
  Model base = forward;
  Graph& g = base.graph;
  if (g.outputs.empty()) throw InvalidModel("the model has no outputs");
  GraphEditor edit(base);

  std::vector<std::string> loss_inputs = options.loss_input_names;
  if (loss_inputs.empty()) loss_inputs.push_back(g.outputs.front().name);
  for (const auto& name : loss_inputs)
    if (!is_value(g, name)) throw InvalidArgument(fmt::format("loss input '{}' is not a value of the model", name));
  for (const auto& name : options.additional_output_names)
    if (!is_value(g, name))
      throw InvalidArgument(fmt::format("additional output '{}' is not a value of the model", name));

  std::string loss;
  if (options.loss == LossType::None) {
    if (loss_inputs.size() != 1)
      throw InvalidArgument(fmt::format("without a loss block the model's output is the loss, but {} loss inputs "
                                        "were named", loss_inputs.size()));
    loss = loss_inputs[0];
    if (const ValueInfo* v = find_declared(g, loss); v && v->has_shape) {
      // Not a scalar when a fixed dimension exceeds 1 (a symbolic batch dimension may be 1).
      bool larger = false;
      for (const Dim& d : v->dims) larger = larger || d.value > 1 || d.value == 0;
      if (larger)
        throw InvalidArgument(fmt::format("loss 'none' takes the model output '{}' as the loss, but it is {}, not a "
                                          "scalar; choose a loss such as CrossEntropyLoss", loss, v->describe()));
    }
  } else {
    loss = add_loss(options.loss, base, edit, loss_inputs, options.label_smoothing);
  }
  infer_shapes(base);  // types for the loss and for additional outputs that are intermediate values

  // The forward + loss graph: outputs are the loss, then the additional outputs.
  std::vector<ValueInfo> outputs;
  ValueInfo loss_info;
  loss_info.name = loss;
  if (const ValueInfo* v = find_declared(g, loss)) loss_info = *v;
  loss_info.has_type = true;
  if (options.loss != LossType::None) {
    loss_info.dtype = find_declared(g, loss_inputs[0])->dtype;
    loss_info.has_shape = true;
    loss_info.dims.clear();
  }
  outputs.push_back(loss_info);
  for (const auto& name : options.additional_output_names) {
    if (name == loss) continue;
    const ValueInfo* v = find_declared(g, name);
    ValueInfo info;
    info.name = name;
    if (v) info = *v;
    outputs.push_back(info);
  }
  g.outputs = outputs;

  const ParameterSets params = choose_parameters(base, options, loss);
  const std::vector<std::string> all_params = params.all();

  Artifacts a;
  // Training model: gradients of the trainable parameters, and updated running statistics.
  {
    GradientOptions go;
    go.loss = loss;
    go.requires_grad = params.trainable;
    go.frozen_params = params.frozen;
    Model t = build_gradient_graph(base, go).model;
    GraphEditor tedit(t);
    for (const auto& [buffer, value] : params.updates) {
      const std::string name = buffer + ".updated";
      if (tedit.has_value(name))
        throw InvalidArgument(fmt::format("the model already has a value named '{}', the name of the training "
                                          "model's output for the updated running statistic '{}'", name, buffer));
      tedit.fresh(name);
      Node id;
      id.op_type = "Identity";
      id.name = tedit.fresh(name + "/Identity");
      id.inputs = {value};
      id.outputs = {name};
      t.graph.nodes.push_back(std::move(id));
      t.graph.outputs.push_back(ValueInfo::of(name, t.graph.initializers.at(buffer)));
    }
    initializers_to_inputs(t.graph, all_params);
    t.metadata["kiln.artifact"] = "training";
    t.metadata["kiln.parameters"] = json_list(all_params);
    t.graph.name = g.name.empty() ? "training" : g.name + "_training";
    a.training_model = std::move(t);
  }
  // Eval model: forward + loss, inference-mode BatchNormalization and Dropout.
  {
    Model e = base;
    to_inference_mode(e.graph);
    initializers_to_inputs(e.graph, all_params);
    std::set<std::string> keep;
    for (const auto& v : e.graph.inputs) keep.insert(v.name);
    prune(e.graph, keep);
    e.metadata["kiln.artifact"] = "eval";
    e.metadata["kiln.parameters"] = json_list(all_params);
    e.graph.name = g.name.empty() ? "eval" : g.name + "_eval";
    a.eval_model = std::move(e);
  }
  if (options.optimizer) {
    std::vector<OptimizerParameter> ps;
    for (const auto& name : params.trainable) {
      const Tensor& t = g.initializers.at(name);
      ps.push_back({name, t.dtype(), t.shape()});
    }
    a.optimizer_model = build_optimizer_model(*options.optimizer, ps, options);
  }
  // Checkpoint: trainable parameters, frozen ones, then running statistics.
  auto add = [&](const std::string& name, bool trainable) {
    const Tensor& t = g.initializers.at(name);
    a.checkpoint.add_parameter(options.nominal_checkpoint ? Parameter::nominal(name, t.dtype(), t.shape(), trainable)
                                                          : Parameter(name, t.clone(), trainable));
  };
  for (const auto& name : params.trainable) add(name, true);
  for (const auto& name : params.frozen) add(name, false);
  for (const auto& name : params.buffers) add(name, false);
  return a;
}

std::vector<std::string> generate_artifacts(const Model& forward, const ArtifactOptions& options,
                                            const std::string& artifact_directory) {
  Artifacts a = build_artifacts(forward, options);  // everything is built before anything is written
  std::error_code ec;
  std::filesystem::create_directories(artifact_directory, ec);
  if (ec)
    throw IOError(fmt::format("cannot create the artifact directory '{}': {}", artifact_directory, ec.message()));
  const std::filesystem::path dir(artifact_directory);
  std::vector<std::string> written;
  auto write_model = [&](const Model& m, const std::string& file) {
    const std::string path = (dir / file).string();
    save_model(m, path);
    written.push_back(path);
  };
  write_model(a.training_model, training_model_file(options.prefix));
  write_model(a.eval_model, eval_model_file(options.prefix));
  if (a.optimizer_model) write_model(*a.optimizer_model, optimizer_model_file(options.prefix));
  const std::string ckpt = (dir / checkpoint_file(options.prefix)).string();
  CheckpointState::save_checkpoint(a.checkpoint, ckpt);
  written.push_back(ckpt);
  return written;
}

std::vector<std::string> no_weight_decay_parameters(const Model& forward) {
  std::set<std::string> names;
  for (const auto& [name, t] : forward.graph.initializers)
    if (name.find("bias") != std::string::npos) names.insert(name);
  for (const Node& n : forward.graph.nodes)
    if (n.domain.empty() && n.op_type == "LayerNormalization")
      for (size_t i = 1; i < n.inputs.size() && i < 3; ++i)
        if (forward.graph.initializers.count(n.inputs[i])) names.insert(n.inputs[i]);
  return {names.begin(), names.end()};
}

std::string training_model_file(const std::string& prefix) { return prefix + "training_model.onnx"; }
std::string eval_model_file(const std::string& prefix) { return prefix + "eval_model.onnx"; }
std::string optimizer_model_file(const std::string& prefix) { return prefix + "optimizer_model.onnx"; }
std::string checkpoint_file(const std::string& prefix) { return prefix + "checkpoint"; }

}  // namespace kiln::training
