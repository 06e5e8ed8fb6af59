// Trainer::train: Hugging Face's training loop (transformers' Trainer._inner_training_loop) over
// Kiln's Module and Optimizer: epochs of seeded batches, gradient accumulation, clipping by global
// norm, the learning-rate schedule, and logging / evaluation / checkpoints by strategy.
#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "kiln/error.h"
#include "kiln/integrations.h"
#include "kiln/random.h"
#include "trainer/checkpoint_folder.h"
#include "training/tensor_math.h"
#include "trainer/trainer_impl.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

Trainer::Trainer(ModelSource model, TrainingArguments args, std::shared_ptr<const data::Dataset> train_dataset,
                 std::shared_ptr<const data::Dataset> eval_dataset, ComputeMetrics compute_metrics,
                 PreprocessLogits preprocess_logits_for_metrics,
                 std::vector<std::shared_ptr<TrainerCallback>> callbacks)
    : impl_(std::make_unique<Impl>()), args_(std::move(args)) {
  args_.validate();
  Impl& m = *impl_;
  m.source = std::move(model);
  m.train_dataset = std::move(train_dataset);
  m.eval_dataset = std::move(eval_dataset);
  m.compute_metrics = std::move(compute_metrics);
  m.preprocess_logits = std::move(preprocess_logits_for_metrics);
  set_random_seed(static_cast<uint64_t>(args_.seed));  // Dropout seeds, before the sessions exist
  m.artifacts_dir = prepare_artifacts(m.source, args_, &m.logits_output);
  const fs::path dir(m.artifacts_dir);
  m.state = std::make_unique<training::CheckpointState>(
      training::CheckpointState::load_checkpoint((dir / training::checkpoint_file()).string()));
  m.module = std::make_unique<training::Module>((dir / training::training_model_file()).string(), *m.state,
                                                (dir / training::eval_model_file()).string());
  m.optimizer = std::make_unique<training::Optimizer>((dir / training::optimizer_model_file()).string(), *m.module);
  m.optimizer->set_learning_rate(static_cast<float>(args_.learning_rate));
  if (m.logits_output.empty()) {
    const auto outs = m.module->output_names(false);
    if (outs.size() > 1) m.logits_output = outs[1];
  }
  // HF's callback list: the flow, the report_to integrations, the user's, then the progress display.
  m.callbacks.context.model = m.module.get();
  m.callbacks.context.optimizer = m.optimizer.get();
  m.callbacks.add(std::make_shared<DefaultFlowCallback>());
  for (auto& c : reporting_integration_callbacks(args_.report_to)) m.callbacks.add(std::move(c));
  for (auto& c : callbacks) m.callbacks.add(std::move(c));
  if (args_.disable_tqdm.value_or(false)) m.callbacks.add(std::make_shared<PrinterCallback>());
  else m.callbacks.add(std::make_shared<ProgressCallback>());
  m.callbacks.call(&TrainerCallback::on_init_end, args_, state_);
}

Trainer::~Trainer() = default;

training::Module& Trainer::module() { return *impl_->module; }
training::CheckpointState& Trainer::checkpoint_state() { return *impl_->state; }
void Trainer::set_scheduler_factory(SchedulerFactory factory) { impl_->scheduler_factory = std::move(factory); }
void Trainer::add_callback(std::shared_ptr<TrainerCallback> callback) { impl_->callbacks.add(std::move(callback)); }
std::shared_ptr<TrainerCallback> Trainer::pop_callback(const std::string& name) { return impl_->callbacks.pop(name); }
std::shared_ptr<TrainerCallback> Trainer::pop_callback(const std::shared_ptr<TrainerCallback>& callback) {
  return impl_->callbacks.pop(callback);
}
void Trainer::remove_callback(const std::string& name) { impl_->callbacks.pop(name); }
void Trainer::remove_callback(const std::shared_ptr<TrainerCallback>& callback) { impl_->callbacks.pop(callback); }
const std::vector<std::shared_ptr<TrainerCallback>>& Trainer::callbacks() const { return impl_->callbacks.callbacks(); }
const TrainerControl& Trainer::control() const { return impl_->callbacks.control; }

void Trainer::log(Logs logs) {
  auto set = [&logs](const std::string& key, double value) {
    for (auto& kv : logs)
      if (kv.first == key) {
        kv.second = value;
        return;
      }
    logs.emplace_back(key, value);
  };
  set("epoch", state_.epoch);
  if (args_.include_num_input_tokens_seen != "no" && args_.include_num_input_tokens_seen != "false")
    set("num_input_tokens_seen", static_cast<double>(state_.num_input_tokens_seen));
  nlohmann::json entry = nlohmann::json::object();
  for (const auto& [k, v] : logs) entry[k] = v;
  entry["step"] = state_.global_step;
  state_.log_history.push_back(std::move(entry));
  CallbackContext ctx;
  ctx.logs = &logs;
  impl_->callbacks.call(&TrainerCallback::on_log, args_, state_, ctx);
}
namespace {

bool means_last_checkpoint(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "true";
}

std::string resolve_checkpoint(const std::string& spec, const std::string& output_dir) {
  if (!means_last_checkpoint(spec)) return spec;
  auto last = last_checkpoint(output_dir);
  if (!last)
    throw InvalidArgument(fmt::format("resume_from_checkpoint=true, but '{}' holds no complete checkpoint", output_dir));
  return *last;
}

}  // namespace

void Trainer::load_model_weights(const std::string& checkpoint_folder) {
  load_weights(*impl_, resolve_checkpoint(checkpoint_folder, args_.output_dir));
}

namespace {

// Resident memory in bytes (VmRSS) and its peak (VmHWM) from /proc/self/status, as HF's
// TrainerMemoryTracker measures the CPU side; `reset_peak` starts a new peak (clear_refs 5).
struct MemoryUsage {
  int64_t rss = 0, peak = 0;
};

MemoryUsage memory_usage(bool reset_peak = false) {
  if (reset_peak) std::ofstream("/proc/self/clear_refs") << "5";
  MemoryUsage u;
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (status >> key) {
    if (key == "VmRSS:" && status >> kb >> unit) u.rss = kb * 1024;
    else if (key == "VmHWM:" && status >> kb >> unit) u.peak = kb * 1024;
  }
  return u;
}

}  // namespace

int64_t Trainer::num_examples(const data::DataLoader& loader) const { return static_cast<int64_t>(loader.num_examples()); }

namespace {

// HF's token estimate: the elements of "input_ids", else the number of examples.
double estimated_tokens(const data::Example& batch) {
  auto it = batch.find("input_ids");
  if (it != batch.end()) return static_cast<double>(it->second.numel());
  return batch.empty() ? 0.0 : static_cast<double>(batch.begin()->second.dim(0));
}

}  // namespace

double Trainer::floating_point_ops(const data::Example& batch) const {
  return 6.0 * static_cast<double>(impl_->module->get_parameters_size(false)) * estimated_tokens(batch);
}

namespace {

std::vector<Tensor> inputs_of(const training::Module& module, const data::Example& batch, bool training) {
  std::vector<Tensor> inputs;
  for (const auto& name : module.input_names(training)) {
    auto it = batch.find(name);
    if (it == batch.end()) {
      std::string have;
      for (const auto& [k, v] : batch) have += (have.empty() ? "" : ", ") + k;
      throw InvalidArgument(fmt::format("the model takes input '{}', which the batch does not have (columns: {})",
                                        name, have));
    }
    inputs.push_back(it->second);
  }
  return inputs;
}

// Scales every accumulated gradient (the mean over accumulated micro-batches) and returns them.
std::vector<Tensor*> trainable_grads(training::Module& module, training::CheckpointState& state) {
  std::vector<Tensor*> grads;
  for (const auto& name : module.parameter_names()) {
    training::Parameter& p = state.parameter(name);
    if (p.requires_grad() && p.grad().defined()) grads.push_back(&p.grad());
  }
  return grads;
}


}  // namespace

TrainOutput Trainer::train(const std::string& resume_from_checkpoint) {
  Impl& m = *impl_;
  if (!m.train_dataset) throw InvalidArgument("Trainer.train() needs a train_dataset");
  const auto start_time = std::chrono::steady_clock::now();
  const MemoryUsage memory_at_start = args_.skip_memory_metrics ? MemoryUsage{} : memory_usage(true);
  const uint64_t data_seed = static_cast<uint64_t>(args_.sampler_seed());
  data::DataLoader loader(m.train_dataset, static_cast<size_t>(args_.per_device_train_batch_size),
                          std::make_shared<data::RandomSampler>(data_seed), args_.dataloader_drop_last);
  const int64_t len_dataloader = static_cast<int64_t>(loader.num_batches());
  if (len_dataloader == 0) throw InvalidArgument("the train dataset gives no batch (empty, or smaller than a batch with dataloader_drop_last)");
  const int64_t accum = args_.gradient_accumulation_steps;
  const int64_t updates_per_epoch = std::max<int64_t>(len_dataloader / accum, 1);
  int64_t max_steps, num_epochs;
  if (args_.max_steps > 0) {
    max_steps = args_.max_steps;
    num_epochs = max_steps / updates_per_epoch + (max_steps % updates_per_epoch > 0 ? 1 : 0);
  } else {
    max_steps = static_cast<int64_t>(std::ceil(args_.num_train_epochs * static_cast<double>(updates_per_epoch)));
    num_epochs = static_cast<int64_t>(std::ceil(args_.num_train_epochs));
  }
  state_ = TrainerState();
  state_.max_steps = max_steps;
  state_.num_train_epochs = num_epochs;
  state_.train_batch_size = args_.per_device_train_batch_size;
  state_.logging_steps = args_.logging_steps_for(max_steps);
  state_.eval_steps = args_.eval_steps ? args_.eval_steps_for(max_steps) : state_.logging_steps;
  state_.save_steps = args_.save_steps_for(max_steps);

  const int64_t warmup = args_.get_warmup_steps(max_steps);
  m.scheduler = m.scheduler_factory ? m.scheduler_factory(args_.learning_rate, warmup, max_steps)
                                    : make_lr_scheduler(std::string(to_string(args_.lr_scheduler_type)),
                                                        args_.learning_rate, warmup, max_steps,
                                                        args_.lr_scheduler_kwargs);
  m.tr_loss = m.total_loss = 0;
  m.globalstep_last_logged = 0;
  m.nan_inf_run = 0;
  m.module->set_training_run_count(0);

  const std::string resume = resolve_checkpoint(resume_from_checkpoint, args_.output_dir);
  if (!resume.empty()) load_checkpoint_files(m, state_, resume);

  CallbackHandler& cb = m.callbacks;
  if (!resume.empty() && args_.restore_callback_states_from_checkpoint) cb.restore_states(state_.stateful_callbacks);
  cb.context.lr_scheduler = m.scheduler.get();
  cb.context.train_dataloader = &loader;

  const int64_t epochs_trained = state_.global_step / updates_per_epoch;
  const int64_t skip = args_.ignore_data_skip ? 0 : (state_.global_step % updates_per_epoch) * accum;
  const bool plateau = m.scheduler->steps_on_metric();
  const double flops_per_token = 6.0 * static_cast<double>(m.module->get_parameters_size(false));
  double last_grad_norm = std::nan("");

  // HF's _maybe_log_save_evaluate: what control asks for, in the order log, evaluate, save.
  auto maybe_log_save_evaluate = [&]() {
    if (cb.control.should_log && state_.global_step > m.globalstep_last_logged) {
      const int64_t steps = state_.global_step - m.globalstep_last_logged;
      Logs logs{{"loss", m.tr_loss / static_cast<double>(steps)}};
      if (!std::isnan(last_grad_norm)) logs.emplace_back("grad_norm", last_grad_norm);
      logs.emplace_back("learning_rate", m.scheduler->current_lr());
      m.tr_loss = 0;
      m.globalstep_last_logged = state_.global_step;
      log(std::move(logs));
    }
    if (cb.control.should_evaluate) {
      const Metrics metrics = evaluate();
      // HF's metric_to_check: metric_for_best_model ("loss" when unset and the schedule needs one),
      // prefixed "eval_".
      std::string key = args_.metric_for_best_model.value_or("loss");
      if (key.rfind("eval_", 0) != 0) key = "eval_" + key;
      auto it = metrics.find(key);
      if (it == metrics.end() && (plateau || args_.metric_for_best_model)) {
        std::string have;
        for (const auto& [k, v] : metrics) have += (have.empty() ? "" : ", ") + k;
        throw InvalidArgument(fmt::format("metric_for_best_model '{}' is not among the eval metrics ({})", key, have));
      }
      if (plateau) m.scheduler->step(it->second);
      bool new_best = false;
      if (args_.metric_for_best_model) {
        const bool greater = args_.greater_is_better.value_or(false);
        if (!state_.best_metric || (greater ? it->second > *state_.best_metric : it->second < *state_.best_metric)) {
          state_.best_metric = it->second;
          state_.best_global_step = state_.global_step;
          state_.best_model_checkpoint =
              (fs::path(args_.output_dir) / fmt::format("{}{}", kCheckpointPrefix, state_.global_step)).string();
          new_best = true;
        }
      }
      if (args_.save_strategy == SaveStrategy::best) cb.control.should_save = new_best;
    }
    if (cb.control.should_save) {
      state_.stateful_callbacks = cb.export_states();
      write_checkpoint_folder(args_.output_dir, state_.global_step,
                              [&](const std::string& f) { save_checkpoint_files(m, args_, state_, f); });
      if (args_.save_total_limit)
        rotate_checkpoints(args_.output_dir, *args_.save_total_limit, state_.best_model_checkpoint);
      cb.call(&TrainerCallback::on_save, args_, state_);
    }
  };

  cb.call(&TrainerCallback::on_train_begin, args_, state_);
  for (int64_t epoch = epochs_trained; epoch < num_epochs && state_.global_step < max_steps; ++epoch) {
    cb.call(&TrainerCallback::on_epoch_begin, args_, state_);
    const int64_t first = epoch == epochs_trained ? skip : 0;
    bool group_finite = true;
    double group_loss = 0;
    int64_t group_batches = 0;
    for (int64_t step = first; step < len_dataloader; ++step) {
      if (step % accum == 0) cb.call(&TrainerCallback::on_step_begin, args_, state_);
      const data::Example batch = loader.batch(epoch, static_cast<size_t>(step));
      m.module->train();
      const std::vector<Tensor> out = (*m.module)(inputs_of(*m.module, batch, true));
      const double loss = out.at(0).item_as_double();
      const bool finite = std::isfinite(loss);
      group_finite = group_finite && finite;
      group_loss += loss;
      ++group_batches;
      if (args_.logging_nan_inf_filter && !finite)
        m.tr_loss += m.tr_loss / static_cast<double>(1 + state_.global_step - m.globalstep_last_logged);
      else
        m.tr_loss += loss / static_cast<double>(accum);
      if (finite) m.total_loss += loss / static_cast<double>(accum);
      if (args_.include_num_input_tokens_seen != "no" && args_.include_num_input_tokens_seen != "false") {
        auto ids = batch.find("input_ids");
        state_.num_input_tokens_seen += ids != batch.end() ? ids->second.numel() : batch.begin()->second.dim(0);
      }
      state_.total_flos += flops_per_token * estimated_tokens(batch);
      const bool boundary = (step + 1) % accum == 0 || step + 1 == len_dataloader;
      if (!boundary) {
        CallbackContext ctx;
        ctx.loss = loss;
        cb.call(&TrainerCallback::on_substep_end, args_, state_, ctx);
        if (cb.control.should_epoch_stop || cb.control.should_training_stop) break;
        continue;
      }

      // One optimizer update from the accumulated gradients.
      const std::vector<Tensor*> grads = trainable_grads(*m.module, *m.state);
      if (accum > 1)  // the mean over the accumulated micro-batches, as HF's loss / accumulation steps
        for (Tensor* g : grads) training::scale_in_place(*g, 1.0 / static_cast<double>(accum));
      if (group_finite) {
        m.nan_inf_run = 0;
        if (args_.max_grad_norm > 0) last_grad_norm = clip_grad_norm(grads, args_.max_grad_norm);
        cb.call(&TrainerCallback::on_pre_optimizer_step, args_, state_);
        m.optimizer->set_learning_rate(static_cast<float>(m.scheduler->current_lr()));
        m.optimizer->step();
        cb.call(&TrainerCallback::on_optimizer_step, args_, state_);
      } else if (++m.nan_inf_run >= args_.nan_inf_patience && args_.nan_inf_patience > 0) {
        throw InvalidArgument(fmt::format("training stopped at step {}: the loss was not finite for {} consecutive "
                                          "optimizer steps (nan_inf_patience); the last checkpoint is the last good "
                                          "state", state_.global_step + 1, m.nan_inf_run));
      }
      if (!plateau) m.scheduler->step();
      m.module->lazy_reset_grad();
      group_finite = true;
      ++state_.global_step;
      state_.epoch = static_cast<double>(epoch) + static_cast<double>(step + 1) / static_cast<double>(len_dataloader);
      CallbackContext ctx;
      ctx.loss = group_loss / static_cast<double>(group_batches);
      group_loss = 0;
      group_batches = 0;
      cb.call(&TrainerCallback::on_step_end, args_, state_, ctx);
      maybe_log_save_evaluate();
      if (cb.control.should_epoch_stop || cb.control.should_training_stop) break;
    }
    cb.call(&TrainerCallback::on_epoch_end, args_, state_);
    maybe_log_save_evaluate();
    if (cb.control.should_training_stop) break;
  }

  if (args_.load_best_model_at_end && state_.best_model_checkpoint && fs::exists(*state_.best_model_checkpoint))
    load_weights(m, *state_.best_model_checkpoint);

  const double runtime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  TrainOutput result;
  result.global_step = state_.global_step;
  result.training_loss = state_.global_step > 0 ? m.total_loss / static_cast<double>(state_.global_step) : 0.0;
  // HF's num_train_samples: max_steps * the total batch when max_steps is set, else examples * epochs.
  const double samples = args_.max_steps > 0
                             ? static_cast<double>(max_steps * args_.per_device_train_batch_size * accum)
                             : static_cast<double>(loader.num_examples()) * args_.num_train_epochs;
  // HF's speed_metrics, then total_flos, train_loss and the memory metrics, in HF's order.
  Logs summary{{"train_runtime", runtime},
               {"train_samples_per_second", runtime > 0 ? samples / runtime : 0.0},
               {"train_steps_per_second", runtime > 0 ? static_cast<double>(max_steps) / runtime : 0.0}};
  if (args_.include_tokens_per_second)
    summary.emplace_back("train_tokens_per_second",
                         runtime > 0 ? static_cast<double>(state_.num_input_tokens_seen) / runtime : 0.0);
  summary.emplace_back("total_flos", state_.total_flos);
  summary.emplace_back("train_loss", result.training_loss);
  if (!args_.skip_memory_metrics) {
    const MemoryUsage end = memory_usage();
    summary.emplace_back("train_mem_cpu_alloc_delta", static_cast<double>(end.rss - memory_at_start.rss));
    summary.emplace_back("train_mem_cpu_peaked_delta", static_cast<double>(std::max<int64_t>(0, end.peak - end.rss)));
  }
  log(summary);  // adds "epoch"
  const nlohmann::json& logged = state_.log_history.back();
  for (auto it = logged.begin(); it != logged.end(); ++it)
    if (it.key() != "step") result.metrics[it.key()] = it.value().get<double>();
  cb.call(&TrainerCallback::on_train_end, args_, state_);
  return result;
}

}  // namespace kiln::trainer
