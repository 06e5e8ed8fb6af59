// generate_artifacts: the forward model plus a loss becomes the eval model; its gradient graph
// becomes the training model; one update node per trainable parameter makes the optimizer model;
// the initializers become the checkpoint. Parameters are graph inputs of the training and eval
// models, so one CheckpointState feeds both and the optimizer updates it in place.
#include "kiln/artifacts.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ir/autocast.h"
#include "ir/graph_editor.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "training/artifacts_internal.h"
#include "training/inference_mode.h"
#include "training/losses.h"
#include "training/optimizer_model.h"
#include "training/serialized_head.h"

namespace kiln::training {

namespace {

bool is_value(const Graph& g, const std::string& name) {
  if (g.initializers.count(name)) return true;
  for (const auto& v : g.inputs)
    if (v.name == name) return true;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (o == name) return true;
  return false;
}

// Trainable, frozen, then buffers: the parameter inputs of the training and eval models.
std::vector<std::string> all_parameters(const ParameterSelection& p) {
  std::vector<std::string> v = p.trainable;
  v.insert(v.end(), p.frozen.begin(), p.frozen.end());
  v.insert(v.end(), p.buffers.begin(), p.buffers.end());
  return v;
}

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

std::string json_list(const std::vector<std::string>& names) { return nlohmann::json(names).dump(); }

// The loss inputs the options name (default: the model's first output), each checked to exist.
std::vector<std::string> loss_inputs_of(const Graph& g, const ArtifactOptions& options) {
  std::vector<std::string> loss_inputs = options.loss_input_names;
  if (loss_inputs.empty()) loss_inputs.push_back(g.outputs.front().name);
  for (const auto& name : loss_inputs)
    if (!is_value(g, name)) throw InvalidArgument(fmt::format("loss input '{}' is not a value of the model", name));
  for (const auto& name : options.additional_output_names)
    if (!is_value(g, name))
      throw InvalidArgument(fmt::format("additional output '{}' is not a value of the model", name));
  return loss_inputs;
}

// Adds the loss block (or, for LossType::None, checks that the one loss input is a scalar) and
// returns the loss value's name.
std::string add_loss_block(Model& base, GraphEditor& edit, const ArtifactOptions& options,
                           const std::vector<std::string>& loss_inputs) {
  if (options.loss != LossType::None) return add_loss(options.loss, base, edit, loss_inputs, options.label_smoothing);
  if (loss_inputs.size() != 1)
    throw InvalidArgument(
        fmt::format("without a loss block the model's output is the loss, but {} loss inputs "
                    "were named",
                    loss_inputs.size()));
  const std::string& loss = loss_inputs[0];
  if (const ValueInfo* v = find_declared(base.graph, loss); v && v->has_shape) {
    // Not a scalar when a fixed dimension exceeds 1 (a symbolic batch dimension may be 1).
    bool larger = false;
    for (const Dim& d : v->dims) larger = larger || d.value > 1 || d.value == 0;
    if (larger)
      throw InvalidArgument(
          fmt::format("loss 'none' takes the model output '{}' as the loss, but it is {}, not a "
                      "scalar; choose a loss such as CrossEntropyLoss",
                      loss, v->describe()));
  }
  return loss;
}

// The forward + loss graph's outputs: the loss, then the additional outputs.
void set_outputs(Graph& g, const std::string& loss, const ArtifactOptions& options,
                 const std::vector<std::string>& loss_inputs) {
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
    ValueInfo info;
    info.name = name;
    if (const ValueInfo* v = find_declared(g, name)) info = *v;
    outputs.push_back(info);
  }
  g.outputs = outputs;
}

// Training model: gradients of the trainable parameters, and updated running statistics.
Model training_model(const Model& forward_with_loss, const std::string& loss, const ParameterSelection& params,
                     const ArtifactOptions& options) {
  Model serialized;
  if (options.lm_head_chunks > 1) {
    serialized = forward_with_loss;
    serialize_lm_head(serialized, options.lm_head_chunks);
  }
  const Model& base = options.lm_head_chunks > 1 ? serialized : forward_with_loss;
  GradientOptions go;
  go.loss = loss;
  go.recompute = options.recompute;
  go.mixed_precision = options.mixed_precision;
  // float16's range needs loss scaling: the Module feeds the scale (kiln/grad_scaler.h).
  if (options.mixed_precision == DType::Float16) go.loss_scale_input = kLossScaleInput;
  go.requires_grad = params.trainable;
  go.frozen_params = params.frozen;
  Model t = build_gradient_graph(base, go).model;
  GraphEditor edit(t);
  for (const auto& [buffer, value] : params.updates) {
    const std::string name = buffer + ".updated";
    if (edit.has_value(name))
      throw InvalidArgument(
          fmt::format("the model already has a value named '{}', the name of the training "
                      "model's output for the updated running statistic '{}'",
                      name, buffer));
    Node id;
    id.op_type = "Identity";
    id.name = edit.fresh(name + "/Identity");
    id.inputs = {value};
    id.outputs = {name};
    edit.add_node(std::move(id));
    t.graph.outputs.push_back(ValueInfo::of(name, t.graph.initializers.at(buffer)));
  }
  const std::vector<std::string> all_params = all_parameters(params);
  initializers_to_inputs(t.graph, all_params);
  t.metadata["kiln.artifact"] = "training";
  if (!go.loss_scale_input.empty()) t.metadata[kLossScaleKey] = go.loss_scale_input;
  t.metadata["kiln.parameters"] = json_list(all_params);
  t.graph.name = base.graph.name.empty() ? "training" : base.graph.name + "_training";
  return t;
}

// Eval model: forward + loss, inference-mode BatchNormalization and Dropout.
// With mixed precision the eval model's products run in bfloat16 as the training model's do (HF
// evaluates under autocast too). It is not fused first, so that strip_autocast gives back the
// plain ONNX graph for a float32 inference export.
Model eval_model(const Model& base, const ParameterSelection& params, DType mixed_precision) {
  Model e = base;
  const std::vector<std::string> all_params = all_parameters(params);
  to_inference_mode(e.graph);
  if (mixed_precision != DType::Float32) {
    infer_shapes(e);
    autocast(e, mixed_precision);
  }
  initializers_to_inputs(e.graph, all_params);
  std::set<std::string> keep;
  for (const auto& v : e.graph.inputs) keep.insert(v.name);
  prune(e.graph, keep);
  e.metadata["kiln.artifact"] = "eval";
  e.metadata["kiln.parameters"] = json_list(all_params);
  e.graph.name = base.graph.name.empty() ? "eval" : base.graph.name + "_eval";
  return e;
}

// Checkpoint: trainable parameters, frozen ones, then running statistics.
CheckpointState initial_checkpoint(const Graph& g, const ParameterSelection& params, bool nominal) {
  CheckpointState state;
  auto add = [&](const std::string& name, bool trainable) {
    const Tensor& t = g.initializers.at(name);
    state.add_parameter(nominal ? Parameter::nominal(name, t.dtype(), t.shape(), trainable)
                                : Parameter(name, t.clone(), trainable));
  };
  for (const auto& name : params.trainable) add(name, true);
  for (const auto& name : params.frozen) add(name, false);
  for (const auto& name : params.buffers) add(name, false);
  return state;
}

}  // namespace

LossModel forward_with_loss(const Model& forward, const ArtifactOptions& options) {
  // The loss blocks use ops of opset 13 (SoftmaxCrossEntropyLoss, ReduceSum with axes as input):
  // an older model would get training artifacts that no ONNX checker, and no kiln train, accepts.
  if (const int64_t opset = forward.opset(""); opset < 13)
    throw Unsupported(
        fmt::format("the model imports opset {} of the default ONNX domain; Kiln generates training "
                    "artifacts from opset 13 on (PyTorch exports 13 to 17; "
                    "onnx.version_converter.convert_version(model, 13) upgrades an older model)",
                    opset));
  Model base = forward;
  if (base.graph.outputs.empty()) throw InvalidModel("the model has no outputs");
  GraphEditor edit(base);
  const std::vector<std::string> loss_inputs = loss_inputs_of(base.graph, options);
  const std::string loss = add_loss_block(base, edit, options, loss_inputs);
  infer_shapes(base);  // types for the loss and for additional outputs that are intermediate values
  set_outputs(base.graph, loss, options, loss_inputs);
  return {std::move(base), loss};
}

Artifacts build_artifacts(const Model& forward, const ArtifactOptions& options) {
  auto [base, loss] = forward_with_loss(forward, options);
  const ParameterSelection params = select_parameters(base, loss, options.requires_grad, frozen_list(base, options));

  Artifacts a;
  a.training_model = training_model(base, loss, params, options);
  a.eval_model = eval_model(base, params, options.mixed_precision);
  if (options.optimizer) {
    std::vector<OptimizerParameter> ps;
    for (const auto& name : params.trainable) {
      const Tensor& t = base.graph.initializers.at(name);
      ps.push_back({name, t.dtype(), t.shape()});
    }
    a.optimizer_model = build_optimizer_model(*options.optimizer, ps, options);
  }
  a.checkpoint = initial_checkpoint(base.graph, params, options.nominal_checkpoint);
  return a;
}

std::vector<std::string> generate_artifacts(const Model& forward, const ArtifactOptions& options,
                                            const std::string& artifact_directory) {
  Artifacts a = build_artifacts(forward, options);  // everything is built before anything is written
  std::error_code ec;
  std::filesystem::create_directories(artifact_directory, ec);
  if (ec) throw IOError(fmt::format("cannot create the artifact directory '{}': {}", artifact_directory, ec.message()));
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

std::vector<std::string> frozen_parameters(const Model& m, const ArtifactOptions& o) { return frozen_list(m, o); }

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

DType mixed_precision_from_string(const std::string& name) {
  if (name == "no" || name == "fp32") return DType::Float32;
  if (name == "bf16") return DType::BFloat16;
  if (name == "fp16") return DType::Float16;
  throw InvalidArgument(fmt::format("mixed precision '{}': expected 'no' (float32), 'bf16' or 'fp16'", name));
}

std::string training_model_file(const std::string& prefix) { return prefix + "training_model.onnx"; }
std::string eval_model_file(const std::string& prefix) { return prefix + "eval_model.onnx"; }
std::string optimizer_model_file(const std::string& prefix) { return prefix + "optimizer_model.onnx"; }
std::string checkpoint_file(const std::string& prefix) { return prefix + "checkpoint"; }

}  // namespace kiln::training
