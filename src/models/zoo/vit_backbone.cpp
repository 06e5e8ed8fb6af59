// The ViT backbone (AutoBackbone "vit"), as Hugging Face's ViT-style backbones (Dinov2Backbone,
// VitDetBackbone) define it over torchvision's modules: stage_names "stem", "stage1".."stageN"
// (N = num_hidden_layers), every stage hidden_size channels. "stem" is the encoder's input (patch
// embeddings with the class token, plus the position embeddings); "stageK" is the output of
// encoder_layer_{K-1}. Each feature map is the hidden state without the class token reshaped to
// [B, hidden_size, image_size / patch_size, image_size / patch_size] (HF's reshape_hidden_states;
// no final LayerNorm, so that the maps equal torchvision's intermediate outputs). Layers after the
// last stage asked for are not run.
//
// State: the "vit" entry's keys without heads.head and encoder.ln, so torchvision's state_dict
// loads with strict=false and reports exactly those as unexpected.
#include <fmt/format.h>

#include "kiln/nn/backbone.h"
#include "models/zoo/vit.h"

namespace kiln::nn::zoo::vit {

namespace {

class VitBackbone : public Backbone {
 public:
  VitBackbone(const VitConfig& c, const BackboneOptions& options) : config_(c) {
    conv_proj_ = register_module("conv_proj", make_conv_proj(*this, c));
    encoder_ = register_module("encoder", std::make_shared<Encoder>(c, false));
    std::vector<std::string> names{"stem"};
    std::map<std::string, int64_t> channels{{"stem", c.hidden_size}};
    for (int64_t i = 1; i <= c.num_hidden_layers; ++i) {
      names.push_back(fmt::format("stage{}", i));
      channels[names.back()] = c.hidden_size;
    }
    init_backbone(names, channels, options);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    if (inputs.size() != 1)
      throw InvalidArgument(fmt::format("vit backbone: forward takes pixel_values only, got {} inputs", inputs.size()));
    const Var tokens = embed_patches(t, *this, *conv_proj_, config_, inputs[0]);
    // stages_needed() counts the stem: the layers to run are one fewer.
    const int64_t layers = static_cast<int64_t>(stages_needed()) - 1;
    // Only the selected hidden states become feature maps: no dead reshapes in the graph.
    std::vector<Var> maps;
    for (const Var& s : select_outputs(encoder_->hidden_states(t, tokens, layers)))
      maps.push_back(tokens_to_feature_map(t, s, config_));
    return maps;
  }
  std::string type_name() const override { return "VitBackbone"; }

 private:
  VitConfig config_;
  ModulePtr conv_proj_;
  std::shared_ptr<Encoder> encoder_;
};

const bool registered = [] {
  register_backbone("vit", [](const Config& c, const BackboneOptions& o) -> std::shared_ptr<Backbone> {
    return std::make_shared<VitBackbone>(VitConfig::from(c), o);
  });
  return true;
}();

}  // namespace

}  // namespace kiln::nn::zoo::vit
