// A DeepSpeed config (TrainingArguments::deepspeed, `--deepspeed ds_config.json`), read the way the
// Hugging Face Trainer reads it (transformers' HfTrainerDeepSpeedConfig): "auto" values are filled
// from the TrainingArguments, and values that are set must agree with them (InvalidArgument listing
// every mismatch, as HF's "Please correct the following DeepSpeed config values that mismatch
// TrainingArguments values"). Kiln runs what the config asks for itself, on its own data-parallel
// engine (kiln/data_parallel.h): ZeRO stages 0, 1 and 2, their buckets, gradient clipping and the
// fp16 loss scaler.
//
// Keys Kiln knows but does not run are an Unsupported naming them (ZeRO stage 3, NVMe offload,
// DeepSpeed's own learning-rate schedulers); a key DeepSpeed does not have, or that Kiln has not met,
// is an InvalidArgument naming it. Keys that change nothing on one CPU host (offload to "cpu",
// contiguous_gradients, steps_per_print, ...) are accepted.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "kiln/training_args.h"

namespace kiln::trainer {

struct DeepSpeedConfig {
  int zero_stage = 0;
  int64_t reduce_bucket_size = 500'000'000;  // elements (DeepSpeed's unit), gradient buckets
  int64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;
  bool reduce_scatter = true;
  double gradient_clipping = 0;  // 0: none (DeepSpeed's default)
  bool bf16 = false, fp16 = false;
  // fp16's loss scaler: static when loss_scale > 0, else dynamic from 2^initial_scale_power.
  double loss_scale = 0;
  double initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  nlohmann::json config;  // the whole config, "auto" values filled
};

// Parses args.deepspeed (a file's path, or the JSON text itself) for a run of `world_size` ranks.
// nullopt when args.deepspeed is unset. Errors name the key (and the file).
std::optional<DeepSpeedConfig> deepspeed_config(const TrainingArguments& args, int world_size);

}  // namespace kiln::trainer
