// Module: runs the training model (forward, loss, gradients) or the eval model over the parameters
// of a CheckpointState. Parameters are graph inputs fed from the state without copies; gradient
// outputs are written into the parameters' gradient tensors after lazy_reset_grad, or added to
// them (see bind_gradients), and updated BatchNormalization statistics are written back to the
// state.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_text.h"
#include "ir/autocast.h"
#include "ir/graph_editor.h"
#include "ir/to_low_precision.h"
#include "kernels/cpu/statistics_reduce.h"
#include "kiln/artifacts.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/training.h"
#include "training/inference_mode.h"
#include "training/tensor_math.h"

namespace kiln::training {

namespace {

// What Module needs to know about one of its models.
struct BoundModel {
  std::string path;
  std::string role;  // "training model", "eval model"
  std::unique_ptr<Session> session;
  // The eval model as its file has it: the Session plans a fused copy (ai.kiln ops, ir/fusion.h),
  // and an exported inference model must stay standard ONNX.
  Model source;
  std::vector<std::string> user_inputs, user_outputs, params;
  std::string loss_scale_input;                              // fp16 training models: fed Module::loss_scale()
  std::vector<std::pair<std::string, std::string>> grads;    // parameter -> gradient output
  std::vector<std::pair<std::string, std::string>> updates;  // parameter -> updated-value output
  // Positions among the session's graph outputs (run_with_binding's order).
  std::vector<size_t> user_output_pos, grad_pos, update_pos;
  std::vector<Tensor> accumulators;  // per gradient: the run's output when adding into a gradient

  std::string where() const { return fmt::format("{} '{}'", role, path); }
};

std::vector<std::string> declared_parameters(const Model& m, const CheckpointState& state, const std::string& where) {
  std::set<std::string> inputs;
  for (const auto& v : m.graph.inputs) inputs.insert(v.name);
  std::vector<std::string> params;
  auto it = m.metadata.find("kiln.parameters");
  if (it != m.metadata.end()) {
    nlohmann::json list;
    try {
      check_json_limits(it->second, "metadata 'kiln.parameters'");
      list = nlohmann::json::parse(it->second);
    } catch (const std::exception& e) {
      throw InvalidModel(fmt::format("{}: metadata 'kiln.parameters' is not JSON: {}", where, e.what()));
    }
    if (!list.is_array()) throw InvalidModel(fmt::format("{}: metadata 'kiln.parameters' is not a list", where));
    for (const auto& name : list) {
      if (!name.is_string())
        throw InvalidModel(fmt::format("{}: metadata 'kiln.parameters' is not a list of names", where));
      const std::string n = name.get<std::string>();
      if (!inputs.count(n))
        throw InvalidModel(fmt::format("{}: parameter '{}' listed in its metadata is not a graph input", where, n));
      if (!state.parameters().count(n))
        throw KeyError(
            fmt::format("{} takes parameter '{}', which the checkpoint does not have (is the checkpoint "
                        "of another model?)",
                        where, n));
      params.push_back(n);
    }
    return params;
  }
  for (const auto& v : m.graph.inputs)  // a model not made by Kiln: parameters are inputs the state has
    if (state.parameters().count(v.name)) params.push_back(v.name);
  return params;
}

void check_parameter(const ValueInfo& v, const Parameter& p, const std::string& where) {
  bool same = v.has_type && v.dtype == p.dtype() && v.dims.size() == p.shape().size();
  for (size_t i = 0; same && i < v.dims.size(); ++i) same = v.dims[i].value < 0 || v.dims[i].value == p.shape()[i];
  if (same) return;
  const std::string held = fmt::format("{}{}", dtype_name(p.dtype()), kiln::to_string(p.shape()));
  const std::string msg = fmt::format(
      "parameter '{}': the checkpoint holds {} but the {} takes {} (is the checkpoint "
      "of another model?)",
      p.name(), held, where, v.describe());
  if (v.has_type && v.dtype != p.dtype()) throw TypeError(msg);
  throw ShapeError(msg);
}

BoundModel bind_model(const std::string& path, const std::string& role, CheckpointState& state, bool training,
                      const SessionOptions& options) {
  BoundModel b;
  b.path = path;
  b.role = role;
  Model m = load_model(path);
  const std::string where = b.where();
  b.params = declared_parameters(m, state, where);
  const std::set<std::string> params(b.params.begin(), b.params.end());
  if (const auto it = m.metadata.find(kLossScaleKey); it != m.metadata.end()) b.loss_scale_input = it->second;
  for (const auto& v : m.graph.inputs) {
    if (params.count(v.name)) check_parameter(v, state.parameter(v.name), where);
    else if (v.name != b.loss_scale_input) b.user_inputs.push_back(v.name);
  }
  std::set<std::string> outputs;
  for (const auto& v : m.graph.outputs) outputs.insert(v.name);
  std::set<std::string> special;
  if (training) {
    size_t trainable = 0;
    for (const auto& p : b.params) {
      if (!state.parameter(p).requires_grad()) continue;
      ++trainable;
      const std::string g = p + "_grad";
      if (!outputs.count(g))
        throw InvalidModel(
            fmt::format("{} has no gradient output '{}' for trainable parameter '{}'{}", where, g, p,
                        trainable == 1 ? " (is it a training model? generate one with kiln artifacts)" : ""));
      b.grads.emplace_back(p, g);
      special.insert(g);
    }
    if (b.grads.empty())
      throw InvalidModel(fmt::format("{} computes no gradients: none of its parameters is trainable", where));
    for (const auto& p : b.params)
      if (outputs.count(p + ".updated")) {
        b.updates.emplace_back(p, p + ".updated");
        special.insert(p + ".updated");
      }
  }
  for (const auto& v : m.graph.outputs)
    if (!special.count(v.name)) b.user_outputs.push_back(v.name);
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < m.graph.outputs.size(); ++i) position[m.graph.outputs[i].name] = i;
  for (const auto& name : b.user_outputs) b.user_output_pos.push_back(position.at(name));
  for (const auto& [p, g] : b.grads) b.grad_pos.push_back(position.at(g));
  for (const auto& [p, u] : b.updates) b.update_pos.push_back(position.at(u));
  b.accumulators.resize(b.grads.size());
  if (!training) b.source = m;
  b.session = std::make_unique<Session>(std::move(m), options);
  return b;
}

// Gradient outputs are written straight into the parameters' gradient tensors (after
// lazy_reset_grad), or into an accumulator kept across steps that is then added to them, instead
// of being copied out of the run into new tensors: every step binds every gradient, so the
// Session keeps one plan, and a step allocates and copies no gradient.
void bind_gradients(BoundModel& b, const CheckpointState& state, bool reset, std::vector<Tensor>& out) {
  for (size_t k = 0; k < b.grads.size(); ++k) {
    const Parameter& param = state.parameter(b.grads[k].first);
    const Tensor& grad = param.grad();
    const bool fits =
        grad.defined() && grad.dtype() == param.dtype() && grad.shape() == param.shape() && grad.is_contiguous();
    if (reset || !grad.defined()) {
      out[b.grad_pos[k]] = fits ? grad : Tensor::empty(param.dtype(), param.shape());
      continue;
    }
    Tensor& acc = b.accumulators[k];
    if (!acc.defined() || acc.dtype() != param.dtype() || acc.shape() != param.shape())
      acc = Tensor::empty(param.dtype(), param.shape());
    out[b.grad_pos[k]] = acc;
  }
}

}  // namespace

struct Module::Graphs {
  BoundModel train;
  std::optional<BoundModel> eval;
};

Module::Module(const std::string& train_model_path, CheckpointState& state,
               const std::optional<std::string>& eval_model_path, const std::string& device,
               const SessionOptions& options)
    : state_(state), options_(options), graphs_(std::make_unique<Graphs>()) {
  if (device != "cpu") throw Unsupported(fmt::format("device '{}': Kiln trains on 'cpu' only for now", device));
  graphs_->train = bind_model(train_model_path, "training model", state, true, options);
  if (eval_model_path) graphs_->eval = bind_model(*eval_model_path, "eval model", state, false, options);
  for (const auto& p : graphs_->train.params)
    if (state.parameter(p).requires_grad()) param_names_.push_back(p);
  for (const auto& p : graphs_->train.params)
    if (!state.parameter(p).requires_grad()) param_names_.push_back(p);
}

Module::~Module() = default;

std::vector<Tensor> Module::operator()(const std::vector<Tensor>& inputs) {
  const std::lock_guard lock(mutex_);  // calls from several threads take turns
  if (!training_ && !graphs_->eval)
    throw InvalidArgument("the Module is in eval mode but was built without an eval model");
  return run(inputs, training_);
}

std::vector<Tensor> Module::run(const std::vector<Tensor>& inputs, bool training) {
  BoundModel& b = training ? graphs_->train : *graphs_->eval;
  const std::vector<std::string>& input_names = b.user_inputs;
  if (inputs.size() != input_names.size()) {
    std::string names;
    for (const auto& n : input_names) names += (names.empty() ? "" : ", ") + n;
    throw InvalidArgument(fmt::format("the {} takes {} inputs ({}), but {} were given", b.where(), input_names.size(),
                                      names, inputs.size()));
  }
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) throw InvalidArgument(fmt::format("input '{}' is an empty tensor", input_names[i]));
    feeds[input_names[i]] = inputs[i];
  }
  for (const auto& p : b.params) {
    const Parameter& param = state_.parameter(p);
    if (!param.has_data())
      throw InvalidArgument(
          fmt::format("parameter '{}' has no data: the checkpoint is nominal; copy the parameters "
                      "in with copy_buffer_to_parameters before running the {}",
                      p, b.role));
    feeds[p] = param.data();
  }
  if (!b.loss_scale_input.empty()) feeds[b.loss_scale_input] = Tensor::scalar<float>(loss_scale_);
  std::vector<Tensor> in;
  for (const ValueInfo& v : b.session->inputs()) in.push_back(feeds.at(v.name));
  std::vector<Tensor> out(b.session->outputs().size());
  if (training) bind_gradients(b, state_, reset_grad_, out);
  // A gradient written straight into its parameter's tensor (not into an accumulator) is complete
  // when its step has run: the hook hears of it then.
  std::vector<int> grad_of_output;
  std::function<void(size_t)> ready;
  if (training && gradient_ready_) {
    grad_of_output.assign(out.size(), -1);
    for (size_t k = 0; k < b.grads.size(); ++k)
      if (!b.accumulators[k].defined() || out[b.grad_pos[k]].raw_data() != b.accumulators[k].raw_data())
        grad_of_output[b.grad_pos[k]] = static_cast<int>(k);
    ready = [&](size_t position) {
      if (const int k = grad_of_output[position]; k >= 0)
        gradient_ready_(b.grads[static_cast<size_t>(k)].first, out[position]);
    };
  }
  try {
    std::vector<const Tensor*> in_ptrs;
    std::vector<Tensor*> out_ptrs;
    in_ptrs.reserve(in.size());
    out_ptrs.reserve(out.size());
    for (const Tensor& t : in) in_ptrs.push_back(&t);
    for (Tensor& t : out) out_ptrs.push_back(&t);
    b.session->run_with_binding(in_ptrs, out_ptrs, ready);
  } catch (Error& e) {
    e.add_context(fmt::format("{}: ", b.where()));
    throw;
  }
  if (training) {
    for (size_t k = 0; k < b.grads.size(); ++k) {
      Tensor& grad = state_.parameter(b.grads[k].first).grad();
      if (b.accumulators[k].defined() && out[b.grad_pos[k]].raw_data() == b.accumulators[k].raw_data()) {
        add_into(grad, b.accumulators[k]);
        if (gradient_ready_) gradient_ready_(b.grads[k].first, grad);
      } else {
        grad = out[b.grad_pos[k]];  // the gradient tensor itself, or a new one
      }
    }
    reset_grad_ = false;
    for (size_t k = 0; k < b.updates.size(); ++k)
      state_.parameter(b.updates[k].first).data().copy_from(out[b.update_pos[k]]);
  }
  std::vector<Tensor> result;
  for (size_t pos : b.user_output_pos) result.push_back(std::move(out[pos]));
  return result;
}

PlanStats Module::plan(const std::vector<Tensor>& inputs, bool training) {
  const std::lock_guard lock(mutex_);
  if (!training && !graphs_->eval) throw InvalidArgument("plan(training=false) needs an eval model");
  BoundModel& b = training ? graphs_->train : *graphs_->eval;
  if (inputs.size() != b.user_inputs.size())
    throw InvalidArgument(
        fmt::format("the {} takes {} inputs, but {} were given", b.where(), b.user_inputs.size(), inputs.size()));
  std::map<std::string, TensorMeta> metas;
  for (size_t i = 0; i < inputs.size(); ++i) metas[b.user_inputs[i]] = TensorMeta::of(inputs[i]);
  for (const auto& p : b.params) {
    const Parameter& param = state_.parameter(p);
    metas[p] = TensorMeta{param.dtype(), param.shape(), false, Tensor()};
  }
  if (!b.loss_scale_input.empty()) metas[b.loss_scale_input] = TensorMeta{DType::Float32, {}, false, Tensor()};
  // A training step binds every gradient output (bind_gradients): the plan it runs.
  std::set<std::string> bound;
  if (training)
    for (const auto& [param, grad] : b.grads) bound.insert(grad);
  try {
    return b.session->plan_shapes(metas, bound);
  } catch (Error& e) {
    e.add_context(fmt::format("{}: ", b.where()));
    throw;
  }
}

uint64_t Module::training_run_count() const { return graphs_->train.session->run_count(); }
size_t Module::training_peak_bytes() const {
  const Session& s = *graphs_->train.session;
  return s.has_plan() ? s.last_plan_stats().peak_bytes : 0;
}
void Module::set_training_run_count(uint64_t runs) { graphs_->train.session->set_run_count(runs); }

int64_t Module::get_parameters_size(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& p : param_names_) {
    const Parameter& param = state_.parameter(p);
    if (!trainable_only || param.requires_grad()) n += numel(param.shape());
  }
  return n;
}

Tensor Module::get_contiguous_parameters(bool trainable_only) const {
  Tensor flat = Tensor::empty(DType::Float32, {get_parameters_size(trainable_only)});
  int64_t offset = 0;
  for (const auto& p : param_names_) {
    const Parameter& param = state_.parameter(p);
    if (trainable_only && !param.requires_grad()) continue;
    if (param.dtype() != DType::Float32)
      throw TypeError(
          fmt::format("get_contiguous_parameters: parameter '{}' is {}; only float32 parameters can be "
                      "flattened into one buffer",
                      p, dtype_name(param.dtype())));
    const Tensor& data = param.data();
    Tensor::wrap(flat.data<float>() + offset, DType::Float32, param.shape()).copy_from(data);
    offset += data.numel();
  }
  return flat;
}

void Module::copy_buffer_to_parameters(const Tensor& buffer, bool trainable_only) {
  const std::lock_guard lock(mutex_);
  const int64_t size = get_parameters_size(trainable_only);
  if (buffer.dtype() != DType::Float32)
    throw TypeError(fmt::format("copy_buffer_to_parameters: the buffer is {}; expected float32", buffer.describe()));
  if (buffer.numel() != size)
    throw ShapeError(fmt::format("copy_buffer_to_parameters: the buffer has {} elements but the {} parameters have {}",
                                 buffer.numel(), trainable_only ? "trainable" : "", size));
  const Tensor flat = buffer.contiguous();
  int64_t offset = 0;
  for (const auto& p : param_names_) {
    Parameter& param = state_.parameter(p);
    if (trainable_only && !param.requires_grad()) continue;
    if (param.dtype() != DType::Float32)
      throw TypeError(
          fmt::format("copy_buffer_to_parameters: parameter '{}' is {}; only float32 parameters can be "
                      "filled from one buffer",
                      p, dtype_name(param.dtype())));
    const float* src = flat.data<float>() + offset;
    param.set_data(Tensor::wrap(const_cast<float*>(src), DType::Float32, param.shape()));
    offset += numel(param.shape());
  }
}

std::vector<std::string> Module::input_names(bool training) const {
  if (training) return graphs_->train.user_inputs;
  if (!graphs_->eval) throw InvalidArgument("input_names(training=false): the Module has no eval model");
  return graphs_->eval->user_inputs;
}

void Module::set_loss_scale(float scale) {
  if (!(scale > 0) || !std::isfinite(scale))
    throw InvalidArgument(fmt::format("set_loss_scale: the loss scale must be finite and > 0, got {}", scale));
  const std::lock_guard lock(mutex_);
  loss_scale_ = scale;
}

bool Module::scales_loss() const { return !graphs_->train.loss_scale_input.empty(); }

std::string Module::mixed_precision() const {
  const auto& meta = graphs_->train.session->model().metadata;
  const auto it = meta.find(kMixedPrecisionKey);
  return it == meta.end() ? std::string() : it->second;
}

std::vector<std::string> Module::output_names(bool training) const {
  if (training) return graphs_->train.user_outputs;
  if (!graphs_->eval) throw InvalidArgument("output_names(training=false): the Module has no eval model");
  return graphs_->eval->user_outputs;
}

void Module::set_batch_norm_sync(std::function<void(double* values, size_t n)> reduce) {
  const std::lock_guard lock(mutex_);
  BoundModel& b = graphs_->train;
  Model m = b.session->model();
  size_t marked = 0;
  for (Node& n : m.graph.nodes) {
    // The Session's layout pass (ir/fusion.h) may have made them their channels-last forms.
    const bool kiln = n.domain == kKilnDomain;
    const bool bn = (n.domain.empty() && n.op_type == "BatchNormalization") ||
                    (kiln && n.op_type == "BatchNormalizationChannelsLast");
    const bool grad =
        kiln && (n.op_type == "BatchNormalizationGrad" || n.op_type == "BatchNormalizationGradChannelsLast");
    if (!bn && !grad) continue;
    n.attrs["sync_statistics"] = Attribute::of_int(reduce ? 1 : 0);
    ++marked;
  }
  set_statistics_reduce(std::move(reduce));
  if (marked == 0) return;
  const uint64_t runs = b.session->run_count();
  SessionOptions o = options_;
  o.fuse = false;  // the model is the session's, already fused
  b.session = std::make_unique<Session>(std::move(m), o);
  b.session->set_run_count(runs);
}

void Module::set_eval_precision(DType low) {
  if (!graphs_->eval)
    throw InvalidArgument("set_eval_precision needs the eval model: construct the Module with eval_model_path");
  if (low != DType::Float32 && low != DType::BFloat16 && low != DType::Float16)
    throw InvalidArgument(fmt::format("set_eval_precision: {} is not float32, bfloat16 or float16", dtype_name(low)));
  BoundModel& e = *graphs_->eval;
  const std::lock_guard lock(mutex_);
  if (low == eval_precision_) return;
  Model m = e.source;
  if (low != DType::Float32) {
    strip_autocast(m);  // a mixed-precision eval model goes whole into 16 bits too
    infer_shapes(m);
    to_low_precision(m, low);
  }
  e.session = std::make_unique<Session>(std::move(m), options_);
  eval_precision_ = low;
}

void Module::export_model_for_inferencing(const std::string& path, const std::vector<std::string>& graph_output_names,
                                          DType precision) const {
  if (precision != DType::Float32 && precision != DType::BFloat16 && precision != DType::Float16)
    throw InvalidArgument(fmt::format("export_model_for_inferencing: precision {} is not float32, bfloat16 or float16",
                                      dtype_name(precision)));
  if (!graphs_->eval)
    throw InvalidArgument(
        "export_model_for_inferencing needs the eval model: construct the Module with eval_model_path");
  if (graph_output_names.empty()) throw InvalidArgument("export_model_for_inferencing: no output names given");
  const BoundModel& e = *graphs_->eval;
  Model m = e.source;
  strip_autocast(m);  // a mixed-precision eval model exports in float32
  Graph& g = m.graph;
  std::set<std::string> values;
  for (const auto& v : g.inputs) values.insert(v.name);
  for (const auto& [n, t] : g.initializers) values.insert(n);
  for (const Node& n : g.nodes) values.insert(n.outputs.begin(), n.outputs.end());
  std::vector<ValueInfo> outputs;
  for (const auto& name : graph_output_names) {
    if (!values.count(name))
      throw InvalidArgument(
          fmt::format("export_model_for_inferencing: '{}' is not a value of the eval model '{}'", name, e.path));
    ValueInfo v;
    v.name = name;
    if (const ValueInfo* d = find_declared(g, name)) v = *d;
    outputs.push_back(v);
  }
  g.outputs = outputs;
  // Parameters become initializers holding their current values.
  const std::set<std::string> params(e.params.begin(), e.params.end());
  std::vector<ValueInfo> inputs;
  for (const auto& v : g.inputs) {
    if (!params.count(v.name)) {
      inputs.push_back(v);
      continue;
    }
    const Parameter& p = state_.parameter(v.name);
    if (!p.has_data())
      throw InvalidArgument(
          fmt::format("export_model_for_inferencing: parameter '{}' has no data (nominal checkpoint)", v.name));
    g.initializers[v.name] = p.data().clone();
  }
  g.inputs = inputs;
  to_inference_mode(g);
  prune(g);
  if (const Node* n = first_non_standard_node(g))
    throw Unsupported(fmt::format("export_model_for_inferencing: {} of domain '{}' is not a standard ONNX op",
                                  n->label(), n->domain));
  for (auto it = m.metadata.begin(); it != m.metadata.end();)
    it = it->first.rfind("kiln.", 0) == 0 ? m.metadata.erase(it) : std::next(it);
  m.opsets.erase("ai.kiln");
  g.name = "inference";
  infer_shapes(m);
  for (ValueInfo& v : g.outputs) {
    if (v.has_type) continue;
    for (const auto& vi : g.value_info)
      if (vi.name == v.name) v = vi;
    if (!v.has_type)
      throw Unsupported(
          fmt::format("export_model_for_inferencing: the type of output '{}' cannot be inferred", v.name));
  }
  if (precision == DType::Float16) {
    to_low_precision(m, precision);
    m.metadata.erase(kFullPrecisionKey);
  } else if (precision == DType::BFloat16) {
    store_initializers_in(m, precision);
  }
  save_model(m, path);
}

}  // namespace kiln::training
