// torchvision's VisionTransformer (torchvision/models/vision_transformer.py) as kiln::nn modules,
// shared by the zoo's "vit" entry and the ViT backbone. Children and state_dict keys are
// torchvision's: conv_proj, class_token, encoder.pos_embedding,
// encoder.layers.encoder_layer_N.{ln_1, self_attention, ln_2, mlp.0, mlp.3}, encoder.ln, heads.head.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/layers.h"
#include "kiln/nn/transformer.h"
#include "kiln/nn/zoo.h"

namespace kiln::nn::zoo::vit {

// HF ViTConfig's names for torchvision's arguments.
struct VitConfig {
  int64_t image_size, patch_size, num_channels, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
      num_labels;
  double hidden_dropout_prob, attention_probs_dropout_prob, layer_norm_eps;
  int64_t grid() const { return image_size / patch_size; }  // patches per side
  static VitConfig from(const Config& c);
};

Config default_config();

// torchvision's EncoderBlock: x = x + dropout(self_attention(ln_1(x))); x + mlp(ln_2(x)).
class EncoderBlock : public Module {
 public:
  explicit EncoderBlock(const VitConfig& c);
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "EncoderBlock"; }

 private:
  ModulePtr ln_1_, dropout_, ln_2_, mlp_;
  std::shared_ptr<MultiheadAttention> self_attention_;
};

// torchvision's Encoder: ln(layers(dropout(x + pos_embedding))). With `final_norm` false (the
// backbone) there is no ln.
class Encoder : public Module {
 public:
  Encoder(const VitConfig& c, bool final_norm);
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  // One call of this module returning HF's hidden_states: {embeddings (after the position
  // embedding and dropout), the output of layer 1, ..., of layer `layers`}; the later layers and
  // ln are not run.
  std::vector<Var> hidden_states(Tracer& t, const Var& x, int64_t layers);
  int64_t num_layers() const { return static_cast<int64_t>(layers_->size()); }
  std::string type_name() const override { return "Encoder"; }

 private:
  std::shared_ptr<Sequential> layers_;
  ModulePtr dropout_, ln_;
  std::optional<int64_t> pending_layers_;  // hidden_states()'s request for the forward it starts
};

// conv_proj and class_token: pixel_values [B, C, H, W] -> tokens [B, 1 + (H/p)(W/p), hidden]
// (class token first). `owner` holds the class_token parameter.
Var embed_patches(Tracer& t, Module& owner, Module& conv_proj, const VitConfig& c, const Var& pixel_values);
// The conv_proj and class_token of torchvision, registered on `owner` and initialised as torchvision does.
ModulePtr make_conv_proj(Module& owner, const VitConfig& c);

// [B, 1 + h*w, D] -> [B, D, h, w]: the tokens without the class token as a feature map.
Var tokens_to_feature_map(Tracer& t, const Var& tokens, const VitConfig& c);

}  // namespace kiln::nn::zoo::vit
