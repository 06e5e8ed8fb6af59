// The zoo's "bart": Hugging Face's BartForConditionalGeneration (modeling_bart.py, eager attention)
// with its module tree, state_dict keys, BartConfig names and defaults, and _init_weights.
//
//   final_logits_bias (a buffer, never trained), model.shared, model.encoder.embed_tokens,
//   model.encoder.embed_positions, model.encoder.layers.N.{self_attn.{k,v,q,out}_proj,
//   self_attn_layer_norm, fc1, fc2, final_layer_norm}, model.encoder.layernorm_embedding,
//   model.decoder.{embed_tokens, embed_positions, layers.N.{self_attn, self_attn_layer_norm,
//   encoder_attn, encoder_attn_layer_norm, fc1, fc2, final_layer_norm}, layernorm_embedding},
//   lm_head
//
// model.shared.weight, both embed_tokens.weight and lm_head.weight are one storage (HF's tied
// weights); exported ONNX has the one initializer "model.shared.weight". Learned positions sit
// at offset 2 (BartLearnedPositionalEmbedding). Post-LayerNorm layers; queries scaled by
// head_dim ** -0.5 before QK^T. "part" (models/zoo/seq2seq_util.h) chooses the exported graph;
// with labels after decoder_input_ids the model part returns HF's loss first.
#include <fmt/format.h>

#include <cmath>

#include "kiln/error.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/zoo.h"
#include "models/nn/attention_ops.h"
#include "models/zoo/seq2seq_util.h"
#include "models/zoo/transformer_util.h"

namespace kiln::nn::zoo {

namespace {

using namespace transformers;
using seq2seq::Part;
const std::string kModel = "bart";
constexpr int64_t kPositionOffset = 2;  // BartLearnedPositionalEmbedding's offset

struct BartConfig {
  int64_t vocab_size, max_position_embeddings, d_model;
  int64_t encoder_layers, decoder_layers, encoder_ffn_dim, decoder_ffn_dim;
  int64_t encoder_attention_heads, decoder_attention_heads, pad_token_id;
  std::string activation_function;
  double dropout, attention_dropout, activation_dropout, init_std;
  bool scale_embedding;
  Part part;

  static BartConfig from(const Config& c) {
    BartConfig b;
    b.vocab_size = config_int(c, kModel, "vocab_size");
    b.max_position_embeddings = config_int(c, kModel, "max_position_embeddings");
    b.d_model = config_int(c, kModel, "d_model");
    b.encoder_layers = config_int(c, kModel, "encoder_layers", 0);
    b.decoder_layers = config_int(c, kModel, "decoder_layers", 1);
    b.encoder_ffn_dim = config_int(c, kModel, "encoder_ffn_dim");
    b.decoder_ffn_dim = config_int(c, kModel, "decoder_ffn_dim");
    b.encoder_attention_heads = config_int(c, kModel, "encoder_attention_heads");
    b.decoder_attention_heads = config_int(c, kModel, "decoder_attention_heads");
    require_divisible(kModel, "d_model", b.d_model, "encoder_attention_heads", b.encoder_attention_heads);
    require_divisible(kModel, "d_model", b.d_model, "decoder_attention_heads", b.decoder_attention_heads);
    b.pad_token_id = config_int(c, kModel, "pad_token_id", 0);
    if (b.pad_token_id >= b.vocab_size)
      throw InvalidArgument(
          fmt::format("bart config: pad_token_id {} is not below vocab_size {}", b.pad_token_id, b.vocab_size));
    for (const char* key : {"bos_token_id", "eos_token_id", "decoder_start_token_id", "forced_eos_token_id"})
      config_int(c, kModel, key, 0);  // generation's; checked here so that a bad value fails early
    b.activation_function = config_string(c, kModel, "activation_function");
    make_activation(kModel, "activation_function", b.activation_function);
    b.dropout = config_prob(c, kModel, "dropout");
    b.attention_dropout = config_prob(c, kModel, "attention_dropout");
    b.activation_dropout = config_prob(c, kModel, "activation_dropout");
    b.init_std = config_double(c, kModel, "init_std");
    b.scale_embedding = config_bool(c, kModel, "scale_embedding");
    b.part = seq2seq::part_of(c, kModel);
    return b;
  }
  seq2seq::Dims dims() const {
    return {decoder_layers, decoder_attention_heads, d_model / decoder_attention_heads, d_model};
  }
};

enum class AttentionKind { EncoderSelf, DecoderSelf, Cross };

int64_t head_dim(int64_t d, int64_t heads) { return d / heads; }  // HF's embed_dim // num_heads

// HF's BartAttention. Inputs and outputs by kind (keys and values [B, H, L, d]):
//   EncoderSelf {h, additive mask} -> {out}
//   DecoderSelf {h} -> {out, k, v} (causal); with the cache {h, past k, past v, additive mask
//               [B, 1, S, P + S]} -> {out, k, v} (past + new)
//   Cross       {h, encoder h, additive mask} -> {out, k, v}; with the cache {h, k, v, mask} -> {out}
class BartAttention : public Module {
 public:
  BartAttention(int64_t d, int64_t heads, double dropout, double std, AttentionKind kind)
      : heads_(heads), kind_(kind), scaling_(1.0 / std::sqrt(static_cast<double>(head_dim(d, heads)))) {
    k_proj_ = register_module("k_proj", hf_linear(d, d, std));
    v_proj_ = register_module("v_proj", hf_linear(d, d, std));
    q_proj_ = register_module("q_proj", hf_linear(d, d, std));
    out_proj_ = register_module("out_proj", hf_linear(d, d, std));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& h = inputs.at(0);
    const Var q = split_heads(
        t, attn::binary(t, "Mul", q_proj_->call(t, h), t.constant_scalar(scaling_, h.dtype, "scaling")), heads_);
    EagerAttention a{.dropout = dropout_.get()};
    Var k, v;
    bool computed = true;  // keys and values projected in this call (returned as the present ones)
    if (kind_ == AttentionKind::Cross && inputs.size() == 4) {
      k = inputs[1];
      v = inputs[2];
      a.additive_mask = inputs[3];
      computed = false;
    } else {
      const Var& source = kind_ == AttentionKind::Cross ? inputs.at(1) : h;
      k = split_heads(t, k_proj_->call(t, source), heads_);
      v = split_heads(t, v_proj_->call(t, source), heads_);
      if (kind_ == AttentionKind::EncoderSelf) a.additive_mask = inputs.at(1);
      if (kind_ == AttentionKind::Cross) a.additive_mask = inputs.at(2);
    }
    if (kind_ == AttentionKind::DecoderSelf) {
      a.causal = inputs.size() == 1;
      if (inputs.size() == 4) {  // a block cache: its own mask hides unfilled slots and later keys
        k = append_past(t, inputs[1], k);
        v = append_past(t, inputs[2], v);
        a.additive_mask = inputs[3];
      }
    }
    const Var out = out_proj_->call(t, merge_heads(t, eager_attention(t, q, k, v, a)));
    if (kind_ == AttentionKind::EncoderSelf || !computed) return {out};
    return {out, k, v};
  }
  std::string type_name() const override { return "BartAttention"; }

 private:
  int64_t heads_;
  AttentionKind kind_;
  double scaling_;
  ModulePtr k_proj_, v_proj_, q_proj_, out_proj_, dropout_;
};

// The feed-forward half of a layer: residual + dropout(fc2(activation_dropout(act(fc1(h))))),
// then final_layer_norm. Registered on the layer itself (HF's names), run by this helper.
struct FeedForward {
  ModulePtr fc1, fc2, act, activation_dropout, dropout, norm;
  void make(Module& layer, const BartConfig& c, int64_t ffn_dim) {
    act = layer.register_module("activation_fn", make_activation(kModel, "activation_function", c.activation_function));
    activation_dropout = layer.register_module("activation_dropout", std::make_shared<Dropout>(c.activation_dropout));
    fc1 = layer.register_module("fc1", hf_linear(c.d_model, ffn_dim, c.init_std));
    fc2 = layer.register_module("fc2", hf_linear(ffn_dim, c.d_model, c.init_std));
    norm =
        layer.register_module("final_layer_norm", std::make_shared<LayerNorm>(std::vector<int64_t>{c.d_model}, 1e-5));
  }
  Var run(Tracer& t, const Var& h) const {
    const Var x = fc2->call(t, activation_dropout->call(t, act->call(t, fc1->call(t, h))));
    return norm->call(t, attn::binary(t, "Add", h, dropout->call(t, x)));
  }
};

// residual + dropout(x), then `norm`
Var add_norm(Tracer& t, const ModulePtr& dropout, const ModulePtr& norm, const Var& residual, const Var& x) {
  return norm->call(t, attn::binary(t, "Add", residual, dropout->call(t, x)));
}

// inputs {h, additive mask} -> {h}
class BartEncoderLayer : public Module {
 public:
  explicit BartEncoderLayer(const BartConfig& c) {
    self_attn_ = register_module(
        "self_attn", std::make_shared<BartAttention>(c.d_model, c.encoder_attention_heads, c.attention_dropout,
                                                     c.init_std, AttentionKind::EncoderSelf));
    self_attn_layer_norm_ =
        register_module("self_attn_layer_norm", std::make_shared<LayerNorm>(std::vector<int64_t>{c.d_model}, 1e-5));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
    ff_.make(*this, c, c.encoder_ffn_dim);
    ff_.dropout = dropout_;
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& h = inputs.at(0);
    const Var a = add_norm(t, dropout_, self_attn_layer_norm_, h, self_attn_->call(t, inputs).at(0));
    return {ff_.run(t, a)};
  }
  std::string type_name() const override { return "BartEncoderLayer"; }

 private:
  ModulePtr self_attn_, self_attn_layer_norm_, dropout_;
  FeedForward ff_;
};

// inputs {h, encoder mask, encoder h} -> {h, k, v, cross k, cross v};
// with the cache {h, encoder mask, past k, past v, cross k, cross v, self-attention mask} -> {h, k, v}
class BartDecoderLayer : public Module {
 public:
  explicit BartDecoderLayer(const BartConfig& c) {
    const int64_t heads = c.decoder_attention_heads;
    const std::vector<int64_t> shape{c.d_model};
    self_attn_ = register_module("self_attn", std::make_shared<BartAttention>(c.d_model, heads, c.attention_dropout,
                                                                              c.init_std, AttentionKind::DecoderSelf));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
    self_attn_layer_norm_ = register_module("self_attn_layer_norm", std::make_shared<LayerNorm>(shape, 1e-5));
    encoder_attn_ = register_module(
        "encoder_attn",
        std::make_shared<BartAttention>(c.d_model, heads, c.attention_dropout, c.init_std, AttentionKind::Cross));
    encoder_attn_layer_norm_ = register_module("encoder_attn_layer_norm", std::make_shared<LayerNorm>(shape, 1e-5));
    ff_.make(*this, c, c.decoder_ffn_dim);
    ff_.dropout = dropout_;
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& h = inputs.at(0);
    const bool cached = inputs.size() == 7;
    const std::vector<Var> self =
        self_attn_->call(t, cached ? std::vector<Var>{h, inputs[2], inputs[3], inputs[6]} : std::vector<Var>{h});
    const Var a = add_norm(t, dropout_, self_attn_layer_norm_, h, self[0]);
    const std::vector<Var> cross = encoder_attn_->call(
        t, cached ? std::vector<Var>{a, inputs[4], inputs[5], inputs[1]} : std::vector<Var>{a, inputs[2], inputs[1]});
    const Var b = add_norm(t, dropout_, encoder_attn_layer_norm_, a, cross[0]);
    std::vector<Var> out = {ff_.run(t, b), self[1], self[2]};
    if (!cached) out.insert(out.end(), {cross[1], cross[2]});
    return out;
  }
  std::string type_name() const override { return "BartDecoderLayer"; }

 private:
  ModulePtr self_attn_, dropout_, self_attn_layer_norm_, encoder_attn_, encoder_attn_layer_norm_;
  FeedForward ff_;
};

// BartLearnedPositionalEmbedding: weight [max_position_embeddings + 2, d]; inputs {ids} -> the rows
// of positions 0 .. S - 1 (offset by 2), [S, d]; {ids, position ids [B, S]} -> their rows, [B, S, d].
class BartLearnedPositionalEmbedding : public Module {
 public:
  BartLearnedPositionalEmbedding(int64_t max_positions, int64_t d, double std) : max_positions_(max_positions) {
    normal_(register_parameter("weight", Tensor::zeros(DType::Float32, {max_positions + kPositionOffset, d})), 0.0,
            std);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& ids = inputs.at(0);
    if (ids.dim(1) > max_positions_)
      throw ShapeError(
          fmt::format("bart: sequence length {} exceeds max_position_embeddings {}", ids.dim(1), max_positions_));
    const Var w = t.parameter(*this, "weight");
    if (inputs.size() == 2) {
      const Var rows =
          attn::binary(t, "Add", inputs[1], t.constant(Tensor::scalar<int64_t>(kPositionOffset), "offset"));
      return {t.op("Gather", {w, rows}, {{"axis", Attribute::of_int(0)}}, w.dtype, {ids.dim(0), ids.dim(1), w.dim(1)})};
    }
    const Var start = t.constant_ints({kPositionOffset}, "offset");
    const Var end = attn::binary(t, "Add", start, seq2seq::dim_of(t, ids, 1));
    const Var positions =
        t.op("Range",
             {attn::squeeze(t, start, {0}), attn::squeeze(t, end, {0}), t.constant(Tensor::scalar<int64_t>(1), "one")},
             {}, DType::Int64, {ids.dim(1)});
    return {t.op("Gather", {w, positions}, {{"axis", Attribute::of_int(0)}}, w.dtype, {ids.dim(1), w.dim(1)})};
  }
  std::string type_name() const override { return "BartLearnedPositionalEmbedding"; }

 private:
  int64_t max_positions_;
};

// The embeddings both stacks start with: layernorm_embedding(embed_tokens(ids) * scale + positions),
// then dropout.
struct Embeddings {
  std::shared_ptr<Embedding> tokens;
  ModulePtr positions, norm, dropout;
  double scale = 1.0;
  void make(Module& stack, const BartConfig& c, const std::shared_ptr<Embedding>& shared) {
    tokens = std::make_shared<Embedding>(c.vocab_size, c.d_model, c.pad_token_id);
    tokens->share_weight(shared);
    stack.register_module("embed_tokens", tokens);
    positions = stack.register_module("embed_positions", std::make_shared<BartLearnedPositionalEmbedding>(
                                                             c.max_position_embeddings, c.d_model, c.init_std));
    if (c.scale_embedding) scale = std::sqrt(static_cast<double>(c.d_model));
  }
  void finish(Module& stack, const BartConfig& c) {  // registered after the layers, as HF's
    norm = stack.register_module("layernorm_embedding",
                                 std::make_shared<LayerNorm>(std::vector<int64_t>{c.d_model}, 1e-5));
    dropout = stack.register_module("dropout", std::make_shared<Dropout>(c.dropout));
  }
  Var run(Tracer& t, const Var& ids, std::optional<Var> position_ids = {}) const {
    Var x = tokens->call(t, ids);
    if (scale != 1.0) x = attn::binary(t, "Mul", x, t.constant_scalar(scale, x.dtype, "embed_scale"));
    const Var p = position_ids ? positions->call(t, {ids, *position_ids}).at(0) : positions->call(t, ids);
    return dropout->call(t, norm->call(t, attn::binary(t, "Add", x, p)));
  }
};

// inputs {input_ids, additive mask} -> {last hidden state}
class BartEncoder : public Module {
 public:
  BartEncoder(const BartConfig& c, const std::shared_ptr<Embedding>& shared) {
    embeddings_.make(*this, c, shared);
    layers_ = register_module("layers", std::make_shared<ModuleList>());
    for (int64_t i = 0; i < c.encoder_layers; ++i) layers_->append(std::make_shared<BartEncoderLayer>(c));
    embeddings_.finish(*this, c);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    Var h = embeddings_.run(t, inputs.at(0));
    for (size_t i = 0; i < layers_->size(); ++i) h = (*layers_)[i]->call(t, {h, inputs.at(1)}).at(0);
    return {h};
  }
  std::string type_name() const override { return "BartEncoder"; }

 private:
  Embeddings embeddings_;
  std::shared_ptr<ModuleList> layers_;
};

// inputs {decoder ids, encoder mask (additive), encoder h} -> {h, per layer k, v, cross k, cross v};
// with the cache {ids, encoder mask, decoder mask [B, P + S], position ids [B, S], per layer past k,
// past v, cross k, cross v} -> {h, per layer k, v}
class BartDecoder : public Module {
 public:
  BartDecoder(const BartConfig& c, const std::shared_ptr<Embedding>& shared) {
    embeddings_.make(*this, c, shared);
    layers_ = register_module("layers", std::make_shared<ModuleList>());
    for (int64_t i = 0; i < c.decoder_layers; ++i) layers_->append(std::make_shared<BartDecoderLayer>(c));
    embeddings_.finish(*this, c);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const bool cached = inputs.size() == 4 + 4 * layers_->size();
    Var h = cached ? embeddings_.run(t, inputs[0], inputs[3]) : embeddings_.run(t, inputs[0]);
    std::optional<seq2seq::CachedSelfAttention> self;
    if (cached) self = seq2seq::cached_self_attention(t, inputs[2], inputs[3], inputs[4]);
    std::vector<Var> out(1);
    for (size_t i = 0; i < layers_->size(); ++i) {
      std::vector<Var> in = {h, inputs[1]};
      if (cached) {
        in.insert(in.end(), inputs.begin() + 4 + 4 * static_cast<std::ptrdiff_t>(i),
                  inputs.begin() + 8 + 4 * static_cast<std::ptrdiff_t>(i));
        in.push_back(self->additive_mask);
      } else {
        in.push_back(inputs[2]);
      }
      std::vector<Var> layer = (*layers_)[i]->call(t, in);
      h = layer[0];
      out.insert(out.end(), layer.begin() + 1, layer.end());
    }
    out[0] = h;
    return out;
  }
  std::string type_name() const override { return "BartDecoder"; }

 private:
  Embeddings embeddings_;
  std::shared_ptr<ModuleList> layers_;
};

class BartModel : public Module {
 public:
  explicit BartModel(const BartConfig& c) {
    shared_ = hf_embedding(c.vocab_size, c.d_model, c.init_std, c.pad_token_id);
    register_module("shared", shared_);
    encoder_ = register_module("encoder", std::make_shared<BartEncoder>(c, shared_));
    decoder_ = register_module("decoder", std::make_shared<BartDecoder>(c, shared_));
  }
  // BartModel is called through its stacks (BartForConditionalGeneration picks the part).
  std::vector<Var> forward(Tracer&, const std::vector<Var>&) override {
    throw Unsupported("bart: BartModel runs through BartForConditionalGeneration");
  }
  std::string type_name() const override { return "BartModel"; }
  const std::shared_ptr<Embedding>& shared() const { return shared_; }
  const ModulePtr& encoder() const { return encoder_; }
  const ModulePtr& decoder() const { return decoder_; }

 private:
  std::shared_ptr<Embedding> shared_;
  ModulePtr encoder_, decoder_;
};

class BartForConditionalGeneration : public Module {
 public:
  explicit BartForConditionalGeneration(const BartConfig& c) : config_(c) {
    model_ = std::make_shared<BartModel>(c);
    register_module("model", model_);
    register_buffer("final_logits_bias", Tensor::zeros(DType::Float32, {1, c.vocab_size}));
    lm_head_ = register_module("lm_head", std::make_shared<TiedLinear>(model_->shared()));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    return seq2seq::forward_part(t, kModel, config_.part, config_.dims(), inputs, *model_->encoder(),
                                 *model_->decoder(), [&](const Var& h) { return logits(t, h); });
  }
  std::string type_name() const override { return "BartForConditionalGeneration"; }

 private:
  Var logits(Tracer& t, const Var& h) {
    return attn::binary(t, "Add", lm_head_->call(t, h), t.parameter(*this, "final_logits_bias"));
  }

  BartConfig config_;
  std::shared_ptr<BartModel> model_;
  ModulePtr lm_head_;
};

struct Registrar {
  Registrar() {
    ZooEntry e;
    e.name = kModel;
    e.description =
        "BART encoder-decoder for sequence-to-sequence LM (HF BartForConditionalGeneration keys, shared "
        "embeddings tied to lm_head)";
    e.default_config = {{"vocab_size", 50265},
                        {"max_position_embeddings", 1024},
                        {"d_model", 1024},
                        {"encoder_layers", 12},
                        {"decoder_layers", 12},
                        {"encoder_ffn_dim", 4096},
                        {"decoder_ffn_dim", 4096},
                        {"encoder_attention_heads", 16},
                        {"decoder_attention_heads", 16},
                        {"activation_function", "gelu"},
                        {"dropout", 0.1},
                        {"attention_dropout", 0.0},
                        {"activation_dropout", 0.0},
                        {"init_std", 0.02},
                        {"scale_embedding", false},
                        {"pad_token_id", 1},
                        {"bos_token_id", 0},
                        {"eos_token_id", 2},
                        {"decoder_start_token_id", 2},
                        {"forced_eos_token_id", 2},
                        {"part", "model"}};
    e.create = [](const Config& c) -> ModulePtr {
      return std::make_shared<BartForConditionalGeneration>(BartConfig::from(c));
    };
    seq2seq::describe_parts(e, kModel, [](const Config& c) { return BartConfig::from(c).dims(); });
    register_model(std::move(e));
  }
} registrar;

}  // namespace

}  // namespace kiln::nn::zoo
