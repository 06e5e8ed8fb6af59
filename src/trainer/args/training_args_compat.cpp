#include "trainer/args/training_args_compat.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiln/error.h"

namespace kiln::trainer::detail {

namespace {

using K = CompatField::Kind;
using R = CompatField::Rule;
using Json = nlohmann::json;

// The current release's fields.
std::vector<CompatField> current_fields() {
  return {
      {"optim_args", K::OptStr, nullptr, R::Read,
       "optim='adagrad': \"lr_decay=...,initial_accumulator_value=...,eps=...,maximize=...\"; for the other optimizers "
       "Unsupported (their hyperparameters are adam_beta1/2, adam_epsilon and weight_decay)"},
      {"optim_target_modules", K::Any, nullptr, R::Refused, "GaLore / APOLLO target modules: not built"},
      {"average_tokens_across_devices", K::Bool, true, R::NoEffect,
       "Kiln's losses are means over each batch, averaged over the ranks as DDP averages gradients"},
      {"tf32", K::OptBool, nullptr, R::NoEffect,
       "TensorFloat-32 is a GPU matmul mode; Kiln computes float32 on the CPU"},
      {"torch_compile", K::Bool, false, R::Refused,
       "torch.compile is PyTorch's compiler; Kiln runs its own planned graphs (no torch model to compile)"},
      {"torch_compile_backend", K::OptStr, nullptr, R::Refused, "it implies torch_compile, which Kiln does not run"},
      {"torch_compile_mode", K::OptStr, nullptr, R::Refused, "it implies torch_compile, which Kiln does not run"},
      {"use_liger_kernel", K::Bool, false, R::Refused, "Liger's Triton kernels are for CUDA models"},
      {"liger_kernel_config", K::Any, nullptr, R::Refused, "Liger's Triton kernels are for CUDA models"},
      {"use_cache", K::Bool, false, R::NoEffect, "the key/value cache serves generation; training does not use it"},
      {"neftune_noise_alpha", K::OptFloat, nullptr, R::Refused, "NEFTune's embedding noise is not built"},
      {"torch_empty_cache_steps", K::OptInt, nullptr, R::NoEffect,
       "it empties a GPU allocator's cache; Kiln's CPU memory is planned per graph"},
      {"auto_find_batch_size", K::Bool, false, R::Refused,
       "the search retries on CUDA out-of-memory errors; give per_device_train_batch_size"},
      {"log_level_replica", K::Str, "warning", R::NoEffect,
       "ranks other than the logging ones print nothing but errors (log_on_each_node chooses them)"},
      {"project", K::Str, "huggingface", R::NoEffect,
       "Trackio's project; Kiln reports to TensorBoard, MLflow and files"},
      {"trackio_space_id", K::OptStr, "trackio", R::NoEffect, "Trackio's Space; Kiln runs offline"},
      {"eval_on_start", K::Bool, false, R::Read, "evaluates once before the first step"},
      {"eval_do_concat_batches", K::Bool, true, R::Refused,
       "Kiln gathers predictions and labels as concatenated arrays (padded with -100), not lists of batches"},
      {"eval_use_gather_object", K::Bool, false, R::Refused, "Kiln gathers arrays, not Python objects"},
      {"include_for_metrics", K::Any, Json::array(), R::Read,
       "a list of \"inputs\" (EvalPrediction.inputs: the model's main input, input_ids when it takes them) and "
       "\"loss\" (EvalPrediction.losses: each batch's loss, once per example)"},
      {"batch_eval_metrics", K::Bool, false, R::Refused,
       "compute_metrics runs once over the gathered predictions (batch-wise metrics are not built)"},
      {"enable_jit_checkpoint", K::Bool, false, R::Refused,
       "the Trainer installs no signal handler; `kiln train` writes a checkpoint on SIGINT / SIGTERM itself"},
      {"push_to_hub", K::Bool, false, R::Refused, "Kiln runs offline and uploads nothing"},
      {"hub_token", K::OptStr, nullptr, R::NoEffect, "used with push_to_hub only"},
      {"hub_private_repo", K::OptBool, nullptr, R::NoEffect, "used with push_to_hub only"},
      {"hub_model_id", K::OptStr, nullptr, R::NoEffect, "used with push_to_hub only"},
      {"hub_strategy", K::Str, "every_save", R::NoEffect, "used with push_to_hub only"},
      {"hub_always_push", K::Bool, false, R::NoEffect, "used with push_to_hub only"},
      {"hub_revision", K::OptStr, nullptr, R::NoEffect, "used with push_to_hub only"},
      {"accelerator_config", K::Any, nullptr, R::NoEffect,
       "Accelerate's dataloader settings; Kiln's loader shards and orders data itself (docs/distributed.md)"},
      {"parallelism_config", K::Any, nullptr, R::Refused,
       "Accelerate's tensor / context parallelism: use ddp_* / deepspeed, or an IPUConfig's pipeline stages"},
      {"dataloader_pin_memory", K::Bool, true, R::NoEffect,
       "pinned memory speeds host-to-GPU copies; Kiln is on the CPU"},
      {"remove_unused_columns", K::Bool, true, R::Read,
       "Python: the items' columns that the model's inputs (an ONNX model's input names, a torch or kiln.nn "
       "forward's parameters) and the label names do not use are dropped before collation; the C++ loader feeds "
       "the model the columns named like its inputs either way"},
      {"train_sampling_strategy", K::Str, "random", R::Read,
       "'random', 'sequential' or 'group_by_length' (as group_by_length=True)"},
      {"length_column_name", K::Str, "length", R::Read,
       "group_by_length: the column holding each item's length (else the length of its input_ids)"},
      {"fsdp", K::Any, nullptr, R::Refused,
       "FSDP shards PyTorch modules; shard the optimizer state with deepspeed (ZeRO)"},
      {"fsdp_config", K::Any, nullptr, R::Refused,
       "FSDP shards PyTorch modules; shard the optimizer state with deepspeed (ZeRO)"},
      {"debug", K::Any, "", R::Refused, "underflow_overflow / tpu_metrics_debug are PyTorch debugging hooks"},
  };
}

// v4's names that scripts still pass.
std::vector<CompatField> v4_fields() {
  return {
      {"per_gpu_train_batch_size", K::OptInt, nullptr, R::Read, "v4: replaces per_device_train_batch_size"},
      {"per_gpu_eval_batch_size", K::OptInt, nullptr, R::Read, "v4: replaces per_device_eval_batch_size"},
      {"fp16_backend", K::Str, "auto", R::Read, "v4's name of half_precision_backend"},
      {"fp16_opt_level", K::Str, "O1", R::Refused, "apex's AMP optimization levels; Kiln's fp16 is its own"},
      {"push_to_hub_model_id", K::OptStr, nullptr, R::NoEffect, "used with push_to_hub only"},
      {"push_to_hub_organization", K::OptStr, nullptr, R::NoEffect, "used with push_to_hub only"},
      {"push_to_hub_token", K::OptStr, nullptr, R::NoEffect, "used with push_to_hub only"},
      {"no_cuda", K::Bool, false, R::NoEffect, "Kiln runs on the CPU either way"},
      {"use_mps_device", K::Bool, false, R::NoEffect, "Kiln runs on the CPU either way"},
      {"jit_mode_eval", K::Bool, false, R::NoEffect, "Kiln's eval model is a planned graph already (no TorchScript)"},
      {"use_ipex", K::Bool, false, R::NoEffect, "Kiln calls oneDNN itself (no Intel Extension for PyTorch)"},
      {"tpu_num_cores", K::OptInt, nullptr, R::NoEffect, "TPUs are not Kiln's"},
      {"tpu_metrics_debug", K::Bool, false, R::NoEffect, "TPUs are not Kiln's"},
      {"past_index", K::Int, -1, R::Refused, "models that return mems (Transformer-XL, XLNet) are not supported"},
      {"group_by_length", K::Bool, false, R::Read,
       "HF's LengthGroupedSampler: seeded mega-batches sorted by length (data::LengthGroupedSampler)"},
      {"include_inputs_for_metrics", K::Bool, false, R::Read, "v4's include_for_metrics=[\"inputs\"]"},
      {"use_legacy_prediction_loop", K::Bool, false, R::NoEffect, "Kiln has one evaluation loop"},
      {"torchdynamo", K::OptStr, nullptr, R::Refused, "torch.compile's backend: Kiln runs its own planned graphs"},
      {"ray_scope", K::Str, "last", R::NoEffect, "a Ray Tune hyperparameter-search setting"},
      {"sharded_ddp", K::Any, "", R::Refused,
       "FairScale's sharded DDP: shard the optimizer state with deepspeed (ZeRO)"},
      {"fsdp_min_num_params", K::Int, 0, R::Refused, "FSDP shards PyTorch modules"},
      {"fsdp_transformer_layer_cls_to_wrap", K::OptStr, nullptr, R::Refused, "FSDP shards PyTorch modules"},
      {"mp_parameters", K::Str, "", R::NoEffect, "SageMaker's model-parallel settings"},
      {"adafactor", K::Bool, false, R::Read, "v4: True replaces optim with \"adafactor\""},
      {"dispatch_batches", K::OptBool, nullptr, R::NoEffect, "Accelerate's batch dispatching"},
      {"split_batches", K::OptBool, nullptr, R::NoEffect, "Accelerate's batch splitting"},
      {"save_safetensors", K::Bool, true, R::Refused, "Kiln writes safetensors only (no pytorch_model.bin)"},
  };
}

const std::vector<CompatField>& table() {
  static const std::vector<CompatField> t = [] {
    std::vector<CompatField> all = current_fields();
    for (auto& f : v4_fields()) all.push_back(std::move(f));
    return all;
  }();
  return t;
}

bool is_default(const TrainingArguments& a, const CompatField& f) {
  const auto it = a.hf_compat.find(f.name);
  if (it == a.hf_compat.end()) return true;
  const Json& v = *it;
  if (f.kind == K::Any &&
      (v.is_null() || (v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty())))
    return f.default_value.is_null() || f.default_value == "" || f.default_value == Json::array();
  return v == f.default_value;
}

void check_choice(const TrainingArguments& a, const char* name, const std::set<std::string>& choices) {
  const std::string v = a.compat(name).get<std::string>();
  if (!choices.count(v)) {
    std::string all;
    for (const auto& c : choices) all += (all.empty() ? "" : ", ") + c;
    throw InvalidArgument(fmt::format("{} '{}' is not one of {}", name, v, all));
  }
}

}  // namespace

const std::vector<CompatField>& compat_fields() { return table(); }

}  // namespace kiln::trainer::detail

namespace kiln::trainer {

const nlohmann::json& TrainingArguments::compat(const std::string& name) const {
  for (const detail::CompatField& f : detail::compat_fields()) {
    if (name != f.name) continue;
    const auto it = hf_compat.find(name);
    return it == hf_compat.end() ? f.default_value : *it;
  }
  throw KeyError(fmt::format("'{}' is not one of Hugging Face's fields that Kiln keeps by name", name));
}

}  // namespace kiln::trainer

namespace kiln::trainer::detail {

void apply_compat(TrainingArguments& a) {
  for (const CompatField& f : table()) {
    if (f.rule == R::Refused && !is_default(a, f))
      throw Unsupported(fmt::format("{}={}: {}", f.name, a.compat(f.name).dump(), f.reason));
  }
  if (const Json& v = a.compat("per_gpu_train_batch_size"); !v.is_null())
    a.per_device_train_batch_size = v.get<int64_t>();
  if (const Json& v = a.compat("per_gpu_eval_batch_size"); !v.is_null())
    a.per_device_eval_batch_size = v.get<int64_t>();
  if (const std::string b = a.compat("fp16_backend").get<std::string>(); b != "auto") a.half_precision_backend = b;
  if (a.compat("adafactor").get<bool>()) a.optim = OptimizerName::adafactor;  // HF's __post_init__
  check_choice(a, "train_sampling_strategy", {"random", "sequential", "group_by_length"});
  if (!a.compat("optim_args").is_null() && a.optim != OptimizerName::adagrad)
    throw Unsupported(
        fmt::format("optim_args={}: Kiln reads optim_args for optim='adagrad' only; optim '{}' takes "
                    "adam_beta1/2, adam_epsilon and weight_decay",
                    a.compat("optim_args").dump(), to_string(a.optim)));
  const Json& include = a.compat("include_for_metrics");
  if (!include.is_array())
    throw InvalidArgument(
        fmt::format("include_for_metrics must be a list of \"inputs\" and \"loss\", not {}", include.dump()));
  for (const Json& v : include)
    if (!v.is_string() || (v != "inputs" && v != "loss"))
      throw InvalidArgument(fmt::format("include_for_metrics: {} is not one of \"inputs\" and \"loss\"", v.dump()));
  check_choice(a, "hub_strategy", {"end", "every_save", "checkpoint", "all_checkpoints"});
  check_choice(a, "log_level_replica", {"debug", "info", "warning", "error", "critical", "passive"});
}

training::AdagradOptions adagrad_options(const TrainingArguments& a) {
  training::AdagradOptions o;
  o.weight_decay = static_cast<float>(a.weight_decay);
  const Json& text = a.compat("optim_args");
  if (text.is_null()) return o;
  const std::string args = text.get<std::string>();
  size_t start = 0;
  while (start <= args.size()) {
    size_t end = args.find(',', start);
    if (end == std::string::npos) end = args.size();
    std::string item = args.substr(start, end - start);
    start = end + 1;
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw InvalidArgument(fmt::format("optim_args '{}': '{}' is not key=value", args, item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "maximize") {
      if (value != "True" && value != "False" && value != "true" && value != "false")
        throw InvalidArgument(fmt::format("optim_args: maximize={} is not True or False", value));
      o.maximize = value == "True" || value == "true";
      continue;
    }
    float* field = key == "lr_decay"                    ? &o.lr_decay
                   : key == "initial_accumulator_value" ? &o.initial_accumulator_value
                   : key == "eps"                       ? &o.epsilon
                                                        : nullptr;
    if (field == nullptr)
      throw InvalidArgument(
          fmt::format("optim_args: '{}' is not an argument of torch.optim.Adagrad that Kiln takes "
                      "(lr_decay, initial_accumulator_value, eps, maximize)",
                      key));
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || value.empty() || !(v >= 0))
      throw InvalidArgument(fmt::format("optim_args: {}={} is not a number >= 0", key, value));
    *field = static_cast<float>(v);
  }
  return o;
}

bool groups_by_length(const TrainingArguments& a) {
  return a.compat("group_by_length").get<bool>() || a.compat("train_sampling_strategy") == "group_by_length";
}

bool includes_for_metrics(const TrainingArguments& a, const std::string& what) {
  if (what == "inputs" && a.compat("include_inputs_for_metrics").get<bool>()) return true;
  const Json& include = a.compat("include_for_metrics");
  return std::find(include.begin(), include.end(), Json(what)) != include.end();
}

}  // namespace kiln::trainer::detail
