// DeepSpeed configs (kiln/deepspeed_config.h): HF's trainer_config_process ("auto" filled from the
// TrainingArguments, set values checked against them), then every key checked and read.
#include "kiln/deepspeed_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/file_io.h"
#include "core/json_text.h"
#include "kiln/error.h"

namespace kiln::trainer {
namespace {

using Json = nlohmann::json;

// DeepSpeed sections Kiln knows of but does not run, with what to do instead.
const std::map<std::string, std::string>& unsupported_sections() {
  static const std::map<std::string, std::string> sections{
      {"scheduler",
       "DeepSpeed's learning-rate schedulers are not implemented: remove the section, and the Trainer's "
       "lr_scheduler_type applies (linear warmup and decay by default, as WarmupDecayLR with warmup_type linear)"},
      {"activation_checkpointing", "use the Trainer's gradient_checkpointing"},
      {"amp", "use the bf16 or fp16 section (or the Trainer's bf16 / fp16)"},
      {"pipeline", "pipeline parallelism is not part of Kiln's data-parallel engine"},
      {"sparse_attention", "not implemented"},
      {"flops_profiler", "not implemented"},
      {"compression_training", "not implemented"},
      {"data_efficiency", "not implemented"},
      {"elasticity", "not implemented"},
      {"autotuning", "not implemented"},
      {"aio", "NVMe offload is not implemented"},
      {"tensorboard", "use the Trainer's report_to"},
      {"wandb", "use the Trainer's report_to"},
      {"csv_monitor", "use the Trainer's report_to"},
      {"comms_logger", "not implemented"},
  };
  return sections;
}

class ConfigReader {
 public:
  explicit ConfigReader(std::string source) : source_(std::move(source)) {}

  // HF's fill_match: "auto" becomes the TrainingArguments' value; a set value must equal it.
  void fill_match(Json& root, const std::string& dotted, const Json& hf_value, const std::string& hf_name,
                  bool must_match = true) {
    Json* node = &root;
    std::string key = dotted;
    for (size_t dot; (dot = key.find('.')) != std::string::npos; key = key.substr(dot + 1)) {
      const std::string part = key.substr(0, dot);
      if (!node->is_object() || !node->contains(part)) return;
      node = &(*node)[part];
    }
    if (!node->is_object() || !node->contains(key)) return;
    Json& value = (*node)[key];
    if (value == "auto") {
      value = hf_value;
      return;
    }
    if (must_match && !value.is_null() && value != hf_value)
      mismatches_ += fmt::format("\n- ds {}={} vs hf {}={}", dotted, value.dump(), hf_name, hf_value.dump());
  }

  void check_mismatches() const {
    if (mismatches_.empty()) return;
    throw InvalidArgument(fmt::format(
        "{}: Please correct the following DeepSpeed config values that mismatch TrainingArguments values:{}\n"
        "The easiest method is to set these DeepSpeed config values to 'auto'.",
        source_, mismatches_));
  }

  // Every key of `node` among `known`; a section Kiln does not run is Unsupported.
  void check_keys(const Json& node, const std::string& where, const std::set<std::string>& known) const {
    if (!node.is_object()) throw InvalidArgument(fmt::format("{}: '{}' must be a JSON object", source_, where));
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (known.count(it.key())) continue;
      const std::string path = where.empty() ? it.key() : where + "." + it.key();
      if (where.empty())
        if (const auto u = unsupported_sections().find(it.key()); u != unsupported_sections().end())
          throw Unsupported(fmt::format("{}: DeepSpeed's '{}' section: {}", source_, it.key(), u->second));
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw InvalidArgument(fmt::format("{}: unknown key '{}' (known here: {})", source_, path, names));
    }
  }

  double number(const Json& node, const std::string& key, const std::string& where, double fallback) const {
    if (!node.contains(key)) return fallback;
    const Json& v = node[key];
    if (!v.is_number())
      throw InvalidArgument(fmt::format("{}: '{}{}' must be a number, got {}", source_, where, key, v.dump()));
    return v.get<double>();
  }

  int64_t integer(const Json& node, const std::string& key, const std::string& where, int64_t fallback,
                  int64_t least) const {
    const double v = number(node, key, where, static_cast<double>(fallback));
    if (v != std::floor(v) || v < static_cast<double>(least) || v > 9.0e15)
      throw InvalidArgument(
          fmt::format("{}: '{}{}' must be an integer >= {}, got {}", source_, where, key, least, node[key].dump()));
    return static_cast<int64_t>(v);
  }

  bool boolean(const Json& node, const std::string& key, const std::string& where, bool fallback) const {
    if (!node.contains(key)) return fallback;
    const Json& v = node[key];
    if (!v.is_boolean())
      throw InvalidArgument(fmt::format("{}: '{}{}' must be true or false, got {}", source_, where, key, v.dump()));
    return v.get<bool>();
  }

  // A key whose only value Kiln runs is `only` (DeepSpeed's default there).
  void require(const Json& node, const std::string& key, const std::string& where, const Json& only,
               const std::string& why) const {
    if (node.contains(key) && node[key] != only)
      throw Unsupported(fmt::format("{}: '{}{}' {}: Kiln runs only {} ({})", source_, where, key, node[key].dump(),
                                    only.dump(), why));
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string mismatches_;
};

Json read_config(const std::string& spec, std::string& source) {
  const size_t first = spec.find_first_not_of(" \t\r\n");
  std::string text;
  if (first != std::string::npos && spec[first] == '{') {
    source = "the DeepSpeed config";
    text = spec;
  } else {
    source = fmt::format("DeepSpeed config '{}'", spec);
    text = read_file_bytes(spec, "DeepSpeed config", kMaxJsonBytes);
  }
  Json config = parse_json(text, source);
  if (!config.is_object()) throw InvalidArgument(fmt::format("{} is not a JSON object", source));
  return config;
}

// HF's trainer_config_process and the "auto" bucket size, on the config in place.
void fill_from_arguments(ConfigReader& r, Json& c, const TrainingArguments& a, int world_size) {
  const int64_t train_batch = world_size * a.per_device_train_batch_size * a.gradient_accumulation_steps;
  r.fill_match(c, "train_micro_batch_size_per_gpu", a.per_device_train_batch_size, "per_device_train_batch_size");
  r.fill_match(c, "gradient_accumulation_steps", a.gradient_accumulation_steps, "gradient_accumulation_steps");
  r.fill_match(c, "train_batch_size", train_batch, "train_batch_size (world_size x micro batch x accumulation)");
  r.fill_match(c, "gradient_clipping", a.max_grad_norm, "max_grad_norm");
  r.fill_match(c, "optimizer.params.lr", a.learning_rate, "learning_rate");
  r.fill_match(c, "optimizer.params.betas", Json::array({a.adam_beta1, a.adam_beta2}), "adam_beta1+adam_beta2");
  r.fill_match(c, "optimizer.params.eps", a.adam_epsilon, "adam_epsilon");
  r.fill_match(c, "optimizer.params.weight_decay", a.weight_decay, "weight_decay");
  r.fill_match(c, "fp16.enabled", a.fp16 || a.fp16_full_eval, "fp16|fp16_full_eval");
  r.fill_match(c, "bf16.enabled", a.bf16 || a.bf16_full_eval, "bf16|bf16_full_eval");
  // HF fills it from the model's hidden size; Kiln from ddp_bucket_cap_mb (float32 elements).
  r.fill_match(c, "zero_optimization.reduce_bucket_size", a.ddp_bucket_cap_mb.value_or(25) * 1024 * 1024 / 4,
               "ddp_bucket_cap_mb", false);
  r.fill_match(c, "zero_optimization.allgather_bucket_size", a.ddp_bucket_cap_mb.value_or(25) * 1024 * 1024 / 4,
               "ddp_bucket_cap_mb", false);
  r.check_mismatches();
}

void read_zero(const ConfigReader& r, const Json& c, DeepSpeedConfig& d) {
  if (!c.contains("zero_optimization")) return;
  const Json& z = c["zero_optimization"];
  const std::string w = "zero_optimization.";
  r.check_keys(z, "zero_optimization",
               {"stage", "allgather_partitions", "allgather_bucket_size", "overlap_comm", "reduce_scatter",
                "reduce_bucket_size", "contiguous_gradients", "round_robin_gradients", "offload_optimizer",
                "offload_param", "sub_group_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
                "ignore_unused_parameters", "load_from_fp32_weights", "elastic_checkpoint"});
  d.zero_stage = static_cast<int>(r.integer(z, "stage", w, 0, 0));
  if (d.zero_stage == 3)
    throw Unsupported(fmt::format(
        "{}: ZeRO stage 3 (the parameters sharded too) is not implemented; stages 0, 1 (optimizer state sharded) "
        "and 2 (gradients too) are",
        r.source()));
  if (d.zero_stage > 3)
    throw InvalidArgument(
        fmt::format("{}: zero_optimization.stage {}: DeepSpeed's stages are 0 to 3", r.source(), d.zero_stage));
  d.reduce_bucket_size = r.integer(z, "reduce_bucket_size", w, d.reduce_bucket_size, 1);
  d.allgather_bucket_size = r.integer(z, "allgather_bucket_size", w, d.allgather_bucket_size, 1);
  d.overlap_comm = r.boolean(z, "overlap_comm", w, d.overlap_comm);
  d.reduce_scatter = r.boolean(z, "reduce_scatter", w, d.reduce_scatter);
  r.boolean(z, "contiguous_gradients", w, true);  // Kiln's buckets are contiguous either way
  r.boolean(z, "round_robin_gradients", w, false);
  r.require(z, "allgather_partitions", w, true, "each rank's updated parameters are gathered with allgather");
  // The optimizer state already lives in host memory: offloading it to the CPU changes nothing.
  for (const char* key : {"offload_optimizer", "offload_param"}) {
    if (!z.contains(key)) continue;
    const Json& o = z[key];
    r.check_keys(o, w + key, {"device", "pin_memory", "buffer_count", "fast_init", "nvme_path", "ratio"});
    const std::string device = o.value("device", "none");
    if (device != "none" && device != "cpu")
      throw Unsupported(fmt::format("{}: {}{}.device '{}': Kiln trains in host memory; offload to 'cpu' or 'none'",
                                    r.source(), w, key, device));
  }
}

void read_precision(const ConfigReader& r, const Json& c, DeepSpeedConfig& d) {
  for (const char* section : {"bf16", "bfloat16"}) {
    if (!c.contains(section)) continue;
    r.check_keys(c[section], section, {"enabled", "immediate_grad_update"});
    d.bf16 = d.bf16 || r.boolean(c[section], "enabled", std::string(section) + ".", false);
  }
  if (!c.contains("fp16")) return;
  const Json& f = c["fp16"];
  const std::string w = "fp16.";
  r.check_keys(f, "fp16",
               {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"});
  d.fp16 = r.boolean(f, "enabled", w, false);
  r.require(f, "auto_cast", w, false, "the artifacts' autocast decides what runs in float16");
  r.require(f, "fp16_master_weights_and_grads", w, false, "the master weights are float32");
  d.loss_scale = r.number(f, "loss_scale", w, 0);
  d.initial_scale_power = r.number(f, "initial_scale_power", w, 16);
  d.loss_scale_window = r.integer(f, "loss_scale_window", w, 1000, 1);
  d.hysteresis = r.integer(f, "hysteresis", w, 2, 1);
  d.consecutive_hysteresis = r.boolean(f, "consecutive_hysteresis", w, false);
  d.min_loss_scale = r.number(f, "min_loss_scale", w, 1);
  if (d.loss_scale < 0 || !std::isfinite(d.loss_scale))
    throw InvalidArgument(
        fmt::format("{}: fp16.loss_scale must be 0 (dynamic) or > 0, got {}", r.source(), d.loss_scale));
  if (!(d.initial_scale_power >= 0 && d.initial_scale_power < 128))
    throw InvalidArgument(
        fmt::format("{}: fp16.initial_scale_power must be in [0, 128), got {}", r.source(), d.initial_scale_power));
}

// The optimizer section must describe the Trainer's optimizer (AdamW, the arguments' hyper-parameters,
// which fill_match has checked).
void read_optimizer(const ConfigReader& r, const Json& c, const TrainingArguments& a) {
  if (!c.contains("optimizer")) return;
  const Json& o = c["optimizer"];
  r.check_keys(o, "optimizer", {"type", "params"});
  std::string type = o.value("type", "");
  for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (type != "adam" && type != "adamw")
    throw Unsupported(fmt::format("{}: optimizer.type '{}': Kiln's DeepSpeed runs Adam / AdamW (set optim for SGD)",
                                  r.source(), o.value("type", "")));
  if (a.optim == OptimizerName::sgd || a.optim == OptimizerName::adagrad || a.optim == OptimizerName::adafactor)
    throw InvalidArgument(fmt::format("{}: optimizer.type {} but the TrainingArguments' optim is {}", r.source(),
                                      o["type"].dump(), to_string(a.optim)));
  if (!o.contains("params")) return;
  const Json& p = o["params"];
  const std::string w = "optimizer.params.";
  r.check_keys(p, "optimizer.params",
               {"lr", "betas", "eps", "weight_decay", "torch_adam", "adam_w_mode", "bias_correction", "amsgrad"});
  r.require(p, "adam_w_mode", w, true, "the weight decay is decoupled (AdamW)");
  r.require(p, "bias_correction", w, true, "torch's AdamW corrects the moments' bias");
  r.require(p, "amsgrad", w, false, "AMSGrad is not implemented");
}

}  // namespace

std::optional<DeepSpeedConfig> deepspeed_config(const TrainingArguments& args, int world_size) {
  if (!args.deepspeed) return std::nullopt;
  std::string source;
  Json config = read_config(*args.deepspeed, source);
  ConfigReader r(source);
  fill_from_arguments(r, config, args, std::max(1, world_size));
  r.check_keys(
      config, "",
      {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
       "zero_optimization", "bf16", "bfloat16", "fp16", "optimizer", "steps_per_print", "wall_clock_breakdown",
       "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "prescale_gradients",
       "gradient_predivide_factor", "communication_data_type", "dump_state", "memory_breakdown"});
  DeepSpeedConfig d;
  const std::string top;
  r.integer(config, "train_batch_size", top, 1, 1);
  r.integer(config, "train_micro_batch_size_per_gpu", top, 1, 1);
  r.integer(config, "gradient_accumulation_steps", top, 1, 1);
  d.gradient_clipping = r.number(config, "gradient_clipping", top, 0);
  if (d.gradient_clipping < 0)
    throw InvalidArgument(fmt::format("{}: gradient_clipping must be >= 0, got {}", source, d.gradient_clipping));
  r.require(config, "prescale_gradients", top, false, "the gradients are averaged after the sum");
  r.require(config, "gradient_predivide_factor", top, 1.0, "the gradients are averaged after the sum");
  if (config.contains("communication_data_type") && config["communication_data_type"] != "fp32" &&
      !config["communication_data_type"].is_null())
    throw Unsupported(fmt::format("{}: communication_data_type {}: Kiln reduces gradients in fp32", source,
                                  config["communication_data_type"].dump()));
  read_zero(r, config, d);
  read_precision(r, config, d);
  read_optimizer(r, config, args);
  if (d.bf16 && d.fp16) throw InvalidArgument(fmt::format("{}: bf16 and fp16 are both enabled", source));
  d.config = std::move(config);
  return d;
}

}  // namespace kiln::trainer
