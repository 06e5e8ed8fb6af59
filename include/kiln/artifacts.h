// Training artifacts from one forward ONNX model, as ONNX Runtime's generate_artifacts makes them:
//
//   {prefix}training_model.onnx   forward + loss + gradients (parameters are graph inputs)
//   {prefix}eval_model.onnx       forward + loss, BatchNormalization and Dropout in inference mode
//   {prefix}optimizer_model.onnx  one ai.kiln.AdamWStep / SGDStep / LambStep per trainable parameter
//   {prefix}checkpoint            the parameters (safetensors; see include/kiln/checkpoint.h)
//
//   kiln::training::ArtifactOptions o;
//   o.loss = kiln::training::LossType::CrossEntropyLoss;
//   o.optimizer = kiln::training::OptimType::AdamW;
//   kiln::training::generate_artifacts(kiln::load_model("net.onnx"), o, "artifacts");
//
// Parameters: by default every float initializer through which a gradient reaches the loss is
// trainable (a constant mask that only feeds a comparison is not); `requires_grad` lists them
// instead; `frozen_params` are kept as non-trainable parameters. BatchNormalization running
// statistics updated by a training-mode node are non-trainable parameters that each training call
// updates (the training model outputs "<name>.updated").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/checkpoint.h"
#include "kiln/graph.h"

namespace kiln::training {

enum class LossType { None, MSELoss, CrossEntropyLoss, BCEWithLogitsLoss, L1Loss };
enum class OptimType { AdamW, SGD, Lamb, Adagrad, Adafactor };

// Parses "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "L1Loss", "none" / "AdamW", "SGD", "Lamb", "Adagrad",
// "Adafactor"; InvalidArgument listing the accepted names otherwise.
LossType loss_type_from_string(const std::string& name);
OptimType optim_type_from_string(const std::string& name);
std::string to_string(LossType loss);
std::string to_string(OptimType optim);

// torch.optim.AdamW's hyperparameters and defaults (the learning rate is an input of each step).
struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
  bool maximize = false;
  // transformers.AdamW (the Hugging Face Trainer's optim "adamw_hf") instead of torch.optim.AdamW:
  // eps added before the bias correction, weight decay applied after the update.
  bool hf_variant = false;
};

// torch.optim.SGD's.
struct SGDOptions {
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool maximize = false;
};

// LAMB (You et al. 2019), as poptorch.optim.LAMB has it (Graphcore's IPUTrainer: `lamb`, and
// `lamb_no_bias_correction` for bias_correction = false). max_weight_norm < 0: no clamp of ||x||.
struct LambOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
  bool bias_correction = true;
  float max_weight_norm = -1.0f;
};

// torch.optim.Adagrad's hyperparameters and defaults (ai.kiln.AdagradStep).
struct AdagradOptions {
  float lr_decay = 0.0f;
  float weight_decay = 0.0f;
  float initial_accumulator_value = 0.0f;
  float epsilon = 1e-10f;
  bool maximize = false;
};

// transformers.optimization.Adafactor's hyperparameters and defaults (ai.kiln.AdafactorStep). The
// Hugging Face Trainer's optim="adafactor" sets scale_parameter and relative_step to false and runs
// its learning rate. beta1 unset: no first moment.
struct AdafactorOptions {
  float eps1 = 1e-30f;
  float eps2 = 1e-3f;
  float clip_threshold = 1.0f;
  float decay_rate = -0.8f;
  std::optional<float> beta1;
  float weight_decay = 0.0f;
  bool scale_parameter = true;
  bool relative_step = true;
  bool warmup_init = false;
};

struct ArtifactOptions {
  std::vector<std::string> requires_grad;  // empty: the default set (see above)
  std::vector<std::string> frozen_params;
  LossType loss = LossType::None;
  std::vector<std::string> loss_input_names;         // model outputs the loss takes; empty: the first
  std::vector<std::string> additional_output_names;  // model outputs the training/eval models also return
  std::optional<OptimType> optimizer;                // none: no optimizer model
  AdamWOptions adamw;
  SGDOptions sgd;
  LambOptions lamb;
  AdagradOptions adagrad;
  AdafactorOptions adafactor;
  float learning_rate = 1e-3f;  // the optimizer's initial learning rate (kept in the optimizer model)
  // > 1: the training model computes the language-model head and its cross-entropy as one
  // ai.kiln.LinearCrossEntropy over this many blocks of the vocabulary, so that the logits and their
  // gradient never exist whole, and returns no logits (IPUConfig's embedding_serialization_factor /
  // projection_serialization_factor; src/training/serialized_head.h says what it recognises). The
  // eval model is unchanged. Unsupported when the model has no such head.
  int64_t lm_head_chunks = 1;
  // CrossEntropyLoss with label smoothing (torch's label_smoothing, HF's label_smoothing_factor):
  // (1 - e) * NLL + e * mean over classes of -log p, averaged over the rows not ignored.
  float label_smoothing = 0.0f;
  // Trainable parameters updated without weight decay (the Hugging Face Trainer exempts biases and
  // LayerNorm weights: see no_weight_decay_parameters).
  std::vector<std::string> no_weight_decay;
  bool nominal_checkpoint = false;
  std::string prefix;
  // Gradient checkpointing in the training model (kiln/autodiff.h: RecomputeOptions).
  RecomputeOptions recompute;
  // Mixed precision in the training and eval models (kiln/autodiff.h: GradientOptions): BFloat16 or
  // Float16 (which adds the loss-scale input); the checkpoint and the optimizer stay float32.
  DType mixed_precision = DType::Float32;
};

struct Artifacts {
  Model training_model;
  Model eval_model;
  std::optional<Model> optimizer_model;
  CheckpointState checkpoint;
};

Artifacts build_artifacts(const Model& forward, const ArtifactOptions& options);

// Builds the artifacts and writes them into `artifact_directory` (created if needed), each file
// atomically. Returns the paths written.
std::vector<std::string> generate_artifacts(const Model& forward, const ArtifactOptions& options,
                                            const std::string& artifact_directory);

// The Hugging Face Trainer's rule for which parameters get no weight decay: names containing
// "bias", and the scale and bias of LayerNormalization nodes.
std::vector<std::string> no_weight_decay_parameters(const Model& forward);

// Accelerate's and optimum's names for ArtifactOptions::mixed_precision: "no" (or "fp32") is float32,
// "bf16" bfloat16, "fp16" float16; anything else is an InvalidArgument listing the names.
DType mixed_precision_from_string(const std::string& name);

// With float16 mixed precision the training model has one more input, the loss scale (a float32
// scalar seeding the backward pass: kiln/grad_scaler.h), named here and in its metadata.
inline constexpr const char* kLossScaleInput = "kiln.loss_scale";
inline constexpr const char* kLossScaleKey = "kiln.loss_scale_input";

// File names inside an artifact directory.
std::string training_model_file(const std::string& prefix = "");
std::string eval_model_file(const std::string& prefix = "");
std::string optimizer_model_file(const std::string& prefix = "");
std::string checkpoint_file(const std::string& prefix = "");

}  // namespace kiln::training
