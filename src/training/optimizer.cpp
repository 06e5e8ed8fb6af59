// Optimizer: runs the optimizer model through a Session, like any graph, with each update node's
// outputs bound to the very tensors they replace (parameter, optimizer slots): a step reads and
// writes every element once and allocates nothing. The update kernels are elementwise and declare
// that they may write over those inputs (Kernel::output_may_overwrite), which the Session checks.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "kernels/node_inference.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "kiln/training.h"
#include "training/optimizer_model.h"

namespace kiln::training {

namespace {

using Shard = std::map<std::string, std::pair<int64_t, int64_t>>;  // parameter -> elements [begin, end)

struct BoundUpdate {
  size_t node = 0;
  std::string param;
  std::vector<NodeSlot> slots;
};

// What a graph input of the optimizer model is fed, or which tensor a graph output is written to.
struct Binding {
  enum class Kind { LearningRate, Step, Data, Grad, Slot };
  Kind kind = Kind::Data;
  size_t update = 0;  // index into the updates, for Data, Grad and Slot
  size_t slot = 0;    // index into the update's slots
  bool operator==(const Binding& o) const { return kind == o.kind && update == o.update && slot == o.slot; }
};

// The optimizer model shares the Module's plan cache (SessionOptions::plan_cache_dir) and nothing
// else of its options.
SessionOptions plan_cache_options(const Module& m) {
  SessionOptions o;
  o.plan_cache_dir = m.session_options().plan_cache_dir;
  return o;
}

}  // namespace

struct Optimizer::Impl {
  std::string path;
  Session session;
  Module& module;
  CheckpointState& state;
  const UpdateOp* op = nullptr;
  std::vector<BoundUpdate> updates;
  std::vector<Binding> input_bindings;   // one per graph input
  std::vector<Binding> output_bindings;  // one per graph output
  struct UpdateTensors {
    Tensor* data = nullptr;
    Tensor* grad = nullptr;
    std::vector<Tensor*> slots;
  };
  std::vector<UpdateTensors> current;  // this step's tensors of each update
  std::vector<Tensor> views;           // a shard's: each update's data and gradient ranges
  std::vector<const Tensor*> inputs;   // reused every step: no allocation once sized
  std::vector<Tensor*> outputs;
  Tensor lr = Tensor::scalar<float>(0.f);
  Tensor step = Tensor::scalar<int64_t>(0);

  std::optional<Shard> shard;  // the element ranges updated, when not every whole parameter

  Impl(const std::string& p, Module& m, std::optional<Shard> only)
      : path(p),
        session(shard_of(load_model(p), only, p), plan_cache_options(m)),
        module(m),
        state(m.state()),
        shard(std::move(only)) {}

  // The optimizer model with only the update nodes of the shard's parameters, each over its range
  // of elements (a 1-D tensor: the update ops are elementwise), and the graph inputs and outputs
  // those read and write.
  static Model shard_of(Model model, const std::optional<Shard>& only, const std::string& path) {
    if (!only) return model;
    Graph& g = model.graph;
    std::set<std::string> found, used;
    std::map<std::string, int64_t> length;  // the values of a range's update, and its length
    std::vector<Node> kept;
    for (Node& n : g.nodes) {
      if (n.inputs.size() <= 2) continue;  // not an update node
      const auto it = only->find(n.inputs[2]);
      if (it == only->end()) continue;
      found.insert(it->first);
      const int64_t k = it->second.second - it->second.first;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        used.insert(n.inputs[i]);
        if (i >= 2) length[n.inputs[i]] = k;
      }
      for (const auto& v : n.outputs) {
        used.insert(v);
        length[v] = k;
      }
      kept.push_back(std::move(n));
    }
    for (const auto& [p, range] : *only)
      if (!found.count(p)) throw KeyError(fmt::format("optimizer model '{}' has no update of parameter '{}'", path, p));
    g.nodes = std::move(kept);
    auto keep_used = [&](std::vector<ValueInfo>& values) {
      std::erase_if(values, [&](const ValueInfo& v) { return !used.count(v.name); });
      for (ValueInfo& v : values)
        if (const auto it = length.find(v.name); it != length.end() && v.has_shape) v.dims = {Dim{it->second, ""}};
    };
    keep_used(g.inputs);
    keep_used(g.outputs);
    return model;
  }

  // The shape an update's tensors have: the parameter's, or its range's length.
  Shape update_shape(const std::string& param) const {
    if (!shard) return state.parameter(param).shape();
    const auto& [begin, end] = shard->at(param);
    return {end - begin};
  }

  // The elements of a parameter (or its gradient) the update covers: the tensor itself, or a 1-D
  // view of the shard's range.
  Tensor range_of(const Tensor& t, const std::string& param) const {
    if (!shard) return t;
    const auto& [begin, end] = shard->at(param);
    return Tensor::view_of(t.storage(), t.byte_offset() + static_cast<size_t>(begin) * dtype_size(t.dtype()), t.dtype(),
                           {end - begin});
  }

  const Model& model() const { return session.model(); }
  std::string where() const { return fmt::format("optimizer model '{}'", path); }

  Tensor& slot(const std::string& name, const std::string& param) { return state.optimizer_state().slots[name][param]; }

  // The shape of an update's k-th slot: for the parameter (or its range's length).
  Shape slot_shape_of(const BoundUpdate& b, size_t k) const {
    return slot_shape(*op, b.slots[k].name, update_shape(b.param));
  }

  BoundUpdate bind_node(size_t i, std::set<std::string>& seen) {
    const Node& n = model().graph.nodes[i];
    const UpdateOp* u = update_op_for_node(n);
    if (u == nullptr)
      throw Unsupported(
          fmt::format("{}: {} of domain '{}' is not an update op Kiln's Optimizer runs "
                      "(ai.kiln AdamWStep, SGDStep, LambStep, AdagradStep, AdafactorStep)",
                      where(), n.label(), n.domain));
    if (op != nullptr && u != op)
      throw InvalidModel(fmt::format("{} mixes {} and {} nodes", where(), op->op_type, u->op_type));
    op = u;
    if (n.inputs.size() < kUpdateFirstSlot || n.outputs.empty())
      throw InvalidModel(fmt::format("{}: {} needs inputs (learning_rate, step, X, G, slots...)", where(), n.label()));
    BoundUpdate b;
    b.node = i;
    b.param = n.inputs[2];
    if (!state.parameters().count(b.param))
      throw KeyError(fmt::format("{} updates parameter '{}', which the checkpoint does not have", where(), b.param));
    if (!state.parameter(b.param).requires_grad())
      throw InvalidArgument(fmt::format("{} updates parameter '{}', which is not trainable", where(), b.param));
    if (!seen.insert(b.param).second)
      throw InvalidModel(fmt::format("{} updates parameter '{}' twice", where(), b.param));
    b.slots = node_slots(n, *op);
    // Output 1 + i is slot i's new value: there exactly when its input is.
    for (size_t i = 0; i + 1 < std::max(n.outputs.size(), 1 + op->slots.size()); ++i) {
      const size_t in = kUpdateFirstSlot + i;
      const bool has_in = in < n.inputs.size() && !n.inputs[in].empty();
      const bool has_out = 1 + i < n.outputs.size() && !n.outputs[1 + i].empty();
      if (i >= op->slots.size() || has_in != has_out)
        throw InvalidModel(fmt::format("{}: {} has {} outputs for its {} slots ({}); output {} {}", where(), n.label(),
                                       n.outputs.size(), b.slots.size(), fmt::join(op->slots, ", "), 1 + i,
                                       has_out ? "has no slot input" : "is missing"));
    }
    if (n.outputs[0].empty()) throw InvalidModel(fmt::format("{}: {} has no X_new output", where(), n.label()));
    return b;
  }

  void bind() {
    const Graph& g = model().graph;
    if (g.nodes.empty() && !shard) throw InvalidModel(fmt::format("{} has no update nodes", where()));
    std::set<std::string> seen;
    for (size_t i = 0; i < g.nodes.size(); ++i) updates.push_back(bind_node(i, seen));
    if (op == nullptr) {  // an empty shard: the type from the model's metadata
      const auto it = model().metadata.find(kOptimizerTypeKey);
      op = it == model().metadata.end() ? nullptr : update_op_for_type(it->second);
      if (op == nullptr)
        throw InvalidModel(fmt::format("{}: no optimizer type in its metadata ('{}')", where(), kOptimizerTypeKey));
    }
    if (shard && !op->elementwise())
      throw Unsupported(
          fmt::format("{}: {} keeps statistics over whole rows and columns of each parameter, which ZeRO's element "
                      "ranges would cut; run {} without ZeRO",
                      where(), op->type, op->type));
    if (shard && op->type == "Lamb")  // LAMB's trust ratio needs the norms of whole parameters
      for (const auto& [param, range] : *shard)
        if (range.first != 0 || range.second != numel(state.parameter(param).shape()))
          throw Unsupported(
              fmt::format("{}: LAMB scales each parameter by the ratio of its whole norms, and this optimizer holds "
                          "elements [{}, {}) of '{}' only (ZeRO shards cut parameters; LAMB runs without ZeRO)",
                          where(), range.first, range.second, param));
    for (const auto& p : module.parameter_names())
      if (state.parameter(p).requires_grad() && !seen.count(p) && (!shard || shard->count(p)))
        throw InvalidArgument(
            fmt::format("{} does not update trainable parameter '{}' (artifacts of another model?)", where(), p));
    bind_graph_values();
  }

  // Each graph input and output to the tensor it stands for, from the update nodes that read and
  // write it; the Session is then run with them by position.
  void bind_graph_values() {
    const Graph& g = model().graph;
    std::map<std::string, Binding> reads, writes;
    auto claim = [&](std::map<std::string, Binding>& map, const std::string& name, Binding b) {
      auto [it, fresh] = map.emplace(name, b);
      if (!fresh && !(it->second == b))
        throw InvalidModel(fmt::format("{}: '{}' stands for two different tensors", where(), name));
    };
    for (size_t u = 0; u < updates.size(); ++u) {
      const Node& n = g.nodes[updates[u].node];
      claim(reads, n.inputs[0], {Binding::Kind::LearningRate, 0, 0});
      claim(reads, n.inputs[1], {Binding::Kind::Step, 0, 0});
      claim(reads, n.inputs[2], {Binding::Kind::Data, u, 0});
      claim(reads, n.inputs[3], {Binding::Kind::Grad, u, 0});
      claim(writes, n.outputs[0], {Binding::Kind::Data, u, 0});
      for (size_t k = 0; k < updates[u].slots.size(); ++k) {
        const size_t at = updates[u].slots[k].position;
        claim(reads, n.inputs[kUpdateFirstSlot + at], {Binding::Kind::Slot, u, k});
        claim(writes, n.outputs[1 + at], {Binding::Kind::Slot, u, k});
      }
    }
    for (const ValueInfo& v : g.inputs) {
      auto it = reads.find(v.name);
      if (it == reads.end())
        throw InvalidModel(fmt::format("{}: graph input '{}' is not read by any update node", where(), v.name));
      input_bindings.push_back(it->second);
    }
    for (const ValueInfo& v : g.outputs) {
      auto it = writes.find(v.name);
      if (it == writes.end())
        throw InvalidModel(fmt::format("{}: graph output '{}' is not written by any update node", where(), v.name));
      output_bindings.push_back(it->second);
      writes.erase(it);
    }
    if (!writes.empty())
      throw InvalidModel(
          fmt::format("{}: '{}' is written by an update node but is not a graph output, so the "
                      "update would be lost",
                      where(), writes.begin()->first));
    if (reads.size() != g.inputs.size())
      throw InvalidModel(fmt::format("{}: the update nodes read values that are not graph inputs", where()));
  }

  void restore_or_init_state() {
    OptimizerState& s = state.optimizer_state();
    if (shard)  // another rank's slots: that rank keeps them; a whole parameter's: this range of it
      for (auto& [name, tensors] : s.slots) {
        std::erase_if(tensors, [&](const auto& kv) { return !shard->count(kv.first); });
        for (auto& [param, t] : tensors)
          if (t.defined() && t.shape() == state.parameter(param).shape() && t.is_contiguous())
            t = range_of(t, param).clone();
      }
    if (!s.empty() && s.type != op->type)
      throw InvalidArgument(
          fmt::format("the checkpoint holds {} optimizer state but {} is {}", s.type, where(), op->type));
    if (s.empty()) {
      s.type = op->type;
      s.step = 0;
      s.learning_rate = 1e-3f;
      auto it = model().metadata.find(kLearningRateKey);
      if (it != model().metadata.end()) {
        try {
          s.learning_rate = std::stof(it->second);
        } catch (const std::exception&) {
          throw InvalidModel(
              fmt::format("{}: metadata '{}' is not a number: '{}'", where(), kLearningRateKey, it->second));
        }
      }
    }
    for (const BoundUpdate& b : updates)
      for (size_t k = 0; k < b.slots.size(); ++k) {
        const std::string& name = b.slots[k].name;
        const Tensor& t = slot(name, b.param);
        const Parameter& p = state.parameter(b.param);
        const Shape shape = slot_shape_of(b, k);
        if (t.defined() && (t.dtype() != p.dtype() || t.shape() != shape))
          throw ShapeError(fmt::format("optimizer state '{}' of parameter '{}' is {} but the {} is {}{}", name, b.param,
                                       t.describe(), shard ? "shard's range" : "parameter", dtype_name(p.dtype()),
                                       kiln::to_string(shape)));
        // Zeros now, so that the state can be saved before the first step (as torch's would be
        // empty); a nominal parameter gets its slots at the first step, when it has data.
        if (!t.defined() && p.has_data()) slot(name, b.param) = Tensor::zeros(p.dtype(), shape);
      }
  }

  // Each update node against its parameter's dtype and shape, so that a model Kiln cannot run
  // fails here rather than at the first step (the Session plans at the first step).
  void check_kernels() {
    const int64_t opset = model().opset(kKilnDomain);
    for (const BoundUpdate& b : updates) {
      const Node& n = model().graph.nodes[b.node];
      const Parameter& p = state.parameter(b.param);
      const TensorMeta param_meta{p.dtype(), update_shape(b.param), false, Tensor()};
      std::vector<std::optional<TensorMeta>> metas{TensorMeta::of(lr), TensorMeta::of(step)};
      for (size_t i = 2; i < n.inputs.size(); ++i)
        metas.push_back(n.inputs[i].empty() ? std::nullopt : std::optional<TensorMeta>(param_meta));
      for (size_t k = 0; k < b.slots.size(); ++k)
        metas[kUpdateFirstSlot + b.slots[k].position]->shape = slot_shape_of(b, k);
      try {
        infer_node(n, opset, metas);
      } catch (Error& e) {
        e.add_context(fmt::format("{}: {}: ", where(), n.label()));
        throw;
      }
    }
  }

  Tensor& tensor_for(const Binding& b) {
    switch (b.kind) {
      case Binding::Kind::LearningRate:
        return lr;
      case Binding::Kind::Step:
        return step;
      case Binding::Kind::Data:
        return *current[b.update].data;
      case Binding::Kind::Grad:
        return *current[b.update].grad;
      case Binding::Kind::Slot:
        break;
    }
    return *current[b.update].slots[b.slot];
  }

  // Every update's tensors, looked up once per step; slots a nominal parameter lacked are created.
  void gather_tensors() {
    current.resize(updates.size());
    views.resize(2 * updates.size());
    auto& slots = state.optimizer_state().slots;
    for (size_t u = 0; u < updates.size(); ++u) {
      const BoundUpdate& b = updates[u];
      Parameter& p = state.parameter(b.param);
      if (!p.grad().defined())
        throw InvalidArgument(
            fmt::format("parameter '{}' has no gradient: run the Module in train mode before "
                        "Optimizer.step()",
                        b.param));
      if (!p.has_data()) throw InvalidArgument(fmt::format("parameter '{}' has no data (nominal checkpoint)", b.param));
      UpdateTensors& t = current[u];
      if (shard) {  // views of the range, made anew each step (the gradient tensor may be new)
        views[2 * u] = range_of(p.data(), b.param);
        views[2 * u + 1] = range_of(p.grad(), b.param);
        t.data = &views[2 * u];
        t.grad = &views[2 * u + 1];
      } else {
        t.data = &p.data();
        t.grad = &p.grad();
      }
      t.slots.resize(b.slots.size());
      for (size_t k = 0; k < b.slots.size(); ++k) {
        Tensor& slot_tensor = slots[b.slots[k].name][b.param];
        if (!slot_tensor.defined()) slot_tensor = Tensor::zeros(p.dtype(), slot_shape_of(b, k));
        t.slots[k] = &slot_tensor;
      }
    }
  }

  void run_step() {
    if (updates.empty()) {  // a shard without parameters (more ranks than parameters)
      state.optimizer_state().step += 1;
      return;
    }
    gather_tensors();
    OptimizerState& s = state.optimizer_state();
    lr.data<float>()[0] = s.learning_rate;
    step.data<int64_t>()[0] = s.step + 1;
    inputs.resize(input_bindings.size());
    outputs.resize(output_bindings.size());
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = &tensor_for(input_bindings[i]);
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i] = &tensor_for(output_bindings[i]);
    try {
      session.run_with_binding(inputs, outputs);
    } catch (Error& e) {
      e.add_context(where() + ": ");
      throw;
    }
    s.step += 1;
  }
};

Optimizer::Optimizer(const std::string& optimizer_model_path, Module& module)
    : impl_(std::make_unique<Impl>(optimizer_model_path, module, std::nullopt)) {
  impl_->bind();
  impl_->restore_or_init_state();
  impl_->check_kernels();
}

namespace {

Shard checked_shard(Module& module, const std::vector<ParameterRange>& ranges) {
  Shard shard;
  const std::vector<std::string>& names = module.parameter_names();
  for (const auto& r : ranges) {
    if (std::find(names.begin(), names.end(), r.name) == names.end() ||
        !module.state().parameter(r.name).requires_grad())
      throw KeyError(fmt::format("Optimizer: '{}' is not a trainable parameter of the module", r.name));
    const int64_t n = numel(module.state().parameter(r.name).shape());
    if (r.begin < 0 || r.end > n || r.begin >= r.end)
      throw InvalidArgument(
          fmt::format("Optimizer: [{}, {}) is not a non-empty range of the {} elements of parameter '{}'", r.begin,
                      r.end, n, r.name));
    if (!shard.emplace(r.name, std::pair{r.begin, r.end}).second)
      throw InvalidArgument(fmt::format("Optimizer: parameter '{}' given twice", r.name));
  }
  return shard;
}

}  // namespace

Optimizer::Optimizer(const std::string& optimizer_model_path, Module& module, const std::vector<ParameterRange>& shard)
    : impl_(std::make_unique<Impl>(optimizer_model_path, module, checked_shard(module, shard))) {
  impl_->bind();
  impl_->restore_or_init_state();
  impl_->check_kernels();
}

std::vector<ParameterRange> Optimizer::ranges() const {
  std::vector<ParameterRange> out;
  for (const BoundUpdate& b : impl_->updates) {
    const auto& p = impl_->state.parameter(b.param);
    if (impl_->shard) {
      const auto& [begin, end] = impl_->shard->at(b.param);
      out.push_back({b.param, begin, end});
    } else {
      out.push_back({b.param, 0, numel(p.shape())});
    }
  }
  return out;
}

Optimizer::~Optimizer() = default;

void Optimizer::step() { impl_->run_step(); }

PlanStats Optimizer::plan() {
  Impl& m = *impl_;
  const Graph& g = m.model().graph;
  std::map<std::string, TensorMeta> metas;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Binding& b = m.input_bindings[i];
    if (b.kind == Binding::Kind::LearningRate) {
      metas[g.inputs[i].name] = TensorMeta{DType::Float32, {}, false, Tensor()};
    } else if (b.kind == Binding::Kind::Step) {
      metas[g.inputs[i].name] = TensorMeta{DType::Int64, {}, false, Tensor()};
    } else {
      const BoundUpdate& u = m.updates[b.update];
      const Shape shape = b.kind == Binding::Kind::Slot ? m.slot_shape_of(u, b.slot) : m.update_shape(u.param);
      metas[g.inputs[i].name] = TensorMeta{m.state.parameter(u.param).dtype(), shape, false, Tensor()};
    }
  }
  // A step binds every output (each parameter's and slot's new value): the plan it runs.
  std::set<std::string> bound;
  for (const ValueInfo& v : g.outputs) bound.insert(v.name);
  return m.session.plan_shapes(metas, bound);
}

void Optimizer::set_learning_rate(float lr) {
  if (!(lr >= 0)) throw InvalidArgument(fmt::format("invalid learning rate {}", lr));
  impl_->state.optimizer_state().learning_rate = lr;
}

float Optimizer::get_learning_rate() const { return impl_->state.optimizer_state().learning_rate; }
int64_t Optimizer::step_count() const { return impl_->state.optimizer_state().step; }
const std::string& Optimizer::type() const { return impl_->op->type; }

LinearLRScheduler::LinearLRScheduler(Optimizer& optimizer, int64_t warmup_step_count, int64_t total_step_count,
                                     float initial_lr)
    : optimizer_(optimizer),
      warmup_(warmup_step_count),
      total_(total_step_count),
      initial_lr_(initial_lr),
      step_(optimizer.step_count()) {  // a resumed optimizer resumes the schedule too
  if (warmup_ < 0 || total_ < 0)
    throw InvalidArgument(
        fmt::format("LinearLRScheduler: step counts must be non-negative (warmup {}, total {})", warmup_, total_));
  optimizer_.set_learning_rate(initial_lr_ * factor(step_));
}

float LinearLRScheduler::factor(int64_t step) const {
  if (step < warmup_)
    return static_cast<float>(static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_)));
  return static_cast<float>(
      std::max(0.0, static_cast<double>(total_ - step) / static_cast<double>(std::max<int64_t>(1, total_ - warmup_))));
}

void LinearLRScheduler::step() {
  ++step_;
  optimizer_.set_learning_rate(initial_lr_ * factor(step_));
}

}  // namespace kiln::training
