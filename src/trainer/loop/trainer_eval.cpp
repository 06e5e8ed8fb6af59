// Trainer::evaluate / predict (HF's evaluation_loop: the eval model over a sequential loader, the
// loss averaged over examples, predictions and labels gathered for compute_metrics) and the
// save_* / log_metrics helpers.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "ir/graph_editor.h"
#include "kiln/error.h"
#include "kiln/npy.h"
#include "kiln/onnx_io.h"
#include "kiln/safetensors.h"
#include "kiln/session.h"
#include "trainer/args/training_args_compat.h"
#include "trainer/loop/batch_padding.h"
#include "trainer/loop/gather.h"
#include "trainer/loop/trainer_impl.h"
#include "training/inference_mode.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

namespace {

// include_for_metrics: the model's main input and each example's loss, batch by batch.
struct MetricExtras {
  bool want_inputs = false, want_losses = false;
  std::string main_input;
  std::vector<Tensor> inputs, losses;

  MetricExtras(const TrainingArguments& args, const std::vector<std::string>& model_inputs) {
    want_inputs = detail::includes_for_metrics(args, "inputs");
    want_losses = detail::includes_for_metrics(args, "loss");
    const auto labels = label_columns(args);
    for (const auto& name : model_inputs)
      if (name == "input_ids" || (main_input.empty() && std::find(labels.begin(), labels.end(), name) == labels.end()))
        main_input = name;
  }
  void add(const data::Example& batch, int64_t n, std::optional<double> loss) {
    if (want_inputs && !main_input.empty())
      if (const auto it = batch.find(main_input); it != batch.end())
        inputs.push_back(first_rows(it->second, n).clone());
    if (want_losses && loss)
      losses.push_back(
          Tensor::from_vector<float>({n}, std::vector<float>(static_cast<size_t>(n), static_cast<float>(*loss))));
  }
};

struct LoopResult {
  PredictionOutput output;
  Tensor inputs, losses;  // include_for_metrics
  double loss_sum = 0;
  int64_t examples = 0;
  int64_t batches = 0;
  double runtime = 0;
  bool has_loss = true;
};

// Every rank's share of an evaluation, on every rank: the sums, and predictions and labels in
// dataset order.
void gather_results(const DistributedRun& dist, LoopResult& r) {
  if (!dist.distributed()) return;
  double sums[3] = {r.loss_sum, static_cast<double>(r.examples), static_cast<double>(r.batches)};
  dist.comm->allreduce_sum(sums, 3);
  r.loss_sum = sums[0];
  r.examples = static_cast<int64_t>(sums[1]);
  r.batches = static_cast<int64_t>(sums[2]);
  r.output.predictions = gather_in_dataset_order(dist, r.output.predictions);
  r.output.label_ids = gather_in_dataset_order(dist, r.output.label_ids);
  if (r.inputs.defined()) r.inputs = gather_in_dataset_order(dist, r.inputs);
  if (r.losses.defined()) r.losses = gather_in_dataset_order(dist, r.losses);
}

void finish_extras(MetricExtras& extras, LoopResult& r) {
  if (!extras.inputs.empty()) r.inputs = concat_padded(extras.inputs);
  if (!extras.losses.empty()) r.losses = concat_padded(extras.losses);
}

}  // namespace

// The last stage's results on every stage of its pipeline (as bytes: the sums, then predictions and
// labels as .npy).
static void share_last_stage_results(const DistributedRun& dist, LoopResult& r) {
  std::string mine;
  if (dist.stage + 1 == dist.stages) {
    const double sums[1] = {r.loss_sum};
    mine.append(reinterpret_cast<const char*>(sums), sizeof sums);
    for (const Tensor* t : {&r.output.predictions, &r.output.label_ids}) {
      const std::string npy = t->defined() ? serialize_npy(*t) : std::string();
      const uint64_t size = npy.size();
      mine.append(reinterpret_cast<const char*>(&size), sizeof size);
      mine += npy;
    }
  }
  const std::string last = dist.pipeline->allgather(mine).back();
  size_t at = sizeof(double);
  std::memcpy(&r.loss_sum, last.data(), sizeof(double));
  for (Tensor* t : {&r.output.predictions, &r.output.label_ids}) {
    uint64_t size = 0;
    std::memcpy(&size, last.data() + at, sizeof size);
    at += sizeof size;
    *t = size ? parse_npy(last.substr(at, size), "the last stage's predictions") : Tensor();
    at += size;
  }
}

// A pipelined run's evaluation: each replica's share of the dataset through its stages (the eval
// models, forward only), the last stage's loss and predictions shared with its pipeline, then the
// replicas' shares gathered in dataset order.
static LoopResult pipelined_evaluation_loop(Trainer::Impl& m, const TrainingArguments& args, const TrainerState& state,
                                            const std::shared_ptr<const data::Dataset>& dataset) {
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<const data::Sampler> sampler = std::make_shared<data::SequentialSampler>();
  if (m.dist.data_size() > 1)
    sampler = std::make_shared<data::DistributedSampler>(sampler, m.dist.data_rank(), m.dist.data_size(), false, false);
  data::DataLoader loader(dataset, static_cast<size_t>(args.per_device_eval_batch_size), sampler, false);
  const std::string label_name = label_columns(args).front();
  const auto columns = dataset->columns();
  if (std::find(columns.begin(), columns.end(), label_name) == columns.end())
    throw Unsupported(
        fmt::format("predict on data without '{}' in a pipelined run: its last stage computes the loss "
                    "from the labels",
                    label_name));
  if (detail::includes_for_metrics(args, "inputs") || detail::includes_for_metrics(args, "loss"))
    throw Unsupported("include_for_metrics in a pipelined run: its stages do not gather inputs or per-batch losses");
  const auto outputs = m.module->output_names(false);
  const bool last = m.pipeline->is_last();
  const auto logits_at = std::find(outputs.begin(), outputs.end(), m.logits_output);
  LoopResult r;
  std::vector<Tensor> predictions, labels;
  for (size_t b = 0; b < loader.num_batches(); ++b) {
    data::Example batch = loader.batch(0, b);
    const int64_t n = args.pad_on_batch_axis ? pad_batch(batch, args.per_device_eval_batch_size, label_columns(args))
                                             : batch.begin()->second.dim(0);
    const auto out = m.pipeline->evaluate(batch);
    r.examples += n;
    ++r.batches;
    if (last) {
      r.loss_sum += out.at(0).at(0).item_as_double() * static_cast<double>(n);
      if (!args.prediction_loss_only && logits_at != outputs.end()) {
        const auto lab = batch.find(label_name);
        const Tensor label = lab != batch.end() ? first_rows(lab->second, n) : Tensor();
        Tensor logits = first_rows(out[0][static_cast<size_t>(logits_at - outputs.begin())], n);
        if (m.preprocess_logits) logits = m.preprocess_logits(logits, label);
        predictions.push_back(logits);
        if (label.defined()) labels.push_back(label.clone());
      }
    }
    CallbackContext step_ctx;
    step_ctx.eval_dataloader = &loader;
    m.callbacks.call(&TrainerCallback::on_prediction_step, args, state, step_ctx);
  }
  r.output.predictions = concat_padded(predictions);
  r.output.label_ids = concat_padded(labels);
  share_last_stage_results(m.dist, r);
  DistributedRun replicas;  // the stage's ranks across replicas hold the replicas' shares
  replicas.comm = m.dist.stage_ranks;
  gather_results(replicas, r);
  r.runtime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// save_model of a pipelined run: the stages' parameters gathered, then model.safetensors and the
// inference model (the forward model the stages were cut from, with them) from the saving rank.
static void save_pipelined_model(Trainer::Impl& m, const TrainingArguments& args, const std::string& dir) {
  const std::map<std::string, Tensor> weights = gather_pipeline_state(m, true).weights;  // every rank takes part
  if (!args.should_save() || m.dist.replica != 0) return;
  const fs::path out = dir.empty() ? fs::path(args.output_dir) : fs::path(dir);
  fs::create_directories(out);
  Model model = load_model((fs::path(m.artifacts_dir).parent_path() / "forward.onnx").string());
  for (auto& [name, t] : model.graph.initializers)
    if (const auto it = weights.find(name); it != weights.end()) t = it->second;
  training::to_inference_mode(model.graph);
  if (!m.logits_output.empty()) {
    std::erase_if(model.graph.outputs, [&](const ValueInfo& v) { return v.name != m.logits_output; });
    prune(model.graph);
  }
  save_model(model, (out / "model.onnx").string());
  std::vector<std::pair<std::string, Tensor>> tensors(weights.begin(), weights.end());
  write_safetensors((out / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

// A dataset without labels (HF's predict on unlabelled data): no loss, only predictions, from an
// inference model holding the current weights.
static void predict_unlabelled(Trainer::Impl& m, const TrainingArguments& args, const TrainerState& state,
                               const data::DataLoader& loader, const std::string& label_name, LoopResult& r) {
  std::vector<Tensor> predictions;
  if (m.logits_output.empty())
    throw InvalidArgument(
        fmt::format("the dataset has no '{}' column and the model has no prediction output "
                    "besides its loss",
                    label_name));
  const std::string path =
      (fs::path(m.artifacts_dir) / (m.dist.distributed() ? fmt::format("predict_model.rank{}.onnx", m.dist.rank())
                                                         : std::string("predict_model.onnx")))
          .string();
  m.module->export_model_for_inferencing(path, {m.logits_output});
  Session session(load_model(path));
  MetricExtras extras(args, m.module->input_names(false));
  for (size_t b = 0; b < loader.num_batches(); ++b) {
    data::Example batch = loader.batch(0, b);
    const int64_t n = args.pad_on_batch_axis ? pad_batch(batch, args.per_device_eval_batch_size, {label_name})
                                             : batch.begin()->second.dim(0);
    std::map<std::string, Tensor> feeds;
    for (const auto& in : session.inputs()) {
      auto it = batch.find(in.name);
      if (it == batch.end())
        throw InvalidArgument(fmt::format("the model takes input '{}', which the batch lacks", in.name));
      feeds[in.name] = it->second;
    }
    Tensor logits = first_rows(session.run(feeds).at(m.logits_output), n);
    if (m.preprocess_logits) logits = m.preprocess_logits(logits, Tensor());
    r.examples += n;
    ++r.batches;
    if (!args.prediction_loss_only) predictions.push_back(logits);
    extras.add(batch, n, std::nullopt);
    CallbackContext step_ctx;
    step_ctx.eval_dataloader = &loader;
    m.callbacks.call(&TrainerCallback::on_prediction_step, args, state, step_ctx);
  }
  r.output.predictions = concat_padded(predictions);
  finish_extras(extras, r);
  r.has_loss = false;
  gather_results(m.dist, r);
}

static LoopResult evaluation_loop(Trainer::Impl& m, const TrainingArguments& args, const TrainerState& state,
                                  const std::shared_ptr<const data::Dataset>& dataset) {
  if (m.pipeline) return pipelined_evaluation_loop(m, args, state, dataset);
  const auto start = std::chrono::steady_clock::now();
  // A distributed run evaluates a share per rank (items r, r + N, ...; nothing padded), then
  // gathers the predictions in dataset order (evaluation_results below).
  std::shared_ptr<const data::Sampler> sampler = std::make_shared<data::SequentialSampler>();
  if (m.dist.distributed())
    sampler = std::make_shared<data::DistributedSampler>(sampler, m.dist.rank(), m.dist.size(), false, false);
  data::DataLoader loader(dataset, static_cast<size_t>(args.per_device_eval_batch_size), sampler, false);
  LoopResult r;
  std::vector<Tensor> predictions, labels;
  const auto outputs = m.module->output_names(false);
  size_t logits_index = outputs.size();
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i] == m.logits_output) logits_index = i;
  const std::string label_name = args.label_names && !args.label_names->empty() ? args.label_names->front() : "labels";
  const auto columns = dataset->columns();
  const auto eval_inputs = m.module->input_names(false);
  const bool unlabelled = std::find(columns.begin(), columns.end(), label_name) == columns.end() &&
                          std::find(eval_inputs.begin(), eval_inputs.end(), label_name) != eval_inputs.end();
  if (unlabelled) {
    predict_unlabelled(m, args, state, loader, label_name, r);
    r.runtime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  MetricExtras extras(args, eval_inputs);
  m.module->eval();
  for (size_t b = 0; b < loader.num_batches(); ++b) {
    data::Example batch = loader.batch(0, b);
    // pad_on_batch_axis: one shape for every batch; the padded rows' labels are ignored by the loss,
    // and their predictions dropped.
    const int64_t n = args.pad_on_batch_axis ? pad_batch(batch, args.per_device_eval_batch_size, label_columns(args))
                                             : batch.begin()->second.dim(0);
    std::vector<Tensor> inputs;
    for (const auto& name : m.module->input_names(false)) {
      auto it = batch.find(name);
      if (it == batch.end())
        throw InvalidArgument(fmt::format("the eval model takes input '{}', which the batch lacks", name));
      inputs.push_back(it->second);
    }
    const std::vector<Tensor> out = (*m.module)(inputs);
    r.loss_sum += out.at(0).item_as_double() * static_cast<double>(n);
    extras.add(batch, n, out.at(0).item_as_double());
    r.examples += n;
    ++r.batches;
    CallbackContext step_ctx;
    step_ctx.eval_dataloader = &loader;
    if (!args.prediction_loss_only && logits_index < out.size()) {
      auto lab = batch.find(label_name);
      Tensor logits = first_rows(out[logits_index], n);
      const Tensor label = lab != batch.end() ? first_rows(lab->second, n) : Tensor();
      if (m.preprocess_logits) logits = m.preprocess_logits(logits, label);
      predictions.push_back(logits);
      if (label.defined()) labels.push_back(label.clone());
    }
    m.callbacks.call(&TrainerCallback::on_prediction_step, args, state, step_ctx);
  }
  m.module->train();
  r.output.predictions = concat_padded(predictions);
  r.output.label_ids = concat_padded(labels);
  finish_extras(extras, r);
  gather_results(m.dist, r);
  r.runtime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

static Metrics finish_metrics(Trainer::Impl& m, LoopResult& r, const std::string& prefix) {
  Metrics metrics;
  if (m.compute_metrics && r.output.predictions.defined() && r.output.label_ids.defined())
    metrics = m.compute_metrics(EvalPrediction{r.output.predictions, r.output.label_ids, r.inputs, r.losses});
  Metrics out;
  for (const auto& [k, v] : metrics) out[k.rfind(prefix + "_", 0) == 0 ? k : prefix + "_" + k] = v;
  if (r.examples > 0 && r.has_loss) out[prefix + "_loss"] = r.loss_sum / static_cast<double>(r.examples);
  out[prefix + "_runtime"] = r.runtime;
  out[prefix + "_samples_per_second"] = r.runtime > 0 ? static_cast<double>(r.examples) / r.runtime : 0.0;
  out[prefix + "_steps_per_second"] = r.runtime > 0 ? static_cast<double>(r.batches) / r.runtime : 0.0;
  return out;
}

// HF's names: the stage is "eval" for evaluate and "test" for predict, whatever the metric prefix.
static void add_memory_metrics(Metrics& metrics, const std::string& stage, const MemoryUsage& start) {
  const MemoryDelta d = memory_delta_since(start);
  metrics[stage + "_mem_cpu_alloc_delta"] = d.alloc;
  metrics[stage + "_mem_cpu_peaked_delta"] = d.peaked;
}

Metrics Trainer::evaluate(const std::shared_ptr<const data::Dataset>& eval_dataset,
                          const std::string& metric_key_prefix) {
  auto dataset = eval_dataset ? eval_dataset : impl_->eval_dataset;
  if (!dataset) throw InvalidArgument("Trainer.evaluate() needs an eval_dataset");
  const bool measure = !args_.skip_memory_metrics && !impl_->measuring_train;  // HF's tracker: not inside train()
  const MemoryUsage start = measure ? memory_usage(true) : MemoryUsage{};
  Metrics metrics;
  if (impl_->evaluation_hook) {
    metrics = impl_->evaluation_hook(metric_key_prefix, "Evaluation").metrics;
  } else {
    LoopResult r = evaluation_loop(*impl_, args_, state_, dataset);
    metrics = finish_metrics(*impl_, r, metric_key_prefix);
  }
  if (measure) add_memory_metrics(metrics, "eval", start);
  // HF logs the metrics (which adds "epoch" to them) and hands them to on_evaluate.
  if (impl_->log_hook) impl_->log_hook(Logs(metrics.begin(), metrics.end()));
  else log(Logs(metrics.begin(), metrics.end()));
  metrics["epoch"] = state_.epoch;
  CallbackContext ctx;
  ctx.metrics = &metrics;
  impl_->callbacks.call(&TrainerCallback::on_evaluate, args_, state_, ctx);
  return metrics;
}

Metrics Trainer::evaluate(const std::map<std::string, std::shared_ptr<const data::Dataset>>& eval_datasets) {
  Metrics all;
  for (const auto& [name, dataset] : eval_datasets) {
    const Metrics m = evaluate(dataset, "eval_" + name);
    all.insert(m.begin(), m.end());
  }
  return all;
}

PredictionOutput Trainer::predict(const std::shared_ptr<const data::Dataset>& test_dataset,
                                  const std::string& metric_key_prefix) {
  if (!test_dataset) throw InvalidArgument("Trainer.predict() needs a test_dataset");
  const bool measure = !args_.skip_memory_metrics && !impl_->measuring_train;
  const MemoryUsage start = measure ? memory_usage(true) : MemoryUsage{};
  LoopResult r;
  if (impl_->evaluation_hook) {
    r.output = impl_->evaluation_hook(metric_key_prefix, "Prediction");
  } else {
    r = evaluation_loop(*impl_, args_, state_, test_dataset);
    r.output.metrics = finish_metrics(*impl_, r, metric_key_prefix);
  }
  if (measure) add_memory_metrics(r.output.metrics, "test", start);
  CallbackContext ctx;
  ctx.metrics = &r.output.metrics;
  impl_->callbacks.call(&TrainerCallback::on_predict, args_, state_, ctx);
  return r.output;
}

PredictionStep Trainer::prediction_step(const data::Example& batch, bool prediction_loss_only) {
  Impl& m = *impl_;
  if (m.pipeline) throw Unsupported("Trainer.prediction_step: a pipelined model has no whole eval model on one rank");
  const auto names = m.module->input_names(false);
  std::vector<Tensor> inputs;
  for (const auto& name : names) {
    auto it = batch.find(name);
    if (it == batch.end())
      throw InvalidArgument(
          fmt::format("Trainer.prediction_step: the eval model takes input '{}', which the batch "
                      "lacks (model inputs: {})",
                      name, fmt::join(names, ", ")));
    inputs.push_back(it->second);
  }
  struct EvalMode {  // the module back in training mode however the run ends
    training::Module& module;
    explicit EvalMode(training::Module& mod) : module(mod) { module.eval(); }
    ~EvalMode() { module.train(); }
    EvalMode(const EvalMode&) = delete;
    EvalMode& operator=(const EvalMode&) = delete;
  } mode(*m.module);
  const std::vector<Tensor> out = (*m.module)(inputs);
  PredictionStep step;
  step.loss = out.at(0).item_as_double();
  const auto outputs = m.module->output_names(false);
  for (size_t i = 0; i < outputs.size() && i < out.size(); ++i)
    if (!prediction_loss_only && outputs[i] == m.logits_output) step.logits = out[i].clone();
  const auto labels = label_columns(args_);
  if (auto it = batch.find(labels.front()); it != batch.end()) step.labels = it->second.clone();
  return step;
}

void Trainer::set_evaluation_hook(EvaluationHook hook) {
  if (hook && (impl_->pipeline || impl_->dist.distributed()))
    throw Unsupported(
        "an evaluation_loop / prediction_step override runs on one process; this run is distributed or "
        "pipelined");
  impl_->evaluation_hook = std::move(hook);
}

void Trainer::on_prediction_step() {
  impl_->callbacks.call(&TrainerCallback::on_prediction_step, args_, state_, CallbackContext{});
}

void Trainer::save_model(const std::string& dir) const {
  if (impl_->pipeline) return save_pipelined_model(*impl_, args_, dir);
  if (impl_->dist.distributed() && !args_.should_save()) return;  // HF: only the saving rank writes
  const fs::path out = dir.empty() ? fs::path(args_.output_dir) : fs::path(dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw IOError(fmt::format("cannot create '{}': {}", out.string(), ec.message()));
  std::vector<std::string> outputs;
  if (!impl_->logits_output.empty()) outputs.push_back(impl_->logits_output);
  else outputs = impl_->module->output_names(false);
  impl_->module->export_model_for_inferencing((out / "model.onnx").string(), outputs);
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const auto& name : impl_->module->parameter_names())
    weights.emplace_back(name, impl_->state->parameter(name).data());
  write_safetensors((out / "model.safetensors").string(), weights, {{"format", "pt"}});
}

void Trainer::save_state() const {
  if (!state_.is_world_process_zero) return;
  write_file_atomically((fs::path(args_.output_dir) / "trainer_state.json").string(), state_.to_json().dump(2) + "\n");
}

void Trainer::log_metrics(const std::string& split, const Metrics& metrics) const {
  if (!state_.is_world_process_zero) return;
  std::cout << "***** " << split << " metrics *****\n";
  size_t width = 0;
  for (const auto& [k, v] : metrics) width = std::max(width, k.size());
  for (const auto& [k, v] : metrics) std::cout << fmt::format("  {:<{}} = {:.6g}\n", k, width, v);
}

void Trainer::save_metrics(const std::string& split, const Metrics& metrics, bool combined) const {
  if (!state_.is_world_process_zero) return;
  nlohmann::json j;
  for (const auto& [k, v] : metrics) j[k] = v;
  const fs::path dir(args_.output_dir);
  write_file_atomically((dir / (split + "_results.json")).string(), j.dump(4) + "\n");
  if (!combined) return;
  const fs::path all = dir / "all_results.json";
  nlohmann::json merged = nlohmann::json::object();
  if (fs::exists(all)) {
    try {
      merged = parse_json(read_file_bytes(all.string(), "results file", kMaxJsonBytes), all.string());
    } catch (const std::exception&) {
      merged = nlohmann::json::object();
    }
  }
  merged.update(j);
  write_file_atomically(all.string(), merged.dump(4) + "\n");
}

}  // namespace kiln::trainer
