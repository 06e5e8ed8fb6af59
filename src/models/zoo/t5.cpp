// The zoo's "t5": Hugging Face's T5ForConditionalGeneration (modeling_t5.py, eager attention) with
// its module tree, state_dict keys, T5Config names and defaults, and _init_weights.
//
//   shared, encoder.embed_tokens (the shared module itself), encoder.block.N.layer.0.SelfAttention.
//   {q,k,v,o} (block 0 also relative_attention_bias), .layer.0.layer_norm, .layer.1.DenseReluDense.
//   {wi | wi_0, wi_1, wo}, .layer.1.layer_norm, encoder.final_layer_norm, decoder.embed_tokens,
//   decoder.block.N.layer.{0: SelfAttention, 1: EncDecAttention, 2: DenseReluDense} with their
//   layer_norm, decoder.final_layer_norm, lm_head
//
// No biases; RMS LayerNorm (T5LayerNorm); unscaled QK^T plus a relative position bias learned per
// bucket and head in each stack's first block and reused by the others (bidirectional buckets in
// the encoder, causal ones in the decoder). The buckets of HF's _relative_position_bucket are a
// table made when tracing, in torch's float32 arithmetic, over relative positions clamped to
// +-max(relative_attention_max_distance, relative_attention_num_buckets), beyond which every
// bucket is the last. With tie_word_embeddings (the default) lm_head.weight is shared.weight and
// the decoder output is scaled by d_model ** -0.5 first, as HF. "part" chooses the exported graph
// (models/zoo/seq2seq_util.h).
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
const std::string kModel = "t5";

struct T5Config {
  int64_t vocab_size, d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads;
  int64_t buckets, max_distance;
  double dropout_rate, layer_norm_epsilon, initializer_factor;
  std::string dense_act_fn;
  bool gated, tie_word_embeddings;
  Part part;

  static T5Config from(const Config& c) {
    T5Config t;
    t.vocab_size = config_int(c, kModel, "vocab_size");
    t.d_model = config_int(c, kModel, "d_model");
    t.d_kv = config_int(c, kModel, "d_kv");
    t.d_ff = config_int(c, kModel, "d_ff");
    t.num_layers = config_int(c, kModel, "num_layers");
    t.num_decoder_layers = config_optional_int(c, kModel, "num_decoder_layers").value_or(t.num_layers);
    t.num_heads = config_int(c, kModel, "num_heads");
    t.buckets = config_int(c, kModel, "relative_attention_num_buckets", 4);
    t.max_distance = config_int(c, kModel, "relative_attention_max_distance");
    if (t.max_distance <= t.buckets / 2)
      throw InvalidArgument(fmt::format(
          "t5 config: relative_attention_max_distance ({}) must exceed half of relative_attention_num_buckets ({}): "
          "HF's buckets divide by the log of their ratio",
          t.max_distance, t.buckets));
    t.dropout_rate = config_prob(c, kModel, "dropout_rate");
    t.layer_norm_epsilon = config_double(c, kModel, "layer_norm_epsilon");
    t.initializer_factor = config_double(c, kModel, "initializer_factor");
    // HF's T5Config: "gated-ACT" or "ACT"; "gated-gelu" means gelu_new.
    const std::string proj = config_string(c, kModel, "feed_forward_proj");
    t.gated = proj.rfind("gated-", 0) == 0;
    t.dense_act_fn = t.gated ? proj.substr(6) : proj;
    if (t.dense_act_fn.empty() || t.dense_act_fn.find('-') != std::string::npos)
      throw InvalidArgument(fmt::format(
          "t5 config: feed_forward_proj '{}' is not a valid activation; use 'gated-{{ACT}}' or '{{ACT}}'", proj));
    if (proj == "gated-gelu") t.dense_act_fn = "gelu_new";
    make_activation(kModel, "feed_forward_proj", t.dense_act_fn);
    t.tie_word_embeddings = config_bool(c, kModel, "tie_word_embeddings");
    for (const char* key : {"pad_token_id", "eos_token_id", "decoder_start_token_id"}) config_int(c, kModel, key, 0);
    t.part = seq2seq::part_of(c, kModel);
    return t;
  }
  seq2seq::Dims dims() const { return {num_decoder_layers, num_heads, d_kv, d_model}; }
};

// HF's T5LayerNorm: weight * x / sqrt(mean(x^2) + eps), no mean subtracted, no bias.
class T5LayerNorm : public Module {
 public:
  T5LayerNorm(int64_t d, double eps, double init) : eps_(eps) {
    constant_(register_parameter("weight", Tensor::zeros(DType::Float32, {d})), init);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    std::vector<int64_t> reduced = x.shape;
    reduced.back() = 1;
    const Var variance =
        t.op("ReduceMean", {attn::binary(t, "Mul", x, x)},
             {{"axes", Attribute::of_ints({-1})}, {"keepdims", Attribute::of_int(1)}}, x.dtype, reduced);
    const Var rms =
        t.op("Sqrt", {attn::binary(t, "Add", variance, t.constant_scalar(eps_, x.dtype, "eps"))}, {}, x.dtype, reduced);
    const Var normed = attn::binary(t, "Mul", x, t.op("Reciprocal", {rms}, {}, x.dtype, reduced));
    return {attn::binary(t, "Mul", t.parameter(*this, "weight"), normed)};
  }
  std::string type_name() const override { return "T5LayerNorm"; }

 private:
  double eps_;
};

std::shared_ptr<Linear> t5_linear(int64_t in, int64_t out, double std) { return hf_linear(in, out, std, false); }

// HF's _relative_position_bucket for relative positions -range .. range, in torch's float32 steps.
std::vector<int64_t> bucket_table(bool bidirectional, int64_t buckets, int64_t max_distance, int64_t range) {
  std::vector<int64_t> table;
  for (int64_t relative = -range; relative <= range; ++relative) {
    int64_t n = buckets, bucket = 0, position = relative;
    if (bidirectional) {
      n /= 2;
      bucket += relative > 0 ? n : 0;
      position = std::abs(relative);
    } else {
      position = -std::min<int64_t>(relative, 0);
    }
    const int64_t max_exact = n / 2;
    if (position < max_exact) {
      table.push_back(bucket + position);
      continue;
    }
    const float ratio = static_cast<float>(position) / static_cast<float>(max_exact);
    const auto denominator = static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact));
    const float scaled = std::log(ratio) / denominator * static_cast<float>(n - max_exact);
    table.push_back(bucket + std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), n - 1));
  }
  return table;
}

enum class AttentionKind { EncoderSelf, DecoderSelf, Cross };

// HF's T5Attention. Inputs and outputs by kind (keys and values [B, H, L, d]; "bias" the additive
// position bias the stack's first block makes and the others reuse):
//   EncoderSelf {h, mask} with the bias table, else {h, bias} -> {out, bias (mask included)}
//   DecoderSelf {h[, past k, past v]} with the table, else {h[, past k, past v], bias} -> {out, k, v, bias}
//   Cross       {h, encoder h, mask} -> {out, k, v}; with the cache {h, k, v, mask} -> {out}
class T5Attention : public Module {
 public:
  T5Attention(const T5Config& c, AttentionKind kind, bool has_bias)
      : heads_(c.num_heads), buckets_(c.buckets), max_distance_(c.max_distance), kind_(kind), has_bias_(has_bias) {
    const int64_t inner = c.num_heads * c.d_kv;
    const double f = c.initializer_factor;
    q_ = register_module("q", t5_linear(c.d_model, inner, f / std::sqrt(static_cast<double>(c.d_model * c.d_kv))));
    k_ = register_module("k", t5_linear(c.d_model, inner, f / std::sqrt(static_cast<double>(c.d_model))));
    v_ = register_module("v", t5_linear(c.d_model, inner, f / std::sqrt(static_cast<double>(c.d_model))));
    o_ = register_module("o", t5_linear(inner, c.d_model, f / std::sqrt(static_cast<double>(inner))));
    if (has_bias)
      register_module("relative_attention_bias",
                      hf_embedding(c.buckets, c.num_heads, f / std::sqrt(static_cast<double>(c.d_model))));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout_rate));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& h = inputs.at(0);
    const Var q = split_heads(t, q_->call(t, h), heads_);
    EagerAttention a{.dropout = dropout_.get()};
    if (kind_ == AttentionKind::Cross) {
      const bool cached = inputs.size() == 4;
      const Var k = cached ? inputs[1] : split_heads(t, k_->call(t, inputs.at(1)), heads_);
      const Var v = cached ? inputs[2] : split_heads(t, v_->call(t, inputs.at(1)), heads_);
      a.additive_mask = inputs.back();
      const Var out = o_->call(t, merge_heads(t, eager_attention(t, q, k, v, a)));
      if (cached) return {out};
      return {out, k, v};
    }
    Var k = split_heads(t, k_->call(t, h), heads_), v = split_heads(t, v_->call(t, h), heads_);
    // A block cache: past keys and values, then (first block) the query and key positions and the
    // mask hiding later and unfilled keys, which the bias passed on includes.
    const bool cached = kind_ == AttentionKind::DecoderSelf && inputs.size() == (has_bias_ ? 6U : 4U);
    if (cached) {
      k = append_past(t, inputs[1], k);
      v = append_past(t, inputs[2], v);
    }
    a.causal = kind_ == AttentionKind::DecoderSelf && !cached;
    Var bias = inputs.back();
    if (has_bias_ && cached) {
      bias = attn::binary(t, "Add", bias_of(t, relative_rows(t, inputs[3], inputs[4])), inputs[5]);
    } else if (has_bias_) {
      bias = position_bias(t, q, k);
      if (kind_ == AttentionKind::EncoderSelf) bias = attn::binary(t, "Add", bias, inputs.at(1));
    }
    a.additive_mask = bias;
    const Var out = o_->call(t, merge_heads(t, eager_attention(t, q, k, v, a)));
    if (kind_ == AttentionKind::EncoderSelf) return {out, bias};
    return {out, k, v, bias};
  }
  std::string type_name() const override { return "T5Attention"; }

 private:
  // compute_bias: [1, H, Q, K] for queries at positions K - Q .. K - 1 (the last of K).
  Var position_bias(Tracer& t, const Var& q, const Var& k) {
    const Var zero = t.constant(Tensor::scalar<int64_t>(0), "zero"),
              one = t.constant(Tensor::scalar<int64_t>(1), "one");
    const Var qlen = attn::squeeze(t, seq2seq::dim_of(t, q, 2), {0}),
              klen = attn::squeeze(t, seq2seq::dim_of(t, k, 2), {0});
    const Var context = t.op("Range", {attn::binary(t, "Sub", klen, qlen), klen, one}, {}, DType::Int64, {q.dim(2)});
    const Var memory = t.op("Range", {zero, klen, one}, {}, DType::Int64, {k.dim(2)});
    const Var relative = attn::binary(t, "Sub", attn::unsqueeze(t, memory, {0}), attn::unsqueeze(t, context, {1}));
    return attn::unsqueeze(t, bias_of(t, relative), {0});
  }

  // Each row's key positions [B, K] less its query positions [B, Q]: [B, Q, K].
  static Var relative_rows(Tracer& t, const Var& query_positions, const Var& key_positions) {
    return attn::binary(t, "Sub", attn::unsqueeze(t, key_positions, {1}), attn::unsqueeze(t, query_positions, {2}));
  }

  // The learned bias of relative positions [..., Q, K]: [..., H, Q, K].
  Var bias_of(Tracer& t, const Var& relative) {
    const int64_t range = std::max(max_distance_, buckets_);
    const bool bidirectional = kind_ == AttentionKind::EncoderSelf;
    const std::vector<int64_t> table = bucket_table(bidirectional, buckets_, max_distance_, range);
    const std::vector<int64_t>& qk = relative.shape;
    const Var clamped = t.op("Clip",
                             {relative, t.constant(Tensor::scalar<int64_t>(-range), "min"),
                              t.constant(Tensor::scalar<int64_t>(range), "max")},
                             {}, DType::Int64, qk);
    const Var index = attn::binary(t, "Add", clamped, t.constant(Tensor::scalar<int64_t>(range), "offset"));
    const Var buckets =
        t.op("Gather",
             {t.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(table.size())}, table), "buckets"), index},
             {{"axis", Attribute::of_int(0)}}, DType::Int64, qk);
    const Var values = get_submodule("relative_attention_bias")->call(t, buckets);  // [..., Q, K, H]
    return qk.size() == 2 ? attn::transpose(t, values, {2, 0, 1}) : attn::transpose(t, values, {0, 3, 1, 2});
  }

  int64_t heads_, buckets_, max_distance_;
  AttentionKind kind_;
  bool has_bias_;
  ModulePtr q_, k_, v_, o_, dropout_;
};

// T5LayerSelfAttention / T5LayerCrossAttention / T5LayerFF: x + dropout(inner(layer_norm(x), ...)),
// the inner module's other outputs passed through.
class T5Residual : public Module {
 public:
  T5Residual(std::string type, const std::string& inner_name, ModulePtr inner, const T5Config& c)
      : type_(std::move(type)) {
    inner_ = register_module(inner_name, std::move(inner));
    norm_ = register_module("layer_norm",
                            std::make_shared<T5LayerNorm>(c.d_model, c.layer_norm_epsilon, c.initializer_factor));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout_rate));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    std::vector<Var> in = inputs;
    in[0] = norm_->call(t, inputs.at(0));
    std::vector<Var> out = inner_->call(t, in);
    out[0] = attn::binary(t, "Add", inputs[0], dropout_->call(t, out[0]));
    return out;
  }
  std::string type_name() const override { return type_; }

 private:
  std::string type_;
  ModulePtr inner_, norm_, dropout_;
};

// T5DenseActDense (wi, act, dropout, wo) or T5DenseGatedActDense (act(wi_0 x) * wi_1 x).
class T5Dense : public Module {
 public:
  explicit T5Dense(const T5Config& c) : gated_(c.gated) {
    const double f = c.initializer_factor;
    const double in_std = f / std::sqrt(static_cast<double>(c.d_model));
    if (gated_) {
      wi_0_ = register_module("wi_0", t5_linear(c.d_model, c.d_ff, in_std));
      wi_1_ = register_module("wi_1", t5_linear(c.d_model, c.d_ff, in_std));
    } else {
      wi_0_ = register_module("wi", t5_linear(c.d_model, c.d_ff, in_std));
    }
    wo_ = register_module("wo", t5_linear(c.d_ff, c.d_model, f / std::sqrt(static_cast<double>(c.d_ff))));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout_rate));
    act_ = register_module("act", make_activation(kModel, "feed_forward_proj", c.dense_act_fn));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    Var h = act_->call(t, wi_0_->call(t, x));
    if (gated_) h = attn::binary(t, "Mul", h, wi_1_->call(t, x));
    return {wo_->call(t, dropout_->call(t, h))};
  }
  std::string type_name() const override { return gated_ ? "T5DenseGatedActDense" : "T5DenseActDense"; }

 private:
  bool gated_;
  ModulePtr wi_0_, wi_1_, wo_, dropout_, act_;
};

// inputs (encoder) {h, mask or bias} -> {h, bias}; (decoder) {h, encoder mask, encoder h[, bias]}
// -> {h, k, v, cross k, cross v, bias}; with the cache {h, encoder mask, past k, past v, cross k,
// cross v[, bias]} -> {h, k, v, bias}. The first block takes no bias (it makes it).
class T5Block : public Module {
 public:
  T5Block(const T5Config& c, bool decoder, bool first) : decoder_(decoder), first_(first) {
    layer_ = register_module("layer", std::make_shared<ModuleList>());
    const AttentionKind self = decoder ? AttentionKind::DecoderSelf : AttentionKind::EncoderSelf;
    layer_->append(std::make_shared<T5Residual>("T5LayerSelfAttention", "SelfAttention",
                                                std::make_shared<T5Attention>(c, self, first), c));
    if (decoder)
      layer_->append(std::make_shared<T5Residual>("T5LayerCrossAttention", "EncDecAttention",
                                                  std::make_shared<T5Attention>(c, AttentionKind::Cross, false), c));
    layer_->append(std::make_shared<T5Residual>("T5LayerFF", "DenseReluDense", std::make_shared<T5Dense>(c), c));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& h = inputs.at(0);
    if (!decoder_) {
      const std::vector<Var> a = (*layer_)[0]->call(t, {h, inputs.at(1)});
      return {(*layer_)[1]->call(t, a[0]), a[1]};
    }
    const bool cached = inputs.size() == (first_ ? 9U : 7U);
    std::vector<Var> self_in = {h};
    if (cached) self_in.insert(self_in.end(), {inputs[2], inputs[3]});
    if (cached && first_) self_in.insert(self_in.end(), inputs.begin() + 6, inputs.end());
    if (!first_) self_in.push_back(inputs.back());
    const std::vector<Var> self = (*layer_)[0]->call(t, self_in);
    const std::vector<Var> cross =
        (*layer_)[1]->call(t, cached ? std::vector<Var>{self[0], inputs[4], inputs[5], inputs[1]}
                                     : std::vector<Var>{self[0], inputs[2], inputs[1]});
    std::vector<Var> out = {(*layer_)[2]->call(t, cross[0]), self[1], self[2]};
    if (!cached) out.insert(out.end(), {cross[1], cross[2]});
    out.push_back(self[3]);
    return out;
  }
  std::string type_name() const override { return "T5Block"; }

 private:
  bool decoder_, first_;
  std::shared_ptr<ModuleList> layer_;
};

// The encoder: {ids, mask} -> {h}. The decoder: {ids, encoder mask, encoder h} -> {h, per layer k,
// v, cross k, cross v}, or with the cache {ids, encoder mask, per layer past k, v, cross k, v} ->
// {h, per layer k, v}. Masks are additive ([B, 1, 1, S]).
class T5Stack : public Module {
 public:
  T5Stack(const T5Config& c, const std::shared_ptr<Embedding>& shared, bool decoder) : decoder_(decoder) {
    register_module("embed_tokens", shared);
    block_ = register_module("block", std::make_shared<ModuleList>());
    for (int64_t i = 0; i < (decoder ? c.num_decoder_layers : c.num_layers); ++i)
      block_->append(std::make_shared<T5Block>(c, decoder, i == 0));
    final_layer_norm_ = register_module(
        "final_layer_norm", std::make_shared<T5LayerNorm>(c.d_model, c.layer_norm_epsilon, c.initializer_factor));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.dropout_rate));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    Var h = dropout_->call(t, get_submodule("embed_tokens")->call(t, inputs.at(0)));
    const size_t layers = block_->size();
    const bool cached = decoder_ && inputs.size() == 4 + 4 * layers;
    std::vector<Var> out(1);
    std::optional<Var> bias;
    for (size_t i = 0; i < layers; ++i) {
      std::vector<Var> in = {h, inputs.at(1)};
      if (cached) {
        in.insert(in.end(), inputs.begin() + 4 + 4 * static_cast<std::ptrdiff_t>(i),
                  inputs.begin() + 8 + 4 * static_cast<std::ptrdiff_t>(i));
        if (i == 0) {  // the first block makes the bias from the positions and the block cache's mask
          const seq2seq::CachedSelfAttention self = seq2seq::cached_self_attention(t, inputs[2], inputs[3], inputs[4]);
          in.insert(in.end(), {inputs[3], self.key_positions, self.additive_mask});
        }
      } else if (decoder_) {
        in.push_back(inputs.at(2));
      }
      if (bias) {
        if (decoder_) in.push_back(*bias);
        else in[1] = *bias;
      }
      std::vector<Var> block = (*block_)[i]->call(t, in);
      h = block[0];
      bias = block.back();
      out.insert(out.end(), block.begin() + 1, block.end() - 1);
    }
    out[0] = dropout_->call(t, final_layer_norm_->call(t, h));
    return out;
  }
  std::string type_name() const override { return "T5Stack"; }

 private:
  bool decoder_;
  std::shared_ptr<ModuleList> block_;
  ModulePtr final_layer_norm_, dropout_;
};

class T5ForConditionalGeneration : public Module {
 public:
  explicit T5ForConditionalGeneration(const T5Config& c) : config_(c) {
    auto shared = hf_embedding(c.vocab_size, c.d_model, c.initializer_factor);
    register_module("shared", shared);
    encoder_ = register_module("encoder", std::make_shared<T5Stack>(c, shared, false));
    decoder_ = register_module("decoder", std::make_shared<T5Stack>(c, shared, true));
    if (c.tie_word_embeddings)
      lm_head_ = register_module("lm_head",
                                 std::make_shared<TiedLinear>(shared, 1.0 / std::sqrt(static_cast<double>(c.d_model))));
    else lm_head_ = register_module("lm_head", t5_linear(c.d_model, c.vocab_size, c.initializer_factor));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    return seq2seq::forward_part(t, kModel, config_.part, config_.dims(), inputs, *encoder_, *decoder_,
                                 [&](const Var& h) { return lm_head_->call(t, h); });
  }
  std::string type_name() const override { return "T5ForConditionalGeneration"; }

 private:
  T5Config config_;
  ModulePtr encoder_, decoder_, lm_head_;
};

struct Registrar {
  Registrar() {
    ZooEntry e;
    e.name = kModel;
    e.description =
        "T5 encoder-decoder for sequence-to-sequence LM (HF T5ForConditionalGeneration keys, relative position "
        "bias, lm_head tied to shared)";
    e.default_config = {{"vocab_size", 32128},
                        {"d_model", 512},
                        {"d_kv", 64},
                        {"d_ff", 2048},
                        {"num_layers", 6},
                        {"num_decoder_layers", nullptr},
                        {"num_heads", 8},
                        {"relative_attention_num_buckets", 32},
                        {"relative_attention_max_distance", 128},
                        {"dropout_rate", 0.1},
                        {"layer_norm_epsilon", 1e-6},
                        {"initializer_factor", 1.0},
                        {"feed_forward_proj", "relu"},
                        {"tie_word_embeddings", true},
                        {"pad_token_id", 0},
                        {"eos_token_id", 1},
                        {"decoder_start_token_id", 0},
                        {"part", "model"}};
    e.create = [](const Config& c) -> ModulePtr {
      return std::make_shared<T5ForConditionalGeneration>(T5Config::from(c));
    };
    seq2seq::describe_parts(e, kModel, [](const Config& c) { return T5Config::from(c).dims(); });
    register_model(std::move(e));
  }
} registrar;

}  // namespace

}  // namespace kiln::nn::zoo
