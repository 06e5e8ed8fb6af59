// ModelSource: the Trainer's model, turned into training artifacts with the optimizer that
// TrainingArguments asks for (HF's optim names and hyperparameters; no weight decay on biases and
// LayerNorm weights, as the HF Trainer).
#include <fmt/format.h>

#include <filesystem>

#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/pipeline.h"
#include "models/builtin.h"
#include "trainer/args/training_args_compat.h"
#include "trainer/loop/artifact_cache.h"
#include "trainer/loop/distributed_run.h"
#include "trainer/loop/trainer_impl.h"

namespace kiln::trainer {

ModelSource ModelSource::onnx(std::string path, training::LossType loss) {
  ModelSource s;
  s.kind = Kind::Onnx;
  s.path_or_name = std::move(path);
  s.loss = loss;
  return s;
}

ModelSource ModelSource::artifacts(std::string dir) {
  ModelSource s;
  s.kind = Kind::Artifacts;
  s.path_or_name = std::move(dir);
  return s;
}

ModelSource ModelSource::builtin(std::string name) {
  ModelSource s;
  s.kind = Kind::Builtin;
  s.path_or_name = std::move(name);
  return s;
}

ModelSource ModelSource::builtin(std::string name, nlohmann::json model_config) {
  ModelSource s = builtin(std::move(name));
  s.model_config = std::move(model_config);
  return s;
}

std::vector<std::string> ModelSource::builtin_names() { return builtin_model_names(); }

namespace {

training::ArtifactOptions optimizer_options(const TrainingArguments& args, const Model& forward) {
  training::ArtifactOptions o;
  o.learning_rate = static_cast<float>(args.learning_rate);
  const std::string optim(to_string(args.optim));
  if (args.lamb || args.lamb_no_bias_correction) {  // IPUTrainingArguments: LAMB replaces optim
    o.optimizer = training::OptimType::Lamb;
    o.lamb.beta1 = static_cast<float>(args.adam_beta1);
    o.lamb.beta2 = static_cast<float>(args.adam_beta2);
    o.lamb.epsilon = static_cast<float>(args.adam_epsilon);
    o.lamb.weight_decay = static_cast<float>(args.weight_decay);
    o.lamb.bias_correction = !args.lamb_no_bias_correction;
  } else if (optim == "adamw_torch" || optim == "adamw_torch_fused" || optim == "adamw_hf") {
    o.optimizer = training::OptimType::AdamW;
    o.adamw.beta1 = static_cast<float>(args.adam_beta1);
    o.adamw.beta2 = static_cast<float>(args.adam_beta2);
    o.adamw.epsilon = static_cast<float>(args.adam_epsilon);
    o.adamw.weight_decay = static_cast<float>(args.weight_decay);
    o.adamw.hf_variant = optim == "adamw_hf";
  } else if (optim == "sgd") {
    o.optimizer = training::OptimType::SGD;
    o.sgd.weight_decay = static_cast<float>(args.weight_decay);
  } else if (optim == "adagrad") {  // HF: torch.optim.Adagrad(lr, weight_decay, **optim_args)
    o.optimizer = training::OptimType::Adagrad;
    o.adagrad = detail::adagrad_options(args);
  } else if (optim == "adafactor") {  // HF: Adafactor(lr, weight_decay, scale_parameter=False, relative_step=False)
    o.optimizer = training::OptimType::Adafactor;
    o.adafactor.weight_decay = static_cast<float>(args.weight_decay);
    o.adafactor.scale_parameter = false;
    o.adafactor.relative_step = false;
  } else {
    throw Unsupported(
        fmt::format("optim '{}': Kiln's Trainer runs adamw_torch, adamw_hf, sgd, adagrad and adafactor", optim));
  }
  o.no_weight_decay = training::no_weight_decay_parameters(forward);
  return o;
}

// HF's `optimizers` override: the source's own optimizer replaces TrainingArguments.optim.
void apply_override(const ModelSource& source, training::ArtifactOptions& o) {
  if (!source.optimizer) return;
  o.optimizer = source.optimizer;
  o.adamw = source.adamw;
  o.sgd = source.sgd;
  o.lamb = source.lamb;
  o.adagrad = source.adagrad;
  o.adafactor = source.adafactor;
  if (source.no_weight_decay) o.no_weight_decay = *source.no_weight_decay;
  if (source.learning_rate) o.learning_rate = static_cast<float>(*source.learning_rate);
}

}  // namespace

std::string prepare_artifacts(const ModelSource& source, const TrainingArguments& args, std::string* logits_output,
                              bool write, nlohmann::json* fingerprint, const IPUConfig* ipu, int stage) {
  namespace fs = std::filesystem;
  if (source.kind == ModelSource::Kind::Artifacts) {
    if (ipu && ipu->stages() > 1)
      throw Unsupported(
          "pipeline stages are cut from the forward model: give the Trainer the ONNX model (or a built-in model), "
          "not an artifacts folder");
    if (ipu && ipu->lm_head_chunks() > 1)
      throw Unsupported(fmt::format(
          "IPUConfig: embedding / projection_serialization_factor={} rewrites the training model when Kiln generates "
          "it: give the Trainer the ONNX model (or a built-in model), not an artifacts folder",
          ipu->lm_head_chunks()));
    *logits_output = source.logits_output;
    return source.path_or_name;
  }
  Model forward = source.kind == ModelSource::Kind::Builtin
                      ? make_builtin_model(source.path_or_name, static_cast<uint64_t>(args.seed), source.model_config)
                      : load_model(source.path_or_name);
  if (forward.graph.outputs.empty()) throw InvalidModel("the model has no outputs");
  if (fingerprint) {
    *fingerprint = nlohmann::json::array();
    for (const auto& [name, t] : forward.graph.initializers) fingerprint->push_back({name, tensor_checksum(t)});
  }
  const std::string logits = source.logits_output.empty() ? forward.graph.outputs.front().name : source.logits_output;
  training::ArtifactOptions o = optimizer_options(args, forward);
  apply_override(source, o);
  o.loss = source.kind == ModelSource::Kind::Builtin ? training::LossType::CrossEntropyLoss : source.loss;
  o.frozen_params = source.frozen_params;
  o.recompute.enabled = args.gradient_checkpointing;
  if (const auto it = args.gradient_checkpointing_kwargs.find("boundaries");
      it != args.gradient_checkpointing_kwargs.end())
    o.recompute.boundaries = it->get<std::vector<std::string>>();
  o.mixed_precision = args.bf16 ? DType::BFloat16 : args.fp16 ? DType::Float16 : DType::Float32;
  o.label_smoothing = static_cast<float>(args.label_smoothing_factor);
  if (ipu) o.lm_head_chunks = ipu->lm_head_chunks();
  if (o.label_smoothing != 0 && o.loss != training::LossType::CrossEntropyLoss)
    throw InvalidArgument(fmt::format("label_smoothing_factor {} needs the CrossEntropyLoss; the model's loss is {}",
                                      args.label_smoothing_factor, training::to_string(o.loss)));
  if (o.loss != training::LossType::None) {
    o.loss_input_names = {logits};
    o.additional_output_names = {logits};
    *logits_output = logits;
  } else {
    // A model that computes its own loss (HF's convention: outputs loss, logits, ...): the first
    // output is the loss; the others stay outputs, and predictions come from logits_output or the
    // second output.
    const auto& outs = forward.graph.outputs;
    for (size_t i = 1; i < outs.size(); ++i) o.additional_output_names.push_back(outs[i].name);
    if (!source.logits_output.empty()) *logits_output = source.logits_output;
    else if (outs.size() > 1) *logits_output = outs[1].name;
  }
  std::string dir = (fs::path(args.output_dir) / "artifacts").string();
  if (ipu && ipu->stages() > 1) {  // this rank's pipeline stage
    const auto layers = ipu->layers_per_stage(static_cast<int64_t>(training::find_layers(forward).size()));
    if (write) training::generate_pipeline_artifacts(forward, o, layers, dir, stage);
    if (write && stage == 0) save_model(forward, (fs::path(dir) / "forward.onnx").string());  // for save_model
    return training::stage_directory(dir, stage);
  }
  if (!write) return dir;
  const std::string cache = ipu ? ipu->executable_cache_dir : std::string();
  const std::string key = cache.empty() ? std::string() : artifact_cache_key(forward, o);
  if (!cache.empty() && restore_cached_artifacts(cache, key, dir)) return dir;
  const std::vector<std::string> files = training::generate_artifacts(forward, o, dir);
  if (!cache.empty()) store_cached_artifacts(cache, key, files);
  return dir;
}

}  // namespace kiln::trainer
