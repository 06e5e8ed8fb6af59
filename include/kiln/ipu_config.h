// IPUConfig: optimum-graphcore's run configuration (ipu_config.json), with its names, defaults and
// checks, read and written as JSON, and mapped onto Kiln's own machinery for a run on CPU ranks
// (docs/ipu.md has the table):
//
//   replication_factor          data-parallel replicas: the MPI ranks of the run (kiln/data_parallel.h)
//   replicated_tensor_sharding  ZeRO stage 1 over the replicas (the optimizer state sharded)
//   gradient_accumulation_steps micro-batches per optimizer step
//   device_iterations           optimizer steps per call into the engine, their data staged up front
//   recompute_checkpoint_every_layer   gradient checkpointing
//   auto_loss_scaling / loss_scaling   fp16's dynamic / fixed loss scale (kiln/grad_scaler.h)
//   output_mode                 "final": logs see the last step of each device-iteration call;
//                               "all" / "default": every step; "sum": the calls' summed loss
//   seed                        the run's seed
//   layers_per_ipu, ipus_per_replica   pipeline stages over ranks (kiln/pipeline.h), scheduled
//                               as pipeline_schedule says (Kiln's own field: "1f1b" or "gpipe")
//
// Memory and placement settings that mean nothing on a CPU host (matmul_proportion,
// enable_half_partials, optimizer_state_offchip, explicit_ir_inference, parallelize_kwargs) are
// accepted and kept. Settings Kiln does not run yet are refused when a run uses them
// (kiln::Unsupported naming the field): embedding and projection serialization (> 1). executable_cache_dir caches the
// generated artifacts (src/trainer/loop/artifact_cache.h).
//
// Unknown keys and bad values are InvalidArgument naming the field, as optimum's
// IncompatibleIPUConfigError / ValueError do.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/training_args.h"

namespace kiln::trainer {

struct IPUConfig {
  int64_t replication_factor = 1;
  int64_t inference_replication_factor = 1;
  int64_t gradient_accumulation_steps = 1;
  std::vector<int64_t> layers_per_ipu = {-1};
  std::vector<int64_t> inference_layers_per_ipu;  // empty: layers_per_ipu
  int64_t ipus_per_replica = 0;                   // 0: len(layers_per_ipu)
  int64_t inference_ipus_per_replica = 0;         // 0: optimum's fallback (see from_dict)
  bool optimizer_state_offchip = false;
  bool replicated_tensor_sharding = false;
  nlohmann::json matmul_proportion = 0.2;  // a number or a list of one per stage
  nlohmann::json inference_matmul_proportion;
  bool enable_half_partials = true;
  std::optional<int64_t> embedding_serialization_factor;
  std::optional<int64_t> inference_embedding_serialization_factor;
  std::optional<std::vector<int64_t>> serialized_embedding_splits_per_ipu;
  std::optional<std::vector<int64_t>> inference_serialized_embedding_splits_per_ipu;
  std::optional<int64_t> projection_serialization_factor;
  std::optional<int64_t> inference_projection_serialization_factor;
  std::optional<std::vector<int64_t>> serialized_projection_splits_per_ipu;
  std::optional<std::vector<int64_t>> inference_serialized_projection_splits_per_ipu;
  bool recompute_checkpoint_every_layer = false;
  int64_t device_iterations = 1;
  int64_t inference_device_iterations = 1;
  std::string output_mode = "final";  // "all", "sum", "final", "default"
  std::optional<int64_t> seed;
  bool auto_loss_scaling = false;
  std::optional<double> loss_scaling;  // a fixed loss scale (older optimum releases' key)
  std::string executable_cache_dir;
  bool explicit_ir_inference = false;
  nlohmann::json parallelize_kwargs = nlohmann::json::object();
  nlohmann::json inference_parallelize_kwargs = nlohmann::json::object();
  // Kiln's own: the order micro-batches go through the stages, "1f1b" (one forward, one backward:
  // at most `stages` micro-batches in flight per stage) or "gpipe" (every forward, then every
  // backward).
  std::string pipeline_schedule = "1f1b";

  // From a JSON object with optimum's keys (missing keys keep their defaults; version keys such as
  // "optimum_version" are accepted and dropped); then validate(). InvalidArgument naming the key.
  static IPUConfig from_dict(const nlohmann::json& json);
  // A folder holding ipu_config.json, a path to a JSON file, or the JSON text itself.
  static IPUConfig from_pretrained(const std::string& dir_or_json);
  nlohmann::json to_dict() const;
  std::string to_json_string() const;  // indented, as optimum writes it
  // Writes dir/ipu_config.json atomically (the folder is created).
  void save_pretrained(const std::string& dir) const;
  // optimum's ipu_config_overrides: "device_iterations=4,layers_per_ipu=[1 3],seed=7". Each key must
  // exist; each value is read as the field's type (booleans as true/false/yes/no/1/0; lists in
  // brackets, separated by spaces or commas). Validates the result.
  void update_from_string(const std::string& overrides);
  // optimum's _validate_ipu_config: floors of every count, output_mode's values, one matmul
  // proportion and one layers_per_ipu entry per stage, embedding / projection settings given one way.
  void validate() const;

  // The stages of a training replica, and the ranks a run needs: stages x replication_factor.
  int64_t stages() const;
  int64_t ranks() const { return stages() * replication_factor; }
  // The vocabulary blocks of the LM head in training (ArtifactOptions::lm_head_chunks): the larger of
  // embedding_serialization_factor and projection_serialization_factor, which on a CPU both mean
  // the head's product with its loss (the embedding lookup itself is whole either way).
  int64_t lm_head_chunks() const {
    return std::max(embedding_serialization_factor.value_or(1), projection_serialization_factor.value_or(1));
  }
  // layers_per_ipu for a model of `layers` layers, its -1 wildcards filled with an equal share of the
  // rest; InvalidArgument naming layers_per_ipu when the counts do not add up or do not divide.
  std::vector<int64_t> layers_per_stage(int64_t layers) const;
};

// The IPUConfig the arguments name (ipu_config_name, then ipu_config_overrides applied), or nullopt
// when they name none (overrides without a config apply to the defaults).
std::optional<IPUConfig> ipu_config(const TrainingArguments& args);

// The arguments a run of `world_size` ranks trains with under `config`: its
// gradient_accumulation_steps (the arguments' own must be 1 or agree), seed, gradient checkpointing,
// and a DeepSpeed config for ZeRO stage 1 (replicated_tensor_sharding) and a fixed loss scale
// (loss_scaling); validated again. InvalidArgument when replication_factor x stages is not the
// world size or n_ipu disagrees, or with a DeepSpeed config beside it; Unsupported for pipeline
// stages and embedding / projection serialization.
TrainingArguments apply_ipu_config(TrainingArguments args, const IPUConfig& config, int world_size);

}  // namespace kiln::trainer
