// Optimizer: runs the optimizer model's update nodes directly on the CheckpointState's tensors.
// Each node's outputs are bound to the very tensors they replace (parameter, optimizer slots), so
// a step reads and writes every element once and allocates nothing; the update kernels are
// elementwise and written to be correct under that aliasing.
#include <fmt/format.h>

#include <set>

#include "kiln/autodiff.h"
#include "kiln/error.h"
#include "kiln/kernel.h"
#include "kiln/onnx_io.h"
#include "kiln/training.h"
#include "training/optimizer_model.h"

namespace kiln::training {

namespace {

struct BoundUpdate {
  size_t node = 0;
  std::string param;
  std::vector<std::string> slots;
  std::unique_ptr<Kernel> kernel;
};

}  // namespace

struct Optimizer::Impl {
  std::string path;
  Model model;
  Module& module;
  CheckpointState& state;
  const UpdateOp* op = nullptr;
  std::vector<BoundUpdate> updates;
  Tensor lr = Tensor::scalar<float>(0.f);
  Tensor step = Tensor::scalar<int64_t>(0);

  Impl(const std::string& p, Module& m) : path(p), model(load_model(p)), module(m), state(m.state()) {}

  std::string where() const { return fmt::format("optimizer model '{}'", path); }

  Tensor& slot(const std::string& name, const std::string& param) { return state.optimizer_state().slots[name][param]; }

  void bind() {
    const Graph& g = model.graph;
    if (g.nodes.empty()) throw InvalidModel(fmt::format("{} has no update nodes", where()));
    std::set<std::string> seen;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      const UpdateOp* u = update_op_for_node(n);
      if (u == nullptr)
        throw Unsupported(fmt::format("{}: {} of domain '{}' is not an update op Kiln's Optimizer runs "
                                      "(ai.kiln AdamWStep, SGDStep)", where(), n.label(), n.domain));
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
      if (n.outputs.size() != 1 + b.slots.size())
        throw InvalidModel(fmt::format("{}: {} has {} outputs; expected {}", where(), n.label(), n.outputs.size(),
                                       1 + b.slots.size()));
      updates.push_back(std::move(b));
    }
    for (const auto& p : module.parameter_names())
      if (state.parameter(p).requires_grad() && !seen.count(p))
        throw InvalidArgument(fmt::format("{} does not update trainable parameter '{}' (artifacts of another model?)",
                                          where(), p));
  }

  void restore_or_init_state() {
    OptimizerState& s = state.optimizer_state();
    if (!s.empty() && s.type != op->type)
      throw InvalidArgument(fmt::format("the checkpoint holds {} optimizer state but {} is {}", s.type, where(),
                                        op->type));
    if (s.empty()) {
      s.type = op->type;
      s.step = 0;
      s.learning_rate = 1e-3f;
      auto it = model.metadata.find(kLearningRateKey);
      if (it != model.metadata.end()) {
        try {
          s.learning_rate = std::stof(it->second);
        } catch (const std::exception&) {
          throw InvalidModel(fmt::format("{}: metadata '{}' is not a number: '{}'", where(), kLearningRateKey,
                                         it->second));
        }
      }
    }
    for (const BoundUpdate& b : updates)
      for (const auto& name : b.slots) {
        const Tensor& t = slot(name, b.param);
        const Parameter& p = state.parameter(b.param);
        if (t.defined() && (t.dtype() != p.dtype() || t.shape() != p.shape()))
          throw ShapeError(fmt::format("optimizer state '{}' of parameter '{}' is {} but the parameter is {}{}", name,
                                       b.param, t.describe(), dtype_name(p.dtype()), kiln::to_string(p.shape())));
        // Zeros now, so that the state can be saved before the first step (as torch's would be
        // empty); a nominal parameter gets its slots at the first step, when it has data.
        if (!t.defined() && p.has_data()) slot(name, b.param) = Tensor::zeros(p.dtype(), p.shape());
      }
  }

  void prepare_kernels() {
    const int64_t opset = model.opset(kKilnDomain);
    for (BoundUpdate& b : updates) {
      const Node& n = model.graph.nodes[b.node];
      const Parameter& p = state.parameter(b.param);
      InferContext ctx{n, opset, {}};
      std::vector<std::optional<DType>> dtypes;
      const TensorMeta param_meta{p.dtype(), p.shape(), false, Tensor()};
      ctx.inputs.push_back(TensorMeta::of(lr));
      ctx.inputs.push_back(TensorMeta::of(step));
      for (size_t i = 2; i < n.inputs.size(); ++i)
        ctx.inputs.push_back(n.inputs[i].empty() ? std::nullopt : std::optional<TensorMeta>(param_meta));
      for (const auto& in : ctx.inputs) dtypes.push_back(in ? std::optional<DType>(in->dtype) : std::nullopt);
      try {
        b.kernel = KernelRegistry::global().resolve_node(n, opset, dtypes).create(n);
        const std::vector<TensorMeta> outs = b.kernel->infer(ctx);
        b.kernel->prepare(ctx, outs);
      } catch (Error& e) {
        e.add_context(fmt::format("{}: {}: ", where(), n.label()));
        throw;
      }
    }
  }

  void run_step() {
    for (const BoundUpdate& b : updates) {
      const Parameter& p = state.parameter(b.param);
      if (!p.grad().defined())
        throw InvalidArgument(fmt::format("parameter '{}' has no gradient: run the Module in train mode before "
                                          "Optimizer.step()", b.param));
      if (!p.has_data()) throw InvalidArgument(fmt::format("parameter '{}' has no data (nominal checkpoint)", b.param));
    }
    OptimizerState& s = state.optimizer_state();
    lr.data<float>()[0] = s.learning_rate;
    step.data<int64_t>()[0] = s.step + 1;
    for (BoundUpdate& b : updates) {
      Parameter& p = state.parameter(b.param);
      const Node& n = model.graph.nodes[b.node];
      ComputeContext ctx{n, {&lr, &step, &p.data(), &p.grad()}, {&p.data()}};
      for (const auto& name : b.slots) {
        Tensor& t = slot(name, b.param);
        if (!t.defined()) t = Tensor::zeros(p.dtype(), p.shape());
        ctx.inputs.push_back(&t);
        ctx.outputs.push_back(&t);
      }
      try {
        b.kernel->compute(ctx);
      } catch (Error& e) {
        e.add_context(fmt::format("{}: {}: ", where(), n.label()));
        throw;
      }
    }
    s.step += 1;
  }
};

Optimizer::Optimizer(const std::string& optimizer_model_path, Module& module)
    : impl_(std::make_unique<Impl>(optimizer_model_path, module)) {
  impl_->bind();
  impl_->restore_or_init_state();
  impl_->prepare_kernels();
}

Optimizer::~Optimizer() = default;

void Optimizer::step() { impl_->run_step(); }

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
    throw InvalidArgument(fmt::format("LinearLRScheduler: step counts must be non-negative (warmup {}, total {})",
                                      warmup_, total_));
  optimizer_.set_learning_rate(initial_lr_ * factor(step_));
}

float LinearLRScheduler::factor(int64_t step) const {
  if (step < warmup_) return static_cast<float>(static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_)));
  return static_cast<float>(std::max(0.0, static_cast<double>(total_ - step) /
                                              static_cast<double>(std::max<int64_t>(1, total_ - warmup_))));
}

void LinearLRScheduler::step() {
  ++step_;
  optimizer_.set_learning_rate(initial_lr_ * factor(step_));
}

}  // namespace kiln::training
