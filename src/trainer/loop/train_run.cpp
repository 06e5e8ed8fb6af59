// Trainer::train: Hugging Face's training loop (transformers' Trainer._inner_training_loop) over
// Kiln's Module and Optimizer: epochs of seeded batches, gradient accumulation, clipping by global
// norm, the learning-rate schedule, and logging / evaluation / checkpoints by strategy.
#include "trainer/loop/train_run.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <utility>

#include "core/atomic_file.h"
#include "kiln/error.h"
#include "trainer/args/training_args_compat.h"
#include "trainer/loop/batch_padding.h"
#include "trainer/loop/checkpoint_folder.h"
#include "trainer/loop/compile_only.h"
#include "trainer/loop/output_dir_lock.h"
#include "trainer/loop/trainer_impl.h"
#include "training/tensor_math.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

namespace {

std::vector<Tensor> inputs_of(const training::Module& module, const data::Example& batch, bool training) {
  std::vector<Tensor> inputs;
  for (const auto& name : module.input_names(training)) {
    auto it = batch.find(name);
    if (it == batch.end()) {
      std::string have;
      for (const auto& [k, v] : batch) have += (have.empty() ? "" : ", ") + k;
      throw InvalidArgument(
          fmt::format("the model takes input '{}', which the batch does not have (columns: {})", name, have));
    }
    inputs.push_back(it->second);
  }
  return inputs;
}

// The accumulated gradients of the trainable parameters, in parameter order, as they are: a
// parameter has one once the training model has produced its gradient (one the training model
// gives no gradient for has none and is left out). Each holds the sum over the accumulation group's
// micro-batches (Module overwrites it on the group's first run after lazy_reset_grad, then adds);
// the caller scales them to the mean and clips them.
std::vector<Tensor*> trainable_grads(training::Module& module, training::CheckpointState& state) {
  std::vector<Tensor*> grads;
  for (const auto& name : module.parameter_names()) {
    training::Parameter& p = state.parameter(name);
    if (p.requires_grad() && p.grad().defined()) grads.push_back(&p.grad());
  }
  return grads;
}

// The gradients this rank's optimizer steps from: every trainable parameter's, or with ZeRO views
// of its ranges of them (kept in `views`).
std::vector<Tensor*> update_grads(Trainer::Impl& m, std::vector<Tensor>& views) {
  if (!m.dist.sharded()) return trainable_grads(*m.module, *m.state);
  views.clear();
  for (const auto& r : m.optimizer->ranges()) {
    const Tensor& g = m.state->parameter(r.name).grad();
    if (g.defined())
      views.push_back(Tensor::view_of(g.storage(), g.byte_offset() + static_cast<size_t>(r.begin) * sizeof(float),
                                      g.dtype(), {r.end - r.begin}));
  }
  std::vector<Tensor*> grads;
  grads.reserve(views.size());
  for (Tensor& v : views) grads.push_back(&v);
  return grads;
}

}  // namespace

Schedule make_schedule(const TrainingArguments& args, const data::DataLoader& loader) {
  Schedule s;
  s.len_dataloader = static_cast<int64_t>(loader.num_batches());
  if (s.len_dataloader == 0)
    throw InvalidArgument(
        "the train dataset gives no batch (empty, or smaller than a batch with dataloader_drop_last)");
  s.accum = args.gradient_accumulation_steps;
  s.updates_per_epoch = std::max<int64_t>(s.len_dataloader / s.accum, 1);
  if (args.max_steps > 0) {
    s.max_steps = args.max_steps;
    s.num_epochs = s.max_steps / s.updates_per_epoch + (s.max_steps % s.updates_per_epoch > 0 ? 1 : 0);
  } else {
    s.max_steps = static_cast<int64_t>(std::ceil(args.num_train_epochs * static_cast<double>(s.updates_per_epoch)));
    s.num_epochs = static_cast<int64_t>(std::ceil(args.num_train_epochs));
  }
  return s;
}

// A fresh TrainerState and scheduler, then the checkpoint to resume from (its state, weights,
// optimizer, scheduler and callback states) when there is one.
void TrainRun::start(const std::string& resume_from_checkpoint) {
  const Schedule& s = schedule_;
  state_ = TrainerState();
  state_.is_world_process_zero = m_.dist.rank() == 0;
  state_.is_local_process_zero = !m_.dist.distributed() || m_.dist.comm->local_rank() == 0;
  state_.max_steps = s.max_steps;
  state_.num_train_epochs = s.num_epochs;
  state_.train_batch_size = args_.per_device_train_batch_size;
  state_.logging_steps = args_.logging_steps_for(s.max_steps);
  state_.eval_steps = args_.eval_steps ? args_.eval_steps_for(s.max_steps) : state_.logging_steps;
  state_.save_steps = args_.save_steps_for(s.max_steps);

  const int64_t warmup = args_.get_warmup_steps(s.max_steps);
  m_.scheduler = m_.scheduler_factory ? m_.scheduler_factory(m_.source.base_learning_rate(args_), warmup, s.max_steps)
                                      : make_lr_scheduler(std::string(to_string(args_.lr_scheduler_type)),
                                                          m_.source.base_learning_rate(args_), warmup, s.max_steps,
                                                          args_.lr_scheduler_kwargs);
  m_.tr_loss = m_.total_loss = 0;
  m_.pipeline_compute = m_.pipeline_wait = 0;
  m_.globalstep_last_logged = 0;
  m_.nan_inf_run = 0;
  m_.module->set_training_run_count(0);

  const std::string resume = resolve_checkpoint(resume_from_checkpoint, args_.output_dir);
  if (!resume.empty()) load_checkpoint_files(m_, state_, resume);
  state_.is_world_process_zero = m_.dist.rank() == 0;  // the checkpoint's are rank 0's
  state_.is_local_process_zero = !m_.dist.distributed() || m_.dist.comm->local_rank() == 0;
  if (!resume.empty() && args_.restore_callback_states_from_checkpoint) cb_.restore_states(state_.stateful_callbacks);
  cb_.context.lr_scheduler = m_.scheduler.get();
  cb_.context.train_dataloader = &loader_;

  epochs_trained_ = state_.global_step / s.updates_per_epoch;
  skip_ = args_.ignore_data_skip ? 0 : (state_.global_step % s.updates_per_epoch) * s.accum;
  plateau_ = m_.scheduler->steps_on_metric();
  flops_per_token_ = 6.0 * static_cast<double>(m_.module->get_parameters_size(false));
  if (m_.ipu) {
    device_iterations_ = m_.ipu->device_iterations;
    last_only_ = m_.ipu->output_mode == "final" || m_.ipu->output_mode == "sum";
    sum_losses_ = m_.ipu->output_mode == "sum";
  }
}

void TrainRun::run_epochs() {
  cb_.call(&TrainerCallback::on_train_begin, args_, state_);
  // HF's eval_on_start: an evaluation before the first step (a sanity check of the eval loop).
  if (args_.compat("eval_on_start").get<bool>() && m_.eval_dataset) trainer_.evaluate();
  for (int64_t epoch = epochs_trained_; epoch < schedule_.num_epochs && state_.global_step < schedule_.max_steps;
       ++epoch) {
    run_epoch(epoch);
    if (cb_.control.should_training_stop) break;
  }
}

// The epoch's batches (after those a resumed run already trained on), an optimizer update at the
// end of each accumulation group, and the epoch's own log / evaluate / save.
void TrainRun::run_epoch(int64_t epoch) {
  cb_.call(&TrainerCallback::on_epoch_begin, args_, state_);
  m_.train_dataset->set_epoch(epoch);
  const int64_t accum = schedule_.accum, len = schedule_.len_dataloader;
  group_ = Group();
  const int64_t start = epoch == epochs_trained_ ? skip_ : 0;
  if (args_.dataloader_num_workers > 0) {  // persistent workers keep their threads between epochs
    if (!prefetch_ || !args_.dataloader_persistent_workers)
      prefetch_ = std::make_unique<data::Prefetcher>(loader_, static_cast<int>(args_.dataloader_num_workers),
                                                     static_cast<int>(args_.dataloader_prefetch_factor.value_or(2)));
    prefetch_->start(epoch, static_cast<size_t>(start), static_cast<size_t>(len));
  }
  // Calls of device_iterations updates (one update each without an IPUConfig), never past the
  // epoch's end or max_steps.
  for (int64_t first = start; first < len;) {
    const int64_t updates = std::min(device_iterations_, schedule_.max_steps - state_.global_step);
    if (updates <= 0) break;
    const int64_t end = std::min(len, first + updates * accum);
    run_call(epoch, first, end);
    first = end;
    if (cb_.control.should_epoch_stop || cb_.control.should_training_stop) break;
  }
  cb_.call(&TrainerCallback::on_epoch_end, args_, state_);
  maybe_log_save_evaluate();
}

// The tokens a micro-batch's first `rows` rows hold (padded rows are not seen): the elements of
// "input_ids" (one per row without it); with include_num_input_tokens_seen "non_padding", HF's
// count: the ones of "attention_mask" when the batch has it.
int64_t TrainRun::input_tokens(const data::Example& batch, int64_t rows) const {
  const auto mask = batch.find("attention_mask");
  const DType t = mask != batch.end() ? mask->second.dtype() : DType::Float64;
  if (args_.include_num_input_tokens_seen == "non_padding" && mask != batch.end() && mask->second.rank() > 0 &&
      (t == DType::Int64 || t == DType::Int32 || t == DType::Bool || t == DType::Float32)) {
    const Tensor m = mask->second.contiguous();
    const int64_t n = rows * (m.numel() / m.dim(0));
    int64_t ones = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (t == DType::Int64) ones += m.data<int64_t>()[i] != 0;
      else if (t == DType::Int32) ones += m.data<int32_t>()[i] != 0;
      else if (t == DType::Bool) ones += m.data<bool>()[i] ? 1 : 0;
      else ones += m.data<float>()[i] != 0.0f ? 1 : 0;
    }
    return ones;
  }
  const auto ids = batch.find("input_ids");
  const int64_t per_row = ids != batch.end() ? ids->second.numel() / ids->second.dim(0) : 1;
  return per_row * rows;
}

// Forward and backward on one micro-batch (the gradients add up in the parameters); returns its loss
// after adding it to the running sums, the token count and the FLOPs.
double TrainRun::train_batch(const data::Example& batch, bool ends_group, int64_t rows) {
  m_.module->train();
  training::DataParallel* ddp = m_.dist.ddp.get();
  if (ddp) {  // DDP: rank 0's buffers, and gradients reduced on the group's last micro-batch only
    if (m_.dist.broadcast_buffers) ddp->broadcast_buffers();
    ddp->set_sync(ends_group);
  }
  const std::vector<Tensor> out = (*m_.module)(inputs_of(*m_.module, batch, true));
  if (ddp && ends_group) ddp->finish();
  return account(batch, out.at(0).item_as_double(), rows);
}

// A micro-batch's loss into the running sums, and its tokens and FLOPs (its real rows only).
double TrainRun::account(const data::Example& batch, double loss, int64_t rows) {
  const bool finite = std::isfinite(loss);
  group_.finite = group_.finite && finite;
  group_.loss += loss;
  ++group_.batches;
  const double accum = static_cast<double>(schedule_.accum);
  if (args_.logging_nan_inf_filter && !finite)  // HF logs the running mean in place of a nan / inf
    m_.tr_loss += m_.tr_loss / static_cast<double>(1 + state_.global_step - m_.globalstep_last_logged);
  else m_.tr_loss += loss / accum;
  if (finite) m_.total_loss += loss / accum;
  if (counts_input_tokens(args_)) state_.num_input_tokens_seen += input_tokens(batch, rows);
  const double full_rows = static_cast<double>(batch.begin()->second.dim(0));
  state_.total_flos += flops_per_token_ * estimated_tokens(batch) * static_cast<double>(rows) / full_rows;
  return loss;
}

// One optimizer update from the accumulated gradients: scale to the mean (fp16: unscale and check),
// clip, step (skipped for a group with a non-finite loss, up to nan_inf_patience in a row, and for
// fp16 gradients that are not finite), then the scheduler and on_step_end.
void TrainRun::optimizer_update(int64_t epoch, int64_t step) {
  const int64_t accum = schedule_.accum;
  std::vector<Tensor> views;
  const std::vector<Tensor*> grads = update_grads(m_, views);
  const bool sharded = m_.dist.sharded();
  // The mean over the accumulated micro-batches, as HF's loss / accumulation steps; with fp16 also
  // the loss scale divided out, and an update whose gradients are not all finite is skipped.
  bool overflow = false;
  group_.finite = m_.dist.all(group_.finite);  // a non-finite loss on any rank skips the update on all
  if (m_.scaler) {
    overflow = m_.scaler->unscale(grads, 1.0 / static_cast<double>(accum));
    if (sharded) overflow = !m_.dist.all(!overflow);  // each rank checked its own gradients
  } else if (accum > 1) {
    for (Tensor* g : grads) training::scale_in_place(*g, 1.0 / static_cast<double>(accum));
  }
  if (!group_.finite || overflow) ++m_.skipped_updates;
  if (overflow) ++m_.scaler_skips;
  if (group_.finite && overflow) {
    if (!m_.dist.distributed() || args_.should_log())
      std::cerr << fmt::format("kiln: step {}: gradients not finite at loss scale {}; the update is skipped\n",
                               state_.global_step + 1, m_.scaler->scale());
  } else if (group_.finite) {
    m_.nan_inf_run = 0;
    // DeepSpeed clips by its config's gradient_clipping ("auto": max_grad_norm).
    const double max_norm = m_.deepspeed ? m_.deepspeed->gradient_clipping : args_.max_grad_norm;
    if (max_norm > 0 && sharded)  // the norm over every rank's gradients
      last_grad_norm_ = clip_grad_norm(grads, max_norm, [this](double s) { return m_.dist.sum(s); });
    else if (max_norm > 0 && m_.pipeline) last_grad_norm_ = clip_pipelined(max_norm);
    else if (max_norm > 0) last_grad_norm_ = clip_grad_norm(grads, max_norm);
    if (!quiet_) cb_.call(&TrainerCallback::on_pre_optimizer_step, args_, state_);
    m_.optimizer->set_learning_rate(static_cast<float>(m_.scheduler->current_lr()));
    m_.optimizer->step();
    if (sharded) m_.dist.ddp->gather_parameters();  // every rank's updates, on every rank
    if (!quiet_) cb_.call(&TrainerCallback::on_optimizer_step, args_, state_);
  } else if (++m_.nan_inf_run >= args_.nan_inf_patience && args_.nan_inf_patience > 0) {
    throw InvalidArgument(
        fmt::format("training stopped at step {}: the loss was not finite for {} consecutive "
                    "optimizer steps (nan_inf_patience); the last checkpoint is the last good "
                    "state",
                    state_.global_step + 1, m_.nan_inf_run));
  }
  if (m_.scaler) {  // torch's GradScaler backs off on any non-finite gradient, a non-finite loss's too
    m_.scaler->update(overflow);
    m_.module->set_loss_scale(static_cast<float>(m_.scaler->scale()));
  }
  // HF steps the scheduler only when the optimizer stepped or the loss was not finite (Kiln's own
  // skip), not when the loss scaler skipped the update.
  if (!plateau_ && !overflow) m_.scheduler->step();
  m_.module->lazy_reset_grad();
  ++state_.global_step;
  state_.epoch =
      static_cast<double>(epoch) + static_cast<double>(step + 1) / static_cast<double>(schedule_.len_dataloader);
  CallbackContext ctx;
  ctx.loss = group_.loss / static_cast<double>(group_.batches);
  call_loss_ += *ctx.loss;
  if (sum_losses_) ctx.loss = call_loss_;  // output_mode "sum": the call's losses added up
  group_ = Group();
  if (!quiet_) cb_.call(&TrainerCallback::on_step_end, args_, state_, ctx);
}

// HF's _maybe_log_save_evaluate: what control asks for, in the order log, evaluate, save.
void TrainRun::maybe_log_save_evaluate() {
  if (cb_.control.should_log && state_.global_step > m_.globalstep_last_logged) log_loss();
  if (cb_.control.should_evaluate) evaluate_and_track_best();
  if (cb_.control.should_save) save_checkpoint();
}

// The mean loss per update since the last log, the last gradient norm and the learning rate.
void TrainRun::log_loss() {
  const int64_t steps = state_.global_step - m_.globalstep_last_logged;
  Logs logs{{"loss", m_.dist.mean(m_.tr_loss) / static_cast<double>(steps)}};
  if (!std::isnan(last_grad_norm_)) logs.emplace_back("grad_norm", last_grad_norm_);
  logs.emplace_back("learning_rate", m_.scheduler->current_lr());
  m_.tr_loss = 0;
  m_.globalstep_last_logged = state_.global_step;
  if (m_.log_hook) m_.log_hook(std::move(logs));
  else trainer_.log(std::move(logs));
}

// evaluate(), then the metric that steps a plateau scheduler and picks the best checkpoint (with
// save_strategy "best", a new best is what asks for a save).
void TrainRun::evaluate_and_track_best() {
  const Metrics metrics = trainer_.evaluate();
  // HF's metric_to_check: metric_for_best_model ("loss" when unset and the schedule needs one),
  // prefixed "eval_".
  std::string key = args_.metric_for_best_model.value_or("loss");
  if (key.rfind("eval_", 0) != 0) key = "eval_" + key;
  auto it = metrics.find(key);
  if (it == metrics.end() && (plateau_ || args_.metric_for_best_model)) {
    std::string have;
    for (const auto& [k, v] : metrics) have += (have.empty() ? "" : ", ") + k;
    throw InvalidArgument(fmt::format("metric_for_best_model '{}' is not among the eval metrics ({})", key, have));
  }
  if (plateau_) m_.scheduler->step(it->second);
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
  if (args_.save_strategy == SaveStrategy::best) cb_.control.should_save = new_best;
}

void TrainRun::save_checkpoint() {
  state_.stateful_callbacks = cb_.export_states();
  if (m_.pipeline) {  // the stages' state gathered (by every rank), written as one process's
    const PipelineState gathered = gather_pipeline_state(m_, args_.save_only_model);
    if (args_.should_save())
      write_checkpoint_folder(args_.output_dir, state_.global_step,
                              [&](const std::string& f) { save_checkpoint_files(m_, args_, state_, f, &gathered); });
  } else if (m_.dist.sharded() && !args_.save_only_model) {
    save_sharded_checkpoint();
  } else if (!m_.dist.distributed() || args_.should_save()) {
    write_checkpoint_folder(args_.output_dir, state_.global_step,
                            [&](const std::string& f) { save_checkpoint_files(m_, args_, state_, f); });
  }
  if (args_.save_total_limit && (!m_.dist.distributed() || args_.should_save()))
    rotate_checkpoints(args_.output_dir, *args_.save_total_limit, state_.best_model_checkpoint);
  m_.dist.barrier();  // the folder is complete before any rank goes on (or could resume from it)
  cb_.call(&TrainerCallback::on_save, args_, state_);
}

// ZeRO: rank 0 opens the temporary folder and tells the others where it is; each rank writes its
// optimizer shard there; once all have (each rank's outcome is shared, so that a rank that could
// not write fails the save on every rank), rank 0 writes the model, the manifest and the rest, and
// renames the folder into place.
void TrainRun::save_sharded_checkpoint() {
  const DistributedRun& d = m_.dist;
  auto write_shard_and_agree = [&](const std::string& folder) {
    std::string failure;
    try {
      save_optimizer_shard(m_, folder);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    const std::vector<std::string> outcomes = d.comm->allgather(failure);
    for (size_t r = 0; r < outcomes.size(); ++r)
      if (!outcomes[r].empty())
        throw IOError(fmt::format("checkpoint {}: rank {} could not write its optimizer shard: {}", state_.global_step,
                                  r, outcomes[r]));
  };
  if (d.rank() != 0) {
    const std::string folder = d.comm->allgather(std::string()).at(0);
    if (folder.empty())
      throw IOError(fmt::format("checkpoint {}: rank 0 could not open its folder", state_.global_step));
    write_shard_and_agree(folder);
    return;
  }
  bool shared = false;
  try {
    write_checkpoint_folder(args_.output_dir, state_.global_step, [&](const std::string& f) {
      d.comm->allgather(f);
      shared = true;
      write_shard_and_agree(f);
      save_checkpoint_files(m_, args_, state_, f);
    });
  } catch (...) {
    if (!shared) d.comm->allgather(std::string());  // the others wait for a folder
    throw;
  }
}

// HF's summary log: speed_metrics, then total_flos, train_loss and the memory metrics, in HF's order.
Logs TrainRun::summary(double runtime, double training_loss, const MemoryUsage& memory_at_start) const {
  const int64_t max_steps = schedule_.max_steps;
  // HF's num_train_samples: max_steps * the total batch when max_steps is set, else examples * epochs.
  const double samples = args_.max_steps > 0
                             ? static_cast<double>(max_steps * args_.per_device_train_batch_size * schedule_.accum)
                             : static_cast<double>(loader_.num_examples()) * args_.num_train_epochs;
  Logs logs{{"train_runtime", runtime},
            {"train_samples_per_second", runtime > 0 ? samples / runtime : 0.0},
            {"train_steps_per_second", runtime > 0 ? static_cast<double>(max_steps) / runtime : 0.0}};
  if (args_.include_tokens_per_second)
    logs.emplace_back("train_tokens_per_second",
                      runtime > 0 ? static_cast<double>(state_.num_input_tokens_seen) / runtime : 0.0);
  logs.emplace_back("total_flos", state_.total_flos);
  logs.emplace_back("train_loss", training_loss);
  if (!args_.skip_memory_metrics) {  // HF reports init's once, with the first train()'s
    if (m_.init_memory) {
      logs.emplace_back("init_mem_cpu_alloc_delta", m_.init_memory->alloc);
      logs.emplace_back("init_mem_cpu_peaked_delta", m_.init_memory->peaked);
      m_.init_memory.reset();
    }
    const MemoryDelta d = memory_delta_since(memory_at_start);
    logs.emplace_back("train_mem_cpu_alloc_delta", d.alloc);
    logs.emplace_back("train_mem_cpu_peaked_delta", d.peaked);
  }
  return logs;
}

// The end of training: the best model when asked for, then the summary log, which the result's
// metrics repeat (with the "epoch" log() adds), and on_train_end.
TrainOutput TrainRun::finish(std::chrono::steady_clock::time_point start_time, const MemoryUsage& memory_at_start) {
  if (args_.load_best_model_at_end && state_.best_model_checkpoint && fs::exists(*state_.best_model_checkpoint))
    load_weights(m_, *state_.best_model_checkpoint);

  const double runtime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  TrainOutput result;
  result.global_step = state_.global_step;
  result.training_loss =
      state_.global_step > 0 ? m_.dist.mean(m_.total_loss) / static_cast<double>(state_.global_step) : 0.0;
  trainer_.log(summary(runtime, result.training_loss, memory_at_start));  // adds "epoch"
  const nlohmann::json& logged = state_.log_history.back();
  for (auto it = logged.begin(); it != logged.end(); ++it)
    if (it.key() != "step") result.metrics[it.key()] = it.value().get<double>();
  if (m_.pipeline) {  // this rank's stage: its time computing and waiting, and its activation arena
    result.metrics["pipeline_stage"] = m_.dist.stage;
    result.metrics["pipeline_compute_seconds"] = m_.pipeline_compute;
    result.metrics["pipeline_wait_seconds"] = m_.pipeline_wait;
    result.metrics["pipeline_stage_peak_bytes"] = static_cast<double>(m_.module->training_peak_bytes());
  }
  cb_.call(&TrainerCallback::on_train_end, args_, state_);
  return result;
}

TrainOutput Trainer::train(const std::string& resume_from_checkpoint) {
  Impl& m = *impl_;
  if (!m.train_dataset) throw InvalidArgument("Trainer.train() needs a train_dataset");
  // One run per output_dir; what a killed run left half-done there is finished or undone first, by
  // the rank that writes there (the others wait).
  std::optional<OutputDirLock> lock;
  if (!m.dist.distributed() || args_.should_save()) {
    lock.emplace(args_.output_dir);
    recover_checkpoint_folders(args_.output_dir);
    // Files of atomic writes that a kill interrupted (model.onnx.tmp-XXXXXX...), in the folders this
    // run owns: output_dir and the artifacts it generated there (not a user's artifacts folder).
    remove_stale_temporaries(args_.output_dir);
    if (m.source.kind != ModelSource::Kind::Artifacts) remove_stale_temporaries(m.artifacts_dir);
  }
  m.dist.barrier();
  const auto start_time = std::chrono::steady_clock::now();
  const MemoryUsage memory_at_start = args_.skip_memory_metrics ? MemoryUsage{} : memory_usage(true);
  const uint64_t data_seed = static_cast<uint64_t>(args_.sampler_seed());
  // Each rank trains on its share of the seeded order (torch's DistributedSampler).
  std::shared_ptr<const data::Sampler> sampler = std::make_shared<data::RandomSampler>(data_seed);
  if (args_.compat("train_sampling_strategy") == "sequential") sampler = std::make_shared<data::SequentialSampler>();
  if (m.train_dataset->sequential() || m.train_dataset->is_batched())  // a stream, or a user's loader's batches
    sampler = std::make_shared<data::SequentialSampler>();
  else if (detail::groups_by_length(args_))  // HF: mega-batches of train_batch_size x gradient_accumulation_steps
    sampler = std::make_shared<data::LengthGroupedSampler>(
        data::item_lengths(*m.train_dataset, args_.compat("length_column_name").get<std::string>(), "input_ids"),
        static_cast<size_t>(args_.per_device_train_batch_size * args_.gradient_accumulation_steps), data_seed);
  if (m.dist.data_size() > 1)  // a pipeline's stages read their replica's share
    sampler = std::make_shared<data::DistributedSampler>(sampler, m.dist.data_rank(), m.dist.data_size(),
                                                         args_.dataloader_drop_last);
  data::DataLoader loader(m.train_dataset, static_cast<size_t>(args_.per_device_train_batch_size), sampler,
                          args_.dataloader_drop_last);
  if (args_.compile_only) return compile_only(m, args_, loader);
  TrainRun run(*this, m, args_, state_, loader);
  m.measuring_train = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{m.measuring_train};
  run.start(resume_from_checkpoint);
  run.run_epochs();
  return run.finish(start_time, memory_at_start);
}

}  // namespace kiln::trainer
