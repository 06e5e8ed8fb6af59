// Callbacks across the language boundary. A Python callback (a kiln.TrainerCallback subclass, as
// in Hugging Face, which needs no super().__init__()) runs inside the C++ loop through
// PythonCallback, an adapter that calls its on_* methods under the GIL; the built-in C++ callbacks
// are bound as classes whose on_* methods Python code (a subclass calling super()) may call.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <array>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/integrations.h"
#include "kiln/training.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

using namespace kiln::trainer;
using Args = TrainingArguments;
using EventFn = void (TrainerCallback::*)(const Args&, const TrainerState&, TrainerControl&, const CallbackContext&);

// Every event, in HF's declaration order: the adapter's dispatch and the bound methods share it.
enum Event : size_t {
  kInitEnd,
  kTrainBegin,
  kTrainEnd,
  kEpochBegin,
  kEpochEnd,
  kStepBegin,
  kPreOptimizerStep,
  kOptimizerStep,
  kSubstepEnd,
  kStepEnd,
  kEvaluate,
  kPredict,
  kSave,
  kLog,
  kPredictionStep,
  kEventCount
};
constexpr std::array<std::pair<const char*, EventFn>, kEventCount> kEvents{{
    {"on_init_end", &TrainerCallback::on_init_end},
    {"on_train_begin", &TrainerCallback::on_train_begin},
    {"on_train_end", &TrainerCallback::on_train_end},
    {"on_epoch_begin", &TrainerCallback::on_epoch_begin},
    {"on_epoch_end", &TrainerCallback::on_epoch_end},
    {"on_step_begin", &TrainerCallback::on_step_begin},
    {"on_pre_optimizer_step", &TrainerCallback::on_pre_optimizer_step},
    {"on_optimizer_step", &TrainerCallback::on_optimizer_step},
    {"on_substep_end", &TrainerCallback::on_substep_end},
    {"on_step_end", &TrainerCallback::on_step_end},
    {"on_evaluate", &TrainerCallback::on_evaluate},
    {"on_predict", &TrainerCallback::on_predict},
    {"on_save", &TrainerCallback::on_save},
    {"on_log", &TrainerCallback::on_log},
    {"on_prediction_step", &TrainerCallback::on_prediction_step},
}};

// ---- Active trainers ----------------------------------------------------------------------------
// Touched only with the GIL held.
std::vector<std::pair<const TrainerState*, ActiveTrainer>>& active_trainers() {
  static auto* trainers = new std::vector<std::pair<const TrainerState*, ActiveTrainer>>();
  return *trainers;
}

// ---- Python values of an event's arguments ------------------------------------------------------

py::object python_args(const Args& args) {
  return py::module_::import("kiln.training_args").attr("TrainingArguments").attr("_from_core")(args);
}

// A view of a C++ object the Trainer owns: it keeps the Trainer alive when one is active, so that a
// callback may keep what it was given.
template <class T>
py::object view(T* object, const ActiveTrainer* trainer) {
  if (!object) return py::none();
  if (trainer && trainer->owner) return py::cast(object, py::return_value_policy::reference_internal, trainer->owner);
  return py::cast(object, py::return_value_policy::reference);
}

py::dict event_kwargs(const CallbackContext& ctx, const ActiveTrainer* trainer) {
  py::dict kw;
  kw["model"] = trainer && trainer->model ? py::reinterpret_borrow<py::object>(trainer->model) : py::none();
  kw["processing_class"] = py::none();
  kw["optimizer"] = view(ctx.optimizer, trainer);
  kw["lr_scheduler"] = view(ctx.lr_scheduler, trainer);
  kw["train_dataloader"] = view(ctx.train_dataloader, trainer);
  kw["eval_dataloader"] = view(ctx.eval_dataloader, trainer);
  if (ctx.metrics) {
    py::dict metrics;
    for (const auto& [k, v] : *ctx.metrics) metrics[py::str(k)] = v;
    kw["metrics"] = metrics;
  }
  if (ctx.logs) {
    py::dict logs;  // in the order the log was made, as HF's dict
    for (const auto& [k, v] : *ctx.logs) logs[py::str(k)] = v;
    kw["logs"] = logs;
  }
  if (ctx.loss) kw["loss"] = *ctx.loss;
  return kw;
}

// ---- The adapter ---------------------------------------------------------------------------------

class PythonCallback final : public TrainerCallback {
 public:
  explicit PythonCallback(py::object obj) : obj_(hold(obj)) {
    const py::object type = py::type::of(obj);
    name_ = py::str(type.attr("__name__"));
    // Events left to kiln.TrainerCallback's no-ops are skipped without taking the GIL.
    const py::object base = py::module_::import("kiln.trainer_callback").attr("TrainerCallback");
    // Asked of the instance, so that methods set on it or made by __getattr__ count too.
    for (size_t e = 0; e < kEventCount; ++e) {
      const py::object method = py::getattr(obj, kEvents[e].first, py::none());
      const py::object function = py::getattr(method, "__func__", method);
      const py::object noop = py::getattr(base, kEvents[e].first, py::none());
      overridden_[e] = !method.is_none() && !function.is(noop);
    }
  }

  const py::object& object() const { return *obj_; }
  std::string name() const override { return name_; }

  std::optional<nlohmann::json> state() const override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(*obj_, "state")) return std::nullopt;
    const py::object s = obj_->attr("state")();
    if (s.is_none()) return std::nullopt;
    return json_from_py(s, name_ + ".state()");
  }
  void load_state(const nlohmann::json& state) override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(*obj_, "load_state")) obj_->attr("load_state")(py_from_json(state));
  }

  void on_init_end(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kInitEnd, a, s, c, x);
  }
  void on_train_begin(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kTrainBegin, a, s, c, x);
  }
  void on_train_end(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kTrainEnd, a, s, c, x);
  }
  void on_epoch_begin(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kEpochBegin, a, s, c, x);
  }
  void on_epoch_end(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kEpochEnd, a, s, c, x);
  }
  void on_step_begin(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kStepBegin, a, s, c, x);
  }
  void on_pre_optimizer_step(const Args& a, const TrainerState& s, TrainerControl& c,
                             const CallbackContext& x) override {
    call(kPreOptimizerStep, a, s, c, x);
  }
  void on_optimizer_step(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kOptimizerStep, a, s, c, x);
  }
  void on_substep_end(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kSubstepEnd, a, s, c, x);
  }
  void on_step_end(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kStepEnd, a, s, c, x);
  }
  void on_evaluate(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kEvaluate, a, s, c, x);
  }
  void on_predict(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kPredict, a, s, c, x);
  }
  void on_save(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kSave, a, s, c, x);
  }
  void on_log(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kLog, a, s, c, x);
  }
  void on_prediction_step(const Args& a, const TrainerState& s, TrainerControl& c, const CallbackContext& x) override {
    call(kPredictionStep, a, s, c, x);
  }

 private:
  // HF's call_event: the method may return a TrainerControl, whose flags then stand. A Python
  // exception leaves as py::error_already_set and reaches the caller of train() as itself.
  void call(Event e, const Args& args, const TrainerState& state, TrainerControl& control,
            const CallbackContext& ctx) const {
    if (!overridden_[e]) return;
    py::gil_scoped_acquire gil;
    const ActiveTrainer* trainer = active_trainer(&state);
    py::object py_args =
        trainer && trainer->args ? py::reinterpret_borrow<py::object>(trainer->args) : python_args(args);
    py::object py_state = trainer && trainer->owner ? view(&state, trainer) : py::cast(state);
    py::object py_control = view(&control, trainer);
    const py::object result = obj_->attr(kEvents[e].first)(py_args, py_state, py_control, **event_kwargs(ctx, trainer));
    if (!result.is_none() && py::isinstance<TrainerControl>(result)) {
      const auto& returned = result.cast<const TrainerControl&>();
      if (&returned != &control) control = returned;
    }
  }

  PyRef obj_;
  std::string name_;
  std::array<bool, kEventCount> overridden_{};
};

// ---- Bound C++ callbacks ---------------------------------------------------------------------------

const Args& args_from_py(const py::handle& args) {
  if (py::isinstance<Args>(args)) return args.cast<const Args&>();
  if (py::hasattr(args, "_core")) return args.attr("_core").cast<const Args&>();
  throw TypeError(fmt::format("args must be a kiln.TrainingArguments, not {}",
                              std::string(py::str(args.get_type().attr("__name__")))));
}

// A built-in's event called from Python (a subclass's super().on_evaluate(...)): the metrics, logs
// and loss keywords reach it; model, optimizer and loaders do not (the built-ins do not use them).
void call_from_python(TrainerCallback& cb, EventFn fn, const py::handle& args, const TrainerState& state,
                      TrainerControl& control, const py::kwargs& kw) {
  CallbackContext ctx;
  Metrics metrics;
  Logs logs;
  if (kw.contains("metrics") && !kw["metrics"].is_none()) {
    for (const auto& [k, v] : kw["metrics"].cast<py::dict>()) metrics[k.cast<std::string>()] = v.cast<double>();
    ctx.metrics = &metrics;
  }
  if (kw.contains("logs") && !kw["logs"].is_none()) {
    for (const auto& [k, v] : kw["logs"].cast<py::dict>()) logs.emplace_back(k.cast<std::string>(), v.cast<double>());
    ctx.logs = &logs;
  }
  if (kw.contains("loss") && !kw["loss"].is_none()) ctx.loss = kw["loss"].cast<double>();
  (cb.*fn)(args_from_py(args), state, control, ctx);
}

void register_base(py::module_& m) {
  py::class_<TrainerCallback, std::shared_ptr<TrainerCallback>> base(m, "CppTrainerCallback");
  base.def_property_readonly("name", &TrainerCallback::name)
      .def("state",
           [](const TrainerCallback& cb) -> py::object {
             const auto s = cb.state();
             return s ? py_from_json(*s) : py::none();
           })
      .def("load_state",
           [](TrainerCallback& cb, const py::dict& s) { cb.load_state(json_from_py(s, cb.name() + ".load_state")); })
      .def("__repr__", [](const TrainerCallback& cb) { return "<kiln " + cb.name() + ">"; });
  for (const auto& [name, fn] : kEvents) {
    const EventFn event = fn;
    base.def(name,
             [event](TrainerCallback& cb, const py::object& args, const TrainerState& state, TrainerControl& control,
                     const py::kwargs& kw) { call_from_python(cb, event, args, state, control, kw); });
  }
}

void register_builtins(py::module_& m) {
  py::class_<DefaultFlowCallback, TrainerCallback, std::shared_ptr<DefaultFlowCallback>>(m, "DefaultFlowCallback")
      .def(py::init<>());
  py::class_<ProgressCallback, TrainerCallback, std::shared_ptr<ProgressCallback>>(m, "ProgressCallback")
      .def(py::init([](std::optional<int64_t> max_str_len) {
             (void)max_str_len;  // HF's option for long string metrics; Kiln's logs are numbers
             return std::make_shared<ProgressCallback>();
           }),
           py::arg("max_str_len") = std::nullopt)
      .def("set_terminal", &ProgressCallback::set_terminal, py::arg("terminal"));
  py::class_<PrinterCallback, TrainerCallback, std::shared_ptr<PrinterCallback>>(m, "PrinterCallback")
      .def(py::init<>());
  py::class_<EarlyStoppingCallback, TrainerCallback, std::shared_ptr<EarlyStoppingCallback>>(m, "EarlyStoppingCallback")
      .def(py::init<int64_t, double>(), py::arg("early_stopping_patience") = 1,
           py::arg("early_stopping_threshold") = 0.0)
      .def_readwrite("early_stopping_patience", &EarlyStoppingCallback::early_stopping_patience)
      .def_readwrite("early_stopping_threshold", &EarlyStoppingCallback::early_stopping_threshold)
      .def_readwrite("early_stopping_patience_counter", &EarlyStoppingCallback::early_stopping_patience_counter);
  py::class_<TensorBoardCallback, TrainerCallback, std::shared_ptr<TensorBoardCallback>>(m, "TensorBoardCallback")
      .def(py::init([](const py::object& tb_writer, std::optional<std::string> log_dir) {
             if (!tb_writer.is_none())
               throw Unsupported(
                   "TensorBoardCallback(tb_writer=...): Kiln writes event files itself; pass log_dir "
                   "(default: TrainingArguments.logging_dir) instead of a SummaryWriter");
             return std::make_shared<TensorBoardCallback>(std::move(log_dir));
           }),
           py::arg("tb_writer") = py::none(), py::arg("log_dir") = std::nullopt);
  m.def("integration_names", &integration_names);
}

// What events receive besides args, state and control: views into the running Trainer.
void register_context_types(py::module_& m) {
  using NoDelete = py::nodelete;
  py::class_<LRScheduler, std::unique_ptr<LRScheduler, NoDelete>>(m, "LRScheduler")
      .def("get_last_lr", [](const LRScheduler& s) { return std::vector<double>{s.current_lr()}; })
      .def_property_readonly("type", &LRScheduler::type)
      .def_property_readonly("base_lr", &LRScheduler::base_lr)
      .def_property_readonly("last_epoch", &LRScheduler::last_step);
  py::class_<training::Optimizer, std::unique_ptr<training::Optimizer, NoDelete>>(m, "TrainerOptimizer")
      .def("get_learning_rate", &training::Optimizer::get_learning_rate)
      .def("step_count", &training::Optimizer::step_count);
  py::class_<data::DataLoader, std::unique_ptr<data::DataLoader, NoDelete>>(m, "DataLoader")
      .def("__len__", &data::DataLoader::num_batches)
      .def_property_readonly("batch_size", &data::DataLoader::batch_size)
      .def_property_readonly("drop_last", &data::DataLoader::drop_last)
      .def("num_examples", &data::DataLoader::num_examples)
      .def(
          "batch",
          [](const data::DataLoader& l, int64_t epoch, size_t index) { return example_to_py(l.batch(epoch, index)); },
          py::arg("epoch"), py::arg("index"));
}

}  // namespace

const ActiveTrainer* active_trainer(const TrainerState* state) {
  const ActiveTrainer* fallback = nullptr;
  for (auto it = active_trainers().rbegin(); it != active_trainers().rend(); ++it) {
    if (it->first == state) return &it->second;
    if (!it->first && !fallback) fallback = &it->second;
  }
  return fallback;
}

ActiveTrainerScope::ActiveTrainerScope(const TrainerState* state, ActiveTrainer trainer) : state_(state) {
  active_trainers().emplace_back(state, trainer);
}

ActiveTrainerScope::~ActiveTrainerScope() {
  auto& all = active_trainers();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (it->first == state_) {
      all.erase(std::next(it).base());
      break;
    }
}

std::shared_ptr<TrainerCallback> callback_from_py(const py::object& obj) {
  if (py::isinstance<py::type>(obj))
    throw TypeError(fmt::format("{} is a class; the Trainer takes callback instances here",
                                std::string(py::str(obj.attr("__name__")))));
  // A built-in C++ callback as itself; a Python subclass of one through the adapter, so that its
  // overrides run.
  if (py::isinstance<TrainerCallback>(obj) &&
      py::str(py::type::of(obj).attr("__module__")).cast<std::string>() == "kiln._kiln")
    return obj.cast<std::shared_ptr<TrainerCallback>>();
  return std::make_shared<PythonCallback>(obj);
}

py::object callback_to_py(const std::shared_ptr<TrainerCallback>& callback) {
  if (const auto* adapter = dynamic_cast<const PythonCallback*>(callback.get())) return adapter->object();
  return py::cast(callback);
}

void register_callbacks(py::module_& m) {
  register_base(m);
  register_builtins(m);
  register_context_types(m);
}

}  // namespace kiln::python
