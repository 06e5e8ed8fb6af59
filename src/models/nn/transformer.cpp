// TransformerEncoderLayer and TransformerDecoderLayer as torch 1.13+ compute them (post-norm by
// default, pre-norm with norm_first), built from MultiheadAttention and the layers of layers.h.
#include "kiln/nn/transformer.h"

#include <fmt/format.h>

#include <functional>

#include "attention_ops.h"
#include "kiln/error.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

namespace {

bool present(const std::vector<Var>& inputs, size_t i) { return i < inputs.size() && !inputs[i].name.empty(); }

std::optional<Var> optional_input(const std::vector<Var>& inputs, size_t i) {
  return present(inputs, i) ? std::optional<Var>(inputs[i]) : std::nullopt;
}

void check_options(const TransformerLayerOptions& o, const char* type) {
  if (o.d_model <= 0 || o.nhead <= 0 || o.dim_feedforward <= 0)
    throw InvalidArgument(fmt::format("{}: d_model ({}), nhead ({}) and dim_feedforward ({}) must be positive", type,
                                      o.d_model, o.nhead, o.dim_feedforward));
  if (o.activation != "relu" && o.activation != "gelu")
    throw InvalidArgument(fmt::format("{}: activation should be relu/gelu, not {}", type, o.activation));
  if (o.dropout < 0.0 || o.dropout > 1.0)
    throw InvalidArgument(fmt::format("{}: dropout {} is not in [0, 1]", type, o.dropout));
}

std::shared_ptr<MultiheadAttention> make_attention(const TransformerLayerOptions& o) {
  return std::make_shared<MultiheadAttention>(MultiheadAttentionOptions{.embed_dim = o.d_model,
                                                                        .num_heads = o.nhead,
                                                                        .dropout = o.dropout,
                                                                        .bias = o.bias,
                                                                        .batch_first = o.batch_first});
}

ModulePtr make_norm(const TransformerLayerOptions& o) {
  return std::make_shared<LayerNorm>(std::vector<int64_t>{o.d_model}, o.layer_norm_eps, true, o.bias);
}

// torch's _ff_block: dropout_out(linear2(dropout(activation(linear1(x))))).
Var feed_forward(Tracer& t, const Var& x, const TransformerLayerOptions& o, Module& linear1, Module& dropout,
                 Module& linear2, Module& dropout_out) {
  Var h = linear1.call(t, x);
  h = o.activation == "gelu" ? attn::gelu(t, h) : attn::relu(t, h);
  return dropout_out.call(t, linear2.call(t, dropout.call(t, h)));
}

Var add(Tracer& t, const Var& a, const Var& b) { return attn::binary(t, "Add", a, b); }

// x + block(norm(x)) with norm_first, else norm(x + block(x)).
Var residual(Tracer& t, const Var& x, bool norm_first, Module& norm, const std::function<Var(const Var&)>& block) {
  return norm_first ? add(t, x, block(norm.call(t, x))) : norm.call(t, add(t, x, block(x)));
}

}  // namespace

// ---- TransformerEncoderLayer ---------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(TransformerEncoderLayerOptions options)
    : options_(std::move(options)) {
  check_options(options_, "TransformerEncoderLayer");
  const auto& o = options_;
  self_attn_ = register_module("self_attn", make_attention(o));
  linear1_ = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward, o.bias));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  linear2_ = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model, o.bias));
  norm1_ = register_module("norm1", make_norm(o));
  norm2_ = register_module("norm2", make_norm(o));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
}

Var TransformerEncoderLayer::apply(Tracer& t, const Var& src, const std::optional<Var>& src_mask,
                                   const std::optional<Var>& src_key_padding_mask, bool causal) {
  pending_is_causal_ = causal;
  try {
    std::vector<Var> inputs{src, src_mask.value_or(Tracer::none()), src_key_padding_mask.value_or(Tracer::none())};
    while (!inputs.empty() && inputs.back().name.empty()) inputs.pop_back();  // hooks see only the inputs given
    auto out = call(t, inputs);
    pending_is_causal_.reset();
    return out.at(0);
  } catch (...) {
    pending_is_causal_.reset();
    throw;
  }
}

std::vector<Var> TransformerEncoderLayer::forward(Tracer& t, const std::vector<Var>& inputs) {
  const bool causal = pending_is_causal_.value_or(is_causal);
  pending_is_causal_.reset();
  if (inputs.empty() || inputs.size() > 3 || !present(inputs, 0))
    throw InvalidArgument(
        fmt::format("TransformerEncoderLayer: forward takes (src[, src_mask][, "
                    "src_key_padding_mask]), got {} inputs",
                    inputs.size()));
  MultiheadAttentionCall masks;
  masks.attn_mask = optional_input(inputs, 1);
  masks.key_padding_mask = optional_input(inputs, 2);
  masks.need_weights = false;
  masks.is_causal = causal;
  auto self_attention = [&](const Var& x) { return dropout1_->call(t, self_attn_->attend(t, x, x, x, masks)[0]); };
  auto ff = [&](const Var& x) { return feed_forward(t, x, options_, *linear1_, *dropout_, *linear2_, *dropout2_); };
  Var x = residual(t, inputs[0], options_.norm_first, *norm1_, self_attention);
  return {residual(t, x, options_.norm_first, *norm2_, ff)};
}

// ---- TransformerDecoderLayer ---------------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(TransformerDecoderLayerOptions options)
    : options_(std::move(options)) {
  check_options(options_, "TransformerDecoderLayer");
  const auto& o = options_;
  self_attn_ = register_module("self_attn", make_attention(o));
  multihead_attn_ = register_module("multihead_attn", make_attention(o));
  linear1_ = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward, o.bias));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  linear2_ = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model, o.bias));
  norm1_ = register_module("norm1", make_norm(o));
  norm2_ = register_module("norm2", make_norm(o));
  norm3_ = register_module("norm3", make_norm(o));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
  dropout3_ = register_module("dropout3", std::make_shared<Dropout>(o.dropout));
}

Var TransformerDecoderLayer::apply(Tracer& t, const Var& tgt, const Var& memory, const Masks& masks) {
  pending_ = masks;
  const Var none = Tracer::none();
  try {
    std::vector<Var> inputs{tgt,
                            memory,
                            masks.tgt_mask.value_or(none),
                            masks.memory_mask.value_or(none),
                            masks.tgt_key_padding_mask.value_or(none),
                            masks.memory_key_padding_mask.value_or(none)};
    while (!inputs.empty() && inputs.back().name.empty()) inputs.pop_back();  // hooks see only the inputs given
    auto out = call(t, inputs);
    pending_.reset();
    return out.at(0);
  } catch (...) {
    pending_.reset();
    throw;
  }
}

std::vector<Var> TransformerDecoderLayer::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Masks flags = pending_.value_or(Masks{});
  pending_.reset();
  if (inputs.size() < 2 || inputs.size() > 6 || !present(inputs, 0) || !present(inputs, 1))
    throw InvalidArgument(
        fmt::format("TransformerDecoderLayer: forward takes (tgt, memory[, tgt_mask][, "
                    "memory_mask][, tgt_key_padding_mask][, memory_key_padding_mask]), got {} "
                    "inputs",
                    inputs.size()));
  const Var& memory = inputs[1];
  MultiheadAttentionCall self_masks, cross_masks;
  self_masks.attn_mask = optional_input(inputs, 2);
  self_masks.key_padding_mask = optional_input(inputs, 4);
  self_masks.need_weights = false;
  self_masks.is_causal = flags.tgt_is_causal.value_or(tgt_is_causal);
  cross_masks.attn_mask = optional_input(inputs, 3);
  cross_masks.key_padding_mask = optional_input(inputs, 5);
  cross_masks.need_weights = false;
  cross_masks.is_causal = flags.memory_is_causal.value_or(memory_is_causal);

  auto self_attention = [&](const Var& x) { return dropout1_->call(t, self_attn_->attend(t, x, x, x, self_masks)[0]); };
  auto cross_attention = [&](const Var& x) {
    return dropout2_->call(t, multihead_attn_->attend(t, x, memory, memory, cross_masks)[0]);
  };
  auto ff = [&](const Var& x) { return feed_forward(t, x, options_, *linear1_, *dropout_, *linear2_, *dropout3_); };
  Var x = residual(t, inputs[0], options_.norm_first, *norm1_, self_attention);
  x = residual(t, x, options_.norm_first, *norm2_, cross_attention);
  return {residual(t, x, options_.norm_first, *norm3_, ff)};
}

}  // namespace kiln::nn
