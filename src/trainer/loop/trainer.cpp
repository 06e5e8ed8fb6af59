// The Trainer: its construction (artifacts, CheckpointState, Module, Optimizer, the distributed run
// and its DeepSpeed config, callbacks), logging and the small parts of its API. The training loop
// is train_run.cpp; evaluation trainer_eval.cpp; checkpoint files trainer_checkpoint.cpp.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "kiln/error.h"
#include "kiln/integrations.h"
#include "kiln/onnx_io.h"
#include "kiln/random.h"
#include "trainer/loop/batch_padding.h"
#include "trainer/loop/checkpoint_folder.h"
#include "trainer/loop/trainer_impl.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

namespace {

// torch's GradScaler, or DeepSpeed's fp16 loss scaler as its config describes it.
training::GradScalerOptions scaler_options(const std::optional<DeepSpeedConfig>& ds) {
  training::GradScalerOptions o;
  if (!ds || !ds->fp16) return o;
  o.dynamic = ds->loss_scale == 0;
  o.init_scale = o.dynamic ? std::pow(2.0, ds->initial_scale_power) : ds->loss_scale;
  o.growth_interval = ds->loss_scale_window;
  o.hysteresis = ds->hysteresis;
  o.consecutive_hysteresis = ds->consecutive_hysteresis;
  o.min_scale = std::min(ds->min_loss_scale, o.init_scale);
  return o;
}

// An IPUConfig's pipeline: the stages' communicators.
void open_ipu_run(Trainer::Impl& m, const TrainingArguments& args) {
  if (m.ipu->stages() > 1) open_pipeline(m.dist, static_cast<int>(m.ipu->stages()));
  if (!m.ipu->executable_cache_dir.empty() && m.ipu->stages() > 1 && args.should_log())
    std::cerr << fmt::format(
        "kiln: IPUConfig executable_cache_dir '{}': a pipelined run's stage artifacts are not cached; each run "
        "builds them\n",
        m.ipu->executable_cache_dir);
}

void start_pipeline(Trainer::Impl& m) {
  m.pipeline = std::make_unique<training::PipelineStage>(m.artifacts_dir, *m.module, m.dist.pipeline,
                                                         m.ipu->pipeline_schedule == "gpipe"
                                                             ? training::PipelineStage::Schedule::GPipe
                                                             : training::PipelineStage::Schedule::OneFOneB);
}

bool means_last_checkpoint(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "true";
}

}  // namespace

std::string resolve_checkpoint(const std::string& spec, const std::string& output_dir) {
  if (!means_last_checkpoint(spec)) return spec;
  auto last = last_checkpoint(output_dir);
  if (!last)
    throw InvalidArgument(
        fmt::format("resume_from_checkpoint=true, but '{}' holds no complete checkpoint", output_dir));
  return *last;
}

// HF's token estimate: the elements of "input_ids", else the number of examples.
double estimated_tokens(const data::Example& batch) {
  auto it = batch.find("input_ids");
  if (it != batch.end()) return static_cast<double>(it->second.numel());
  return batch.empty() ? 0.0 : static_cast<double>(batch.begin()->second.dim(0));
}

bool counts_input_tokens(const TrainingArguments& args) {
  return args.include_num_input_tokens_seen != "no" && args.include_num_input_tokens_seen != "false";
}

Trainer::Trainer(ModelSource model, TrainingArguments args, std::shared_ptr<const data::Dataset> train_dataset,
                 std::shared_ptr<const data::Dataset> eval_dataset, ComputeMetrics compute_metrics,
                 PreprocessLogits preprocess_logits_for_metrics,
                 std::vector<std::shared_ptr<TrainerCallback>> callbacks)
    : impl_(std::make_unique<Impl>()), args_(std::move(args)) {
  args_.validate();
  Impl& m = *impl_;
  const MemoryUsage init_start = args_.skip_memory_metrics ? MemoryUsage{} : memory_usage(true);
  m.ipu = ipu_config(args_);
  if (m.ipu) args_ = apply_ipu_config(args_, *m.ipu, dist::launched_world_size());
  m.source = std::move(model);
  m.train_dataset = std::move(train_dataset);
  m.eval_dataset = std::move(eval_dataset);
  m.compute_metrics = std::move(compute_metrics);
  m.preprocess_logits = std::move(preprocess_logits_for_metrics);
  set_random_seed(static_cast<uint64_t>(args_.seed));  // Dropout seeds, before the sessions exist
  m.dist = open_distributed_run(args_);
  if (m.ipu) open_ipu_run(m, args_);
  m.deepspeed = deepspeed_config(args_, m.dist.size());
  // A distributed run's artifacts are written by each host's first rank; the others wait for them.
  // A pipeline's stages each write their own, in the first replica.
  const bool writes_artifacts =
      m.dist.pipelined() ? m.dist.replica == 0 : !m.dist.distributed() || m.dist.comm->local_rank() == 0;
  nlohmann::json fingerprint;
  m.artifacts_dir =
      prepare_artifacts(m.source, args_, &m.logits_output, writes_artifacts,
                        m.dist.distributed() ? &fingerprint : nullptr, m.ipu ? &*m.ipu : nullptr, m.dist.stage);
  check_same_model(m.dist, fingerprint);
  m.dist.barrier();
  const fs::path dir(m.artifacts_dir);
  m.state = std::make_unique<training::CheckpointState>(
      training::CheckpointState::load_checkpoint((dir / training::checkpoint_file()).string()));
  SessionOptions sessions;  // the plan cache: IPUConfig's executable_cache_dir (pipelined runs: none)
  if (m.ipu && m.ipu->stages() == 1) sessions.plan_cache_dir = m.ipu->executable_cache_dir;
  m.module = std::make_unique<training::Module>((dir / training::training_model_file()).string(), *m.state,
                                                (dir / training::eval_model_file()).string(), "cpu", sessions);
  for (const auto& [asked, name] : {std::pair{args_.bf16, "bf16"}, {args_.fp16, "fp16"}}) {
    if (asked && m.module->mixed_precision() != name)
      throw InvalidArgument(fmt::format(
          "{}=True, but the artifacts in '{}' were generated {}: generate them with `kiln artifacts "
          "--mixed-precision {}` (generate_artifacts(..., mixed_precision=\"{}\") in Python), or give the "
          "Trainer the ONNX model",
          name, m.artifacts_dir,
          m.module->mixed_precision().empty() ? "in float32" : "with " + m.module->mixed_precision(), name, name));
  }
  if (args_.bf16_full_eval || args_.fp16_full_eval)
    m.module->set_eval_precision(args_.bf16_full_eval ? DType::BFloat16 : DType::Float16);
  if (args_.pad_on_batch_axis)
    check_padding_is_masked(load_model((dir / training::training_model_file()).string()), label_columns(args_));
  if (m.module->scales_loss()) {
    m.scaler = std::make_unique<training::GradScaler>(scaler_options(m.deepspeed));
    m.module->set_loss_scale(static_cast<float>(m.scaler->scale()));
  }
  start_data_parallel(m.dist, *m.module, args_, m.deepspeed ? &*m.deepspeed : nullptr);
  state_.is_world_process_zero = m.dist.rank() == 0;
  state_.is_local_process_zero = !m.dist.distributed() || m.dist.comm->local_rank() == 0;
  const std::string optimizer_model = (dir / training::optimizer_model_file()).string();
  m.optimizer = m.dist.sharded()
                    ? std::make_unique<training::Optimizer>(optimizer_model, *m.module, m.dist.ddp->owned_ranges())
                    : std::make_unique<training::Optimizer>(optimizer_model, *m.module);
  m.optimizer->set_learning_rate(static_cast<float>(m.source.base_learning_rate(args_)));
  if (m.dist.pipelined()) start_pipeline(m);
  if (m.logits_output.empty()) {
    const auto outs = m.module->output_names(false);
    if (outs.size() > 1) m.logits_output = outs[1];
  }
  // HF's callback list: the flow, the report_to integrations, the user's, then the progress display.
  m.callbacks.context.model = m.module.get();
  m.callbacks.context.optimizer = m.optimizer.get();
  m.callbacks.add(std::make_shared<DefaultFlowCallback>());
  // Reports (TensorBoard, MLflow, files) from rank 0, the console from the ranks that log.
  if (state_.is_world_process_zero)
    for (auto& c : reporting_integration_callbacks(args_.report_to)) m.callbacks.add(std::move(c));
  for (auto& c : callbacks) m.callbacks.add(std::move(c));
  if (!m.dist.distributed() || args_.should_log()) {
    if (args_.disable_tqdm.value_or(false)) m.callbacks.add(std::make_shared<PrinterCallback>());
    else m.callbacks.add(std::make_shared<ProgressCallback>());
  }
  if (!args_.skip_memory_metrics) m.init_memory = memory_delta_since(init_start);
  m.callbacks.call(&TrainerCallback::on_init_end, args_, state_);
}

Trainer::~Trainer() = default;

training::Module& Trainer::module() { return *impl_->module; }

std::vector<std::string> Trainer::input_columns(bool training) {
  if (impl_->pipeline) return impl_->pipeline->info().model_inputs;
  return impl_->module->input_names(training);
}
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

void Trainer::set_log_hook(LogHook hook) { impl_->log_hook = std::move(hook); }

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
  if (counts_input_tokens(args_)) set("num_input_tokens_seen", static_cast<double>(state_.num_input_tokens_seen));
  nlohmann::json entry = nlohmann::json::object();
  for (const auto& [k, v] : logs) entry[k] = v;
  entry["step"] = state_.global_step;
  state_.log_history.push_back(std::move(entry));
  CallbackContext ctx;
  ctx.logs = &logs;
  impl_->callbacks.call(&TrainerCallback::on_log, args_, state_, ctx);
}

void Trainer::load_model_weights(const std::string& checkpoint_folder) {
  load_weights(*impl_, resolve_checkpoint(checkpoint_folder, args_.output_dir));
}

int64_t Trainer::num_examples(const data::DataLoader& loader) const {
  return static_cast<int64_t>(loader.num_examples());
}

double Trainer::floating_point_ops(const data::Example& batch) const {
  return 6.0 * static_cast<double>(impl_->module->get_parameters_size(false)) * estimated_tokens(batch);
}

}  // namespace kiln::trainer
