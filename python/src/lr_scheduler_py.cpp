// The pieces of HF's `optimizers=(optimizer, lr_scheduler)` (and optimizer_cls_and_kwargs,
// create_optimizer, create_scheduler) that reach the C++ Trainer: the optimizer override read from
// kiln/trainer_optimizers.py's dict, and a schedule whose rates Python computes (a torch scheduler
// replayed on a stand-in optimizer).
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cmath>

#include "kiln/error.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

class PythonScheduler final : public trainer::LRScheduler {
 public:
  PythonScheduler(const py::object& lr_at, double base_lr) : lr_at_(hold(lr_at)), base_lr_(base_lr) {}

  const std::string& type() const override {
    static const std::string name = "torch";
    return name;
  }
  double base_lr() const override { return base_lr_; }
  double lr(int64_t step) const override {
    py::gil_scoped_acquire gil;
    const double rate = (*lr_at_)(step).cast<double>();
    if (!std::isfinite(rate) || rate < 0)
      throw InvalidArgument(fmt::format("the lr_scheduler gave a learning rate of {} at step {}", rate, step));
    return rate;
  }
  void step(std::optional<double> metric) override {
    if (metric) throw InvalidArgument("a torch lr_scheduler given to the Trainer steps per optimizer step");
    ++last_;
  }
  double current_lr() const override { return lr(last_); }
  int64_t last_step() const override { return last_; }
  nlohmann::json state() const override { return {{"type", type()}, {"base_lr", base_lr_}, {"last_step", last_}}; }
  void load_state(const nlohmann::json& state) override {
    if (!state.is_object() || state.value("type", "") != type() || !state.contains("last_step") ||
        !state["last_step"].is_number_integer())
      throw InvalidArgument(fmt::format("scheduler state {} is not a torch lr_scheduler's", state.dump()));
    last_ = state["last_step"].get<int64_t>();
  }

 private:
  PyRef lr_at_;
  double base_lr_;
  int64_t last_ = 0;
};

float number(const py::dict& d, const char* key, float fallback) {
  return d.contains(key) && !d[key].is_none() ? d[key].cast<float>() : fallback;
}

bool flag(const py::dict& d, const char* key) { return d.contains(key) && d[key].cast<bool>(); }

}  // namespace

std::unique_ptr<trainer::LRScheduler> python_scheduler(const py::object& lr_at, double base_lr) {
  if (!PyCallable_Check(lr_at.ptr())) throw TypeError("the scheduler factory must return a callable lr_at(step)");
  return std::make_unique<PythonScheduler>(lr_at, base_lr);
}

void set_optimizer(trainer::ModelSource& s, const py::dict& o) {
  const std::string type = o["type"].cast<std::string>();
  s.optimizer = training::optim_type_from_string(type);
  switch (*s.optimizer) {
    case training::OptimType::AdamW:
      s.adamw.beta1 = number(o, "beta1", s.adamw.beta1);
      s.adamw.beta2 = number(o, "beta2", s.adamw.beta2);
      s.adamw.epsilon = number(o, "eps", s.adamw.epsilon);
      s.adamw.weight_decay = number(o, "weight_decay", s.adamw.weight_decay);
      s.adamw.maximize = flag(o, "maximize");
      s.adamw.hf_variant = flag(o, "hf_variant");
      break;
    case training::OptimType::SGD:
      s.sgd.momentum = number(o, "momentum", 0);
      s.sgd.dampening = number(o, "dampening", 0);
      s.sgd.weight_decay = number(o, "weight_decay", 0);
      s.sgd.nesterov = flag(o, "nesterov");
      s.sgd.maximize = flag(o, "maximize");
      break;
    case training::OptimType::Adagrad:
      s.adagrad.lr_decay = number(o, "lr_decay", 0);
      s.adagrad.weight_decay = number(o, "weight_decay", 0);
      s.adagrad.initial_accumulator_value = number(o, "initial_accumulator_value", 0);
      s.adagrad.epsilon = number(o, "eps", s.adagrad.epsilon);
      s.adagrad.maximize = flag(o, "maximize");
      break;
    case training::OptimType::Adafactor: {
      auto& a = s.adafactor;
      if (o.contains("eps1")) a.eps1 = number(o, "eps1", a.eps1);
      a.eps2 = number(o, "eps2", a.eps2);
      a.clip_threshold = number(o, "clip_threshold", a.clip_threshold);
      a.decay_rate = number(o, "decay_rate", a.decay_rate);
      if (o.contains("beta1") && !o["beta1"].is_none()) a.beta1 = o["beta1"].cast<float>();
      a.weight_decay = number(o, "weight_decay", 0);
      a.scale_parameter = flag(o, "scale_parameter");
      a.relative_step = flag(o, "relative_step");
      a.warmup_init = flag(o, "warmup_init");
      break;
    }
    case training::OptimType::Lamb:
      throw Unsupported("optimizers: LAMB is chosen with TrainingArguments(lamb=True)");
  }
  if (o.contains("lr") && !o["lr"].is_none()) s.learning_rate = o["lr"].cast<double>();
  if (o.contains("no_weight_decay") && !o["no_weight_decay"].is_none())
    s.no_weight_decay = o["no_weight_decay"].cast<std::vector<std::string>>();
}

}  // namespace kiln::python
