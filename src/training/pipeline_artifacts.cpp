// The stages of a pipeline (kiln/pipeline.h): layers found from names, the graph cut between them,
// and each stage's artifacts.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "ir/graph_editor.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/pipeline.h"
#include "training/artifacts_internal.h"
#include "training/inference_mode.h"

namespace kiln::training {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// "transformer.h.3.attn/Split_0" -> ("transformer.h", 3); "/bert/encoder/layer.3/..." ->
// ("/bert/encoder/layer", 3): the first separator-delimited run of digits.
std::optional<std::pair<std::string, int64_t>> numbered_block(const std::string& name) {
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] != '.' && name[i] != '/') continue;
    size_t j = i + 1;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j == i + 1 || j - i > 7) continue;
    if (j < name.size() && name[j] != '.' && name[j] != '/') continue;
    if (i == 0) continue;
    return std::pair{name.substr(0, i), std::stoll(name.substr(i + 1, j - i - 1))};
  }
  return std::nullopt;
}

// The block of a node: from its name's scope, else from the parameters it reads.
std::optional<std::pair<std::string, int64_t>> block_of(const Node& n, const Graph& g) {
  const auto slash = n.name.rfind('/');
  if (slash != std::string::npos && slash > 0)
    if (auto b = numbered_block(n.name.substr(0, slash + 1))) return b;
  for (const auto& in : n.inputs)
    if (g.initializers.count(in))
      if (auto b = numbered_block(in)) return b;
  return std::nullopt;
}

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

// The stage graphs' shared reading of the forward + loss model.
struct Cut {
  const Graph& g;
  std::vector<int> stage_of;               // per node (-1: a Constant, copied where read)
  std::map<std::string, size_t> producer;  // value -> node index
  std::map<std::string, int> last_reader;  // value -> last stage that reads it (graph outputs: the last)
  std::set<std::string> param_dependent;   // values that depend on a trainable parameter
  int stages = 1;

  int produced_at(const std::string& v) const {
    const auto it = producer.find(v);
    return it == producer.end() ? -1 : stage_of[it->second];
  }
  // Values crossing from stage s to s + 1, in production order.
  std::vector<std::string> crossing(int s) const {
    std::vector<std::pair<size_t, std::string>> out;
    for (const auto& [v, last] : last_reader) {
      const int p = produced_at(v);
      if (p >= 0 && p <= s && s < last) out.emplace_back(producer.at(v), v);
    }
    std::sort(out.begin(), out.end());
    std::vector<std::string> names;
    names.reserve(out.size());
    for (auto& [pos, v] : out) names.push_back(v);
    return names;
  }
};

Cut cut_model(const Graph& g, const std::vector<size_t>& cut_after, const std::set<std::string>& trainable) {
  Cut c{g, {}, {}, {}, {}, static_cast<int>(cut_after.size()) + 1};
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    int s = 0;
    while (s < static_cast<int>(cut_after.size()) && i > cut_after[static_cast<size_t>(s)]) ++s;
    c.stage_of.push_back(n.op_type == "Constant" && n.inputs.empty() ? -1 : s);
    for (const auto& o : n.outputs)
      if (!o.empty()) c.producer[o] = i;
    bool dep = false;
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      if (!c.producer.count(in) && !g.initializers.count(in) && !g.find_value_info(in)) {
        bool is_input = false;
        for (const auto& v : g.inputs) is_input = is_input || v.name == in;
        if (!is_input)
          throw InvalidModel(
              fmt::format("pipeline: {} reads '{}' before any node writes it (the graph's nodes must "
                          "be in topological order)",
                          n.label(), in));
      }
      dep = dep || trainable.count(in) || c.param_dependent.count(in);
    }
    if (dep)
      for (const auto& o : n.outputs) c.param_dependent.insert(o);
    if (c.stage_of.back() < 0) continue;
    for (const auto& in : n.inputs)
      if (!in.empty()) c.last_reader[in] = std::max(c.last_reader[in], s);
  }
  for (const auto& o : g.outputs) c.last_reader[o.name] = c.stages - 1;
  return c;
}

ValueInfo info_of(const Graph& g, const std::string& v) {
  if (const ValueInfo* d = find_declared(g, v); d && d->has_type) return *d;
  throw Unsupported(
      fmt::format("pipeline: the type of '{}', which crosses a stage boundary, is not known (shape "
                  "inference found none)",
                  v));
}

// The stage's forward graph: its nodes (and the Constants they read), the batch columns and received
// values as inputs, the sent values (or, on the last stage, the model's outputs) as outputs.
Model stage_forward(const Model& base, const Cut& c, int s, StageInfo& info, std::vector<ValueInfo>& received_infos,
                    std::vector<std::string>& params) {
  const Graph& g = base.graph;
  Model m = base;
  Graph& sg = m.graph;
  sg.nodes.clear();
  sg.inputs.clear();
  sg.outputs.clear();
  sg.initializers.clear();
  sg.value_info.clear();
  std::set<std::string> read;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (c.stage_of[i] == s)
      for (const auto& in : g.nodes[i].inputs) read.insert(in);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const bool constant_read = c.stage_of[i] < 0 && std::any_of(n.outputs.begin(), n.outputs.end(),
                                                                [&](const auto& o) { return read.count(o); });
    if (c.stage_of[i] == s || constant_read) sg.nodes.push_back(n);
  }
  for (const auto& v : g.inputs)
    if (read.count(v.name)) {
      sg.inputs.push_back(v);
      info.model_inputs.push_back(v.name);
    }
  if (s > 0)
    for (const auto& v : c.crossing(s - 1)) {
      sg.inputs.push_back(info_of(g, v));
      received_infos.push_back(info_of(g, v));
      info.received.push_back(v);
      info.received_differentiable.push_back(c.param_dependent.count(v) && is_float(info_of(g, v).dtype));
    }
  for (const auto& [name, t] : g.initializers)
    if (read.count(name)) {
      sg.initializers[name] = t;
      params.push_back(name);
    }
  if (s + 1 == c.stages) {
    sg.outputs = g.outputs;
  } else {
    for (const auto& v : c.crossing(s)) {
      ValueInfo out = info_of(g, v);
      if (c.produced_at(v) < s) {  // received and passed on: an Identity under a name of its own
        Node id;
        id.op_type = "Identity";
        id.name = fmt::format("kiln.pipeline/relay/{}", v);
        id.inputs = {v};
        id.outputs = {fmt::format("kiln.pipeline/relay/{}", v)};
        out.name = id.outputs[0];
        sg.nodes.push_back(std::move(id));
      }
      sg.outputs.push_back(out);
      info.sent.push_back(out.name);
      info.sent_differentiable.push_back(c.param_dependent.count(v) && is_float(out.dtype));
    }
  }
  return m;
}

// The stage's training input: the forward with, for a stage before the last, the loss
// sum_v sum(v * dv) over the differentiable sent values (dv inputs named "kiln.pipeline/dy/<v>").
std::string add_vjp_loss(Model& m, const StageInfo& info) {
  GraphEditor edit(m);
  std::vector<std::string> terms;
  for (size_t k = 0; k < info.sent.size(); ++k) {
    if (!info.sent_differentiable[k]) continue;
    const ValueInfo out = *find_declared(m.graph, info.sent[k]);
    ValueInfo dy = out;
    dy.name = "kiln.pipeline/dy/" + info.sent[k];
    m.graph.inputs.push_back(dy);
    const std::string prod = edit.op("Mul", {info.sent[k], dy.name}, {}, "kiln.pipeline/vjp");
    terms.push_back(edit.op("ReduceSum", {prod}, {{"keepdims", Attribute::of_int(0)}}, "kiln.pipeline/vjp_sum"));
  }
  if (terms.empty())
    throw Unsupported(
        fmt::format("pipeline: stage {} sends no value that depends on a trained parameter, so no "
                    "gradient flows back through it",
                    info.index));
  std::string loss = terms.size() == 1 ? terms[0] : edit.op("Sum", terms, {}, "kiln.pipeline/vjp_loss");
  ValueInfo l;
  l.name = loss;
  l.dtype = find_declared(m.graph, info.sent[0])->dtype;
  l.has_type = l.has_shape = true;
  m.graph.outputs = {l};
  return loss;
}

json list_json(const std::vector<std::string>& v) { return json(v); }

void remove_from_list_metadata(Model& m, const std::set<std::string>& names) {
  auto it = m.metadata.find("kiln.parameters");
  if (it == m.metadata.end()) return;
  json list = json::parse(it->second);
  json kept = json::array();
  for (const auto& n : list)
    if (!names.count(n.get<std::string>())) kept.push_back(n);
  it->second = kept.dump();
}

// The received values were initializers only so that the builder differentiates them: they go back
// to being inputs of their real (dynamic) shapes, outside the checkpoint and the optimizer.
void unmark_received(Artifacts& a, const std::vector<ValueInfo>& received) {
  std::set<std::string> names;
  for (const auto& v : received) names.insert(v.name);
  auto retype = [&](std::vector<ValueInfo>& values, const std::string& suffix) {
    for (auto& v : values)
      for (const auto& r : received)
        if (v.name == r.name + suffix) v.dims = r.dims, v.has_shape = r.has_shape;
  };
  for (Model* m : {&a.training_model, &a.eval_model}) {
    remove_from_list_metadata(*m, names);
    retype(m->graph.inputs, "");
    retype(m->graph.outputs, "_grad");
    m->graph.value_info.clear();
  }
  CheckpointState kept;
  for (const auto& [name, p] : a.checkpoint.parameters())
    if (!names.count(name)) kept.add_parameter(p);
  a.checkpoint = std::move(kept);
  if (a.optimizer_model) {
    Graph& og = a.optimizer_model->graph;
    std::erase_if(og.nodes, [&](const Node& n) { return names.count(n.inputs.at(2)); });
    std::set<std::string> used;
    for (const auto& n : og.nodes) {
      used.insert(n.inputs.begin(), n.inputs.end());
      used.insert(n.outputs.begin(), n.outputs.end());
    }
    std::erase_if(og.inputs, [&](const ValueInfo& v) { return !used.count(v.name); });
    std::erase_if(og.outputs, [&](const ValueInfo& v) { return !used.count(v.name); });
  }
}

// A model with the stage's parameters as inputs (the Module's and the forward pass's layout).
Model with_parameter_inputs(Model m, const std::vector<std::string>& params, const char* artifact) {
  initializers_to_inputs(m.graph, params);
  m.metadata["kiln.artifact"] = artifact;
  m.metadata["kiln.parameters"] = list_json(params).dump();
  return m;
}

json info_json(const StageInfo& s) {
  return {{"index", s.index},
          {"stages", s.stages},
          {"layers", s.layers},
          {"model_inputs", s.model_inputs},
          {"received", s.received},
          {"received_differentiable", s.received_differentiable},
          {"sent", s.sent},
          {"sent_differentiable", s.sent_differentiable},
          {"shared", [&] {
             json a = json::array();
             for (const auto& x : s.shared) a.push_back({{"name", x.name}, {"numel", x.numel}, {"stages", x.stages}});
             return a;
           }()}};
}

// The stage's parameters that the checkpoint holds, in the order the stage reads them.
std::vector<std::string> checkpoint_order(const Artifacts& a, const std::vector<std::string>& params) {
  std::vector<std::string> ordered;
  for (const auto& p : params)
    if (a.checkpoint.parameters().count(p)) ordered.push_back(p);
  return ordered;
}

// One stage while its artifacts are made.
struct Stage {
  const StageInfo& info;
  const Model& forward;                    // stage_forward()'s
  const std::vector<ValueInfo>& received;  // the received values' declared types
  const std::vector<std::string>& params;  // the initializers it reads
  bool last() const { return info.index + 1 == info.stages; }
};

// The stage's training model (the vector-Jacobian loss before the last stage; the received values
// differentiated through placeholder initializers, then inputs again), eval model, optimizer model
// and checkpoint.
Artifacts stage_artifacts(const LossModel& lm, const Stage& st, const ParameterSelection& sel,
                          const std::set<std::string>& trainable, const ArtifactOptions& options) {
  const StageInfo& info = st.info;
  Model train = st.forward;
  ArtifactOptions o = options;
  o.loss = LossType::None;
  o.additional_output_names.clear();
  if (!st.last()) o.lm_head_chunks = 1;  // the head is the last stage's
  if (st.last()) {
    o.loss_input_names = {lm.loss};
    for (size_t k = 1; k < lm.model.graph.outputs.size(); ++k)
      o.additional_output_names.push_back(lm.model.graph.outputs[k].name);
  } else {
    o.loss_input_names = {add_vjp_loss(train, info)};
  }
  o.requires_grad.clear();
  for (const auto& p : st.params)
    if (trainable.count(p)) o.requires_grad.push_back(p);
  std::vector<ValueInfo> differentiable;
  for (size_t k = 0; k < info.received.size(); ++k) {
    if (!info.received_differentiable[k]) continue;
    Shape placeholder;  // the static dims kept, dynamic ones 1: shape inference stays consistent
    for (const Dim& d : st.received[k].dims) placeholder.push_back(d.value > 0 ? d.value : 1);
    train.graph.initializers[info.received[k]] = Tensor::zeros(st.received[k].dtype, placeholder);
    std::erase_if(train.graph.inputs, [&](const ValueInfo& v) { return v.name == info.received[k]; });
    o.requires_grad.push_back(info.received[k]);
    differentiable.push_back(st.received[k]);
  }
  o.frozen_params.clear();
  for (const auto& p : st.params)
    if (std::find(sel.frozen.begin(), sel.frozen.end(), p) != sel.frozen.end()) o.frozen_params.push_back(p);
  Artifacts a = build_artifacts(train, o);
  unmark_received(a, differentiable);
  if (!st.last()) {  // the eval model: the stage's forward in inference mode, its parameters as inputs
    Model eval = st.forward;
    to_inference_mode(eval.graph);
    a.eval_model = with_parameter_inputs(std::move(eval), checkpoint_order(a, st.params), "eval");
  }
  return a;
}

void write_stage(const Artifacts& a, const Stage& st, const std::string& folder) {
  fs::create_directories(folder);
  save_model(a.training_model, (fs::path(folder) / training_model_file()).string());
  save_model(a.eval_model, (fs::path(folder) / eval_model_file()).string());
  if (a.optimizer_model) save_model(*a.optimizer_model, (fs::path(folder) / optimizer_model_file()).string());
  CheckpointState::save_checkpoint(a.checkpoint, (fs::path(folder) / checkpoint_file()).string());
  if (!st.last())
    save_model(with_parameter_inputs(st.forward, checkpoint_order(a, st.params), "forward"),
               (fs::path(folder) / "forward_model.onnx").string());
  write_file_atomically((fs::path(folder) / "stage.json").string(), info_json(st.info).dump(2) + "\n");
}

}  // namespace

std::vector<ModelLayer> find_layers(const Model& model) {
  const Graph& g = model.graph;
  std::map<std::string, std::map<int64_t, ModelLayer>> stems;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto b = block_of(g.nodes[i], g);
    if (!b) continue;
    auto [it, fresh] =
        stems[b->first].try_emplace(b->second, ModelLayer{fmt::format("{}.{}", b->first, b->second), i, i});
    if (!fresh) it->second.last = i;
  }
  const std::map<int64_t, ModelLayer>* best = nullptr;
  for (const auto& [stem, blocks] : stems)
    if (blocks.size() >= 2 && (best == nullptr || blocks.size() > best->size())) best = &blocks;
  if (best == nullptr)
    throw InvalidArgument(
        "pipeline: no repeated layers found in the model (node or parameter names with numbered blocks such as "
        "'encoder.layer.3' or 'h.3')");
  std::vector<ModelLayer> layers;
  for (const auto& [index, layer] : *best) {
    if (!layers.empty() && layer.first <= layers.back().last)
      throw InvalidArgument(
          fmt::format("pipeline: layers '{}' and '{}' interleave in the graph; stages need layers "
                      "that follow one another",
                      layers.back().name, layer.name));
    layers.push_back(layer);
  }
  return layers;
}

namespace {

// Every stage holds at least one layer, and the stages hold them all.
void check_layers_per_stage(const std::vector<int64_t>& layers_per_stage, const std::vector<ModelLayer>& layers) {
  int64_t total = 0;
  for (int64_t n : layers_per_stage) {
    if (n < 1)
      throw InvalidArgument(
          fmt::format("pipeline: a stage must hold at least one layer, got [{}]", fmt::join(layers_per_stage, ", ")));
    total += n;
  }
  if (layers_per_stage.size() < 2 || total != static_cast<int64_t>(layers.size()))
    throw InvalidArgument(
        fmt::format("pipeline: layers per stage [{}] place {} layers in {} stages; the model has {} "
                    "layers ({} ... {})",
                    fmt::join(layers_per_stage, ", "), total, layers_per_stage.size(), layers.size(),
                    layers.front().name, layers.back().name));
}

}  // namespace

std::string stage_directory(const std::string& dir, int stage) {
  return (fs::path(dir) / fmt::format("stage-{}", stage)).string();
}

StageInfo load_stage_info(const std::string& stage_dir) {
  const std::string path = (fs::path(stage_dir) / "stage.json").string();
  json j;
  try {
    j = json::parse(read_file_bytes(path, "stage description"));
    StageInfo s;
    s.index = j.at("index").get<int>();
    s.stages = j.at("stages").get<int>();
    s.layers = j.at("layers").get<std::vector<std::string>>();
    s.model_inputs = j.at("model_inputs").get<std::vector<std::string>>();
    s.received = j.at("received").get<std::vector<std::string>>();
    s.received_differentiable = j.at("received_differentiable").get<std::vector<bool>>();
    s.sent = j.at("sent").get<std::vector<std::string>>();
    s.sent_differentiable = j.at("sent_differentiable").get<std::vector<bool>>();
    for (const auto& x : j.at("shared"))
      s.shared.push_back(
          {x.at("name").get<std::string>(), x.at("numel").get<int64_t>(), x.at("stages").get<std::vector<int>>()});
    return s;
  } catch (const json::exception& e) {
    throw CorruptFile(fmt::format("{}: not a stage description: {}", path, e.what()));
  }
}

std::vector<StageInfo> generate_pipeline_artifacts(const Model& forward, const ArtifactOptions& options,
                                                   const std::vector<int64_t>& layers_per_stage, const std::string& dir,
                                                   std::optional<int> only_stage) {
  if (options.mixed_precision != DType::Float32)
    throw Unsupported("pipeline stages train in float32 for now (no bf16 / fp16 mixed precision)");
  const std::vector<ModelLayer> layers = find_layers(forward);
  check_layers_per_stage(layers_per_stage, layers);
  LossModel lm = forward_with_loss(forward, options);
  const Graph& g = lm.model.graph;
  const ParameterSelection sel =
      select_parameters(lm.model, lm.loss, options.requires_grad, frozen_parameters(lm.model, options));
  const std::set<std::string> trainable(sel.trainable.begin(), sel.trainable.end());
  std::vector<size_t> cut_after;
  std::vector<std::vector<std::string>> stage_layers(layers_per_stage.size());
  size_t next = 0;
  for (size_t s = 0; s < layers_per_stage.size(); ++s) {
    for (int64_t k = 0; k < layers_per_stage[s]; ++k) stage_layers[s].push_back(layers[next++].name);
    if (s + 1 < layers_per_stage.size()) cut_after.push_back(layers[next - 1].last);
  }
  const Cut cut = cut_model(g, cut_after, trainable);

  std::vector<StageInfo> infos(layers_per_stage.size());
  std::vector<Model> forwards;
  std::vector<std::vector<ValueInfo>> received(infos.size());
  std::vector<std::vector<std::string>> params(infos.size());
  std::map<std::string, std::vector<int>> holders;
  for (int s = 0; s < cut.stages; ++s) {
    infos[s].index = s;
    infos[s].stages = cut.stages;
    infos[s].layers = stage_layers[static_cast<size_t>(s)];
    forwards.push_back(stage_forward(lm.model, cut, s, infos[s], received[s], params[s]));
    for (const auto& p : params[s]) holders[p].push_back(s);
  }
  std::vector<StageInfo::Shared> shared;
  for (const auto& [p, stages] : holders)
    if (stages.size() > 1 && trainable.count(p)) shared.push_back({p, g.initializers.at(p).numel(), stages});
  for (int s = 0; s < cut.stages; ++s) {
    infos[s].shared = shared;
    if (only_stage && *only_stage != s) continue;
    const Stage stage{infos[s], forwards[s], received[s], params[s]};
    write_stage(stage_artifacts(lm, stage, sel, trainable, options), stage, stage_directory(dir, s));
  }
  return infos;
}

}  // namespace kiln::training
