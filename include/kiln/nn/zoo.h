// The model zoo: ready-made architectures as kiln::nn modules, each with a config (JSON; Hugging
// Face's field names where HF has the model) and state_dict keys equal to those of the reference
// implementation each entry names, so that reference weights load by name.
//
//   using namespace kiln::nn::zoo;
//   const Config cfg = {{"num_labels", 10}, {"num_channels", 1}};
//   auto net = create_model("resnet18", cfg);
//   net->export_onnx("resnet18.onnx", example_inputs("resnet18", cfg), dynamic_axes("resnet18", cfg),
//                    export_options("resnet18", cfg));      // output "logits"
//   save_model(export_model("resnet18", cfg), "resnet18.onnx");  // the same in one call (training mode)
//
// Entries (name: reference for weights and parity; config):
//   mlp            Flatten + Linear/ReLU stack          {"input_size", "input_shape", "hidden_sizes", "num_labels"}
//   lenet          LeNet-5 with BatchNorm               {"num_channels", "image_size", "num_labels"}
//   resnet18/34/50 torchvision.models.resnetNN keys     HF ResNetConfig names: num_channels,
//                  (conv1, bn1, layer1.0.conv1, fc)     embedding_size, hidden_sizes, depths,
//                                                       layer_type (basic|bottleneck), num_labels
//   convnext_tiny  torchvision.models.convnext_tiny keys HF ConvNextConfig names: num_channels,
//                                                       hidden_sizes, depths, layer_scale_init_value,
//                                                       drop_path_rate, num_labels
//   vit            torchvision.models.vit_b_16 keys     HF ViTConfig names: image_size, patch_size,
//                  (conv_proj, encoder.layers...)       num_channels, hidden_size, num_hidden_layers,
//                                                       num_attention_heads, intermediate_size,
//                                                       hidden_dropout_prob, attention_probs_dropout_prob,
//                                                       layer_norm_eps, num_labels
//   bert           HF BertForSequenceClassification     HF BertConfig names
//   gpt2           HF GPT2LMHeadModel keys (lm_head.weight  HF GPT2Config names
//                  shares transformer.wte.weight's storage; one initializer when exported)
//   bart           HF BartForConditionalGeneration keys    HF BartConfig names, and "part"
//                  (model.shared, both embed_tokens and lm_head one storage and one initializer)
//   t5             HF T5ForConditionalGeneration keys      HF T5Config names, and "part"
//                  (shared = encoder/decoder.embed_tokens; lm_head tied by tie_word_embeddings)
// Inputs: "pixel_values" [B, C, H, W] for image models (mlp/lenet: "input"), "input_ids" (+
// "attention_mask", "token_type_ids" for bert) for text models; output "logits". The encoder-decoders
// take input_ids, attention_mask and decoder_input_ids (and labels, then returning the loss first),
// or export optimum's encoder / decoder / decoder-with-past graphs by their "part" key
// (src/models/zoo/seq2seq_util.h). As built-in models
// of the Trainer and `kiln train --model NAME` (make_builtin_model), an image model's input is named
// "input", the column name Kiln's datasets use.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn::zoo {

using Config = nlohmann::json;

struct ZooEntry {
  std::string name;
  std::string description;
  Config default_config;
  std::function<ModulePtr(const Config&)> create;            // the full config (defaults merged)
  std::function<InputShapes(const Config&)> example_inputs;  // batch dim first (use 2)
  // The dims export marks dynamic (batch, and sequence for text models), by input name.
  std::function<DynamicAxes(const Config&)> dynamic_axes;
  // The dtype of each input of example_inputs, in order (token ids are int64); unset: all float32.
  std::function<std::vector<DType>(const Config&)> input_dtypes;
  // The output names export gives; unset: "logits" (the entry's one output).
  std::function<std::vector<std::string>(const Config&)> output_names;
};

void register_model(ZooEntry entry);
std::vector<std::string> model_names();  // sorted
// The default config with `overrides` merged in; InvalidArgument for an unknown name (listing the
// names) or an unknown config key (naming it and the known keys).
Config config_for(const std::string& name, const Config& overrides = Config::object());
ModulePtr create_model(const std::string& name, const Config& overrides = Config::object());
InputShapes example_inputs(const std::string& name, const Config& overrides = Config::object());
DynamicAxes dynamic_axes(const std::string& name, const Config& overrides = Config::object());
// What export needs besides shapes: the inputs' dtypes (the entry's input_dtypes, else float32)
// and the output names (the entry's output_names, else "logits").
ExportOptions export_options(const std::string& name, const Config& overrides = Config::object());
// The model as a trainable ONNX file's content: create + to_onnx with the entry's inputs and
// dynamic axes, in training mode (what `kiln train --model NAME` trains).
Model export_model(const std::string& name, const Config& overrides = Config::object(), uint64_t seed = 42);

}  // namespace kiln::nn::zoo
