// The zoo's "vit": torchvision's VisionTransformer (vit_b_16's layout at the default config) with
// HF ViTConfig's names. Input pixel_values [B, num_channels, image_size, image_size]; output
// logits [B, num_labels] from the class token.
#include "models/zoo/vit.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kiln/error.h"
#include "models/nn/attention_ops.h"
#include "models/zoo/transformer_util.h"

namespace kiln::nn::zoo::vit {

using namespace zoo::transformers;

namespace {

const std::string kModel = "vit";

std::shared_ptr<Linear> mlp_linear(int64_t in, int64_t out) {
  // torchvision's MLPBlock init: xavier_uniform_ weight, bias ~ N(0, 1e-6)
  auto l = std::make_shared<Linear>(in, out);
  xavier_uniform_(l->get_parameter("weight"));
  normal_(l->get_parameter("bias"), 0.0, 1e-6);
  return l;
}

}  // namespace

VitConfig VitConfig::from(const Config& c) {
  VitConfig v;
  v.image_size = config_int(c, kModel, "image_size");
  v.patch_size = config_int(c, kModel, "patch_size");
  require_divisible(kModel, "image_size", v.image_size, "patch_size", v.patch_size);  // torchvision's assert
  v.num_channels = config_int(c, kModel, "num_channels");
  v.hidden_size = config_int(c, kModel, "hidden_size");
  v.num_hidden_layers = config_int(c, kModel, "num_hidden_layers", 0);
  v.num_attention_heads = config_int(c, kModel, "num_attention_heads");
  require_divisible(kModel, "hidden_size", v.hidden_size, "num_attention_heads", v.num_attention_heads);
  v.intermediate_size = config_int(c, kModel, "intermediate_size");
  v.hidden_dropout_prob = config_prob(c, kModel, "hidden_dropout_prob");
  v.attention_probs_dropout_prob = config_prob(c, kModel, "attention_probs_dropout_prob");
  v.layer_norm_eps = config_double(c, kModel, "layer_norm_eps");
  v.num_labels = config_int(c, kModel, "num_labels");
  return v;
}

Config default_config() {
  return {{"image_size", 224},         {"patch_size", 16},           {"num_channels", 3},
          {"hidden_size", 768},        {"num_hidden_layers", 12},    {"num_attention_heads", 12},
          {"intermediate_size", 3072}, {"hidden_dropout_prob", 0.0}, {"attention_probs_dropout_prob", 0.0},
          {"layer_norm_eps", 1e-6},    {"num_labels", 1000}};
}

// ---- EncoderBlock ------------------------------------------------------------------------------

EncoderBlock::EncoderBlock(const VitConfig& c) {
  const std::vector<int64_t> shape{c.hidden_size};
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(shape, c.layer_norm_eps));
  self_attention_ = register_module("self_attention", std::make_shared<MultiheadAttention>(MultiheadAttentionOptions{
                                                          .embed_dim = c.hidden_size,
                                                          .num_heads = c.num_attention_heads,
                                                          .dropout = c.attention_probs_dropout_prob,
                                                          .batch_first = true}));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(shape, c.layer_norm_eps));
  // torchvision's MLPBlock: Linear, GELU, Dropout, Linear, Dropout (keys mlp.0, mlp.3)
  mlp_ = register_module(
      "mlp", std::make_shared<Sequential>(std::vector<ModulePtr>{
                 mlp_linear(c.hidden_size, c.intermediate_size), std::make_shared<GELU>(),
                 std::make_shared<Dropout>(c.hidden_dropout_prob), mlp_linear(c.intermediate_size, c.hidden_size),
                 std::make_shared<Dropout>(c.hidden_dropout_prob)}));
}

std::vector<Var> EncoderBlock::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& input = inputs.at(0);
  if (input.rank() != 3)
    throw ShapeError(
        fmt::format("EncoderBlock: Expected (batch_size, seq_length, hidden_dim) got rank {}", input.rank()));
  const Var x0 = ln_1_->call(t, input);
  const Var a = self_attention_->attend(t, x0, x0, x0, {.need_weights = false}).at(0);
  const Var x = attn::binary(t, "Add", dropout_->call(t, a), input);
  return {attn::binary(t, "Add", x, mlp_->call(t, ln_2_->call(t, x)))};
}

// ---- Encoder -----------------------------------------------------------------------------------

Encoder::Encoder(const VitConfig& c, bool final_norm) {
  const int64_t seq_length = c.grid() * c.grid() + 1;
  normal_(register_parameter("pos_embedding", Tensor::zeros(DType::Float32, {1, seq_length, c.hidden_size})), 0.0,
          0.02);
  dropout_ = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
  layers_ = register_module("layers", std::make_shared<Sequential>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers_->push_back(fmt::format("encoder_layer_{}", i), std::make_shared<EncoderBlock>(c));
  if (final_norm)
    ln_ = register_module("ln", std::make_shared<LayerNorm>(std::vector<int64_t>{c.hidden_size}, c.layer_norm_eps));
}

std::vector<Var> Encoder::hidden_states(Tracer& t, const Var& x, int64_t layers) {
  if (layers < 0 || layers > num_layers())
    throw InvalidArgument(
        fmt::format("Encoder: asked for the hidden states of {} layers; it has {}", layers, num_layers()));
  pending_layers_ = layers;
  try {
    auto out = call(t, std::vector<Var>{x});
    pending_layers_.reset();
    return out;
  } catch (...) {
    pending_layers_.reset();
    throw;
  }
}

std::vector<Var> Encoder::forward(Tracer& t, const std::vector<Var>& inputs) {
  const std::optional<int64_t> layers = pending_layers_;
  pending_layers_.reset();
  const Var& input = inputs.at(0);
  if (input.rank() != 3)
    throw ShapeError(fmt::format("Encoder: Expected (batch_size, seq_length, hidden_dim) got rank {}", input.rank()));
  Var x = dropout_->call(t, attn::binary(t, "Add", input, t.parameter(*this, "pos_embedding")));
  if (layers) {
    std::vector<Var> states{x};
    for (int64_t i = 0; i < *layers; ++i) states.push_back(x = (*layers_)[static_cast<size_t>(i)]->call(t, x));
    return states;
  }
  x = layers_->call(t, x);
  return {ln_ ? ln_->call(t, x) : x};
}

// ---- Patch embedding ---------------------------------------------------------------------------

ModulePtr make_conv_proj(Module& owner, const VitConfig& c) {
  // torchvision: class_token zeros; conv_proj weight ~ trunc_normal(std = sqrt(1 / fan_in)), bias zeros.
  owner.register_parameter("class_token", Tensor::zeros(DType::Float32, {1, 1, c.hidden_size}));
  auto conv = std::make_shared<Conv2d>(Conv2dOptions(c.num_channels, c.hidden_size, c.patch_size).stride(c.patch_size));
  Tensor& w = conv->get_parameter("weight");
  trunc_normal_(w, 0.0, std::sqrt(1.0 / static_cast<double>(fan_in_and_fan_out(w).first)), -2.0, 2.0);
  constant_(conv->get_parameter("bias"), 0.0);
  return conv;
}

Var embed_patches(Tracer& t, Module& owner, Module& conv_proj, const VitConfig& c, const Var& pixel_values) {
  if (pixel_values.rank() != 4)
    throw ShapeError(fmt::format("vit: pixel_values must be [batch, {}, {}, {}], got rank {}", c.num_channels,
                                 c.image_size, c.image_size, pixel_values.rank()));
  // torchvision's _process_input asserts; the position embedding fixes the number of patches.
  if (pixel_values.dim(2) != c.image_size)
    throw ShapeError(
        fmt::format("vit: Wrong image height! Expected {} but got {}!", c.image_size, pixel_values.dim(2)));
  if (pixel_values.dim(3) != c.image_size)
    throw ShapeError(fmt::format("vit: Wrong image width! Expected {} but got {}!", c.image_size, pixel_values.dim(3)));
  const Var patches = conv_proj.call(t, pixel_values);  // [B, D, h, w]
  const Var tokens = attn::transpose(t, attn::reshape(t, patches, {0, c.hidden_size, c.grid() * c.grid()}), {0, 2, 1});
  // class_token.expand(B, -1, -1), then cat along the sequence
  const Var batch =
      t.op("Shape", {tokens}, {{"start", Attribute::of_int(0)}, {"end", Attribute::of_int(1)}}, DType::Int64, {1});
  const Var target =
      t.op("Concat", {batch, t.constant_ints({1, c.hidden_size})}, {{"axis", Attribute::of_int(0)}}, DType::Int64, {3});
  const Var cls = t.op("Expand", {t.parameter(owner, "class_token"), target}, {}, DType::Float32,
                       {tokens.dim(0), 1, c.hidden_size});
  return t.op("Concat", {cls, tokens}, {{"axis", Attribute::of_int(1)}}, DType::Float32,
              {tokens.dim(0), tokens.dim(1) + 1, c.hidden_size});
}

Var tokens_to_feature_map(Tracer& t, const Var& tokens, const VitConfig& c) {
  const int64_t n = c.grid() * c.grid();
  const Var patches =
      t.op("Slice",
           {tokens, t.constant_ints({1}), t.constant_ints({std::numeric_limits<int64_t>::max()}), t.constant_ints({1})},
           {}, tokens.dtype, {tokens.dim(0), n, c.hidden_size});
  return attn::transpose(t, attn::reshape(t, patches, {0, c.grid(), c.grid(), c.hidden_size}), {0, 3, 1, 2});
}

namespace {

// torchvision's VisionTransformer with representation_size None: heads = Sequential(head: Linear).
class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(const VitConfig& c) : config_(c) {
    conv_proj_ = register_module("conv_proj", make_conv_proj(*this, c));
    encoder_ = register_module("encoder", std::make_shared<Encoder>(c, true));
    auto head = std::make_shared<Linear>(c.hidden_size, c.num_labels);
    constant_(head->get_parameter("weight"), 0.0);  // torchvision zero-initialises the head
    constant_(head->get_parameter("bias"), 0.0);
    heads_ = register_module(
        "heads", std::make_shared<Sequential>(std::vector<std::pair<std::string, ModulePtr>>{{"head", head}}));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    if (inputs.size() != 1)
      throw InvalidArgument(fmt::format("vit: forward takes pixel_values only, got {} inputs", inputs.size()));
    const Var x = encoder_->call(t, embed_patches(t, *this, *conv_proj_, config_, inputs[0]));
    return {heads_->call(t, select_token(t, x, 0))};
  }
  std::string type_name() const override { return "VisionTransformer"; }

 private:
  VitConfig config_;
  ModulePtr conv_proj_, encoder_, heads_;
};

struct Registrar {
  Registrar() {
    ZooEntry e;
    e.name = kModel;
    e.description = "Vision Transformer (torchvision vit_b_16 layout and keys, HF ViTConfig names)";
    e.default_config = default_config();
    e.create = [](const Config& c) -> ModulePtr { return std::make_shared<VisionTransformer>(VitConfig::from(c)); };
    e.example_inputs = [](const Config& c) {
      const VitConfig v = VitConfig::from(c);
      return InputShapes{{"pixel_values", {2, v.num_channels, v.image_size, v.image_size}}};
    };
    register_model(std::move(e));
  }
} registrar;

}  // namespace

}  // namespace kiln::nn::zoo::vit
