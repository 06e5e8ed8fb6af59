// torch.nn's attention and transformer layers for kiln::nn: MultiheadAttention,
// TransformerEncoderLayer and TransformerDecoderLayer, with torch's arguments, defaults,
// parameter names (state_dict keys) and initialisation, emitting plain ONNX (opset 17: MatMul,
// Softmax, Where, Reshape, Transpose, LayerNormalization...) with dynamic batch and sequence sizes.
//
//   using namespace kiln::nn;
//   manual_seed(0);
//   auto layer = std::make_shared<TransformerEncoderLayer>(
//       TransformerEncoderLayerOptions{.d_model = 64, .nhead = 4, .dim_feedforward = 128,
//                                      .activation = "gelu", .batch_first = true});
//   layer->load_safetensors("torch_layer.safetensors");   // keys as torch's state_dict
//   layer->eval();
//   layer->export_onnx("layer.onnx", {{"src", {2, 10, 64}}}, {{"src", {{0, "batch"}, {1, "seq"}}}});
//
// Optional forward arguments travel as Vars in fixed positions (torch's order); an absent one is
// Tracer::none() (trailing ones may be left out):
//   MultiheadAttention       {query, key, value, key_padding_mask, attn_mask}
//                            -> {attn_output[, attn_output_weights]}
//   TransformerEncoderLayer  {src, src_mask, src_key_padding_mask}            -> {output}
//   TransformerDecoderLayer  {tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
//                             memory_key_padding_mask}                         -> {output}
// torch's keyword flags (need_weights, is_causal...) are the options' defaults; a typed call
// (MultiheadAttention::attend, ...::apply) overrides them for one call.
//
// Masks follow torch: a bool mask is True where attention is NOT allowed; a float mask is added to
// the attention scores. attn_mask is [L, S] or [N * num_heads, L, S]; key_padding_mask is [N, S].
// is_causal: torch treats it as a hint that attn_mask is causal; Kiln uses the given attn_mask
// when there is one (as torch does) and otherwise builds the causal mask itself, at run time, from
// the sequence lengths (torch raises "Need attn_mask if specifying the is_causal hint" instead).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

// torch.nn.MultiheadAttention's constructor arguments (designated initialisers read like torch's
// keywords) and forward's keyword defaults.
struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 0;
  double dropout = 0.0;  // on the attention weights, in training mode
  bool bias = true;
  bool add_bias_kv = false;           // Unsupported when true
  bool add_zero_attn = false;         // Unsupported when true
  std::optional<int64_t> kdim, vdim;  // must equal embed_dim (Unsupported otherwise)
  bool batch_first = false;
  // forward's defaults
  bool need_weights = true;
  bool average_attn_weights = true;
  bool is_causal = false;
};

// One call's optional arguments (torch's forward keywords).
struct MultiheadAttentionCall {
  std::optional<Var> key_padding_mask;
  std::optional<Var> attn_mask;
  std::optional<bool> need_weights, average_attn_weights, is_causal;  // default: the options'
};

// Parameters: in_proj_weight [3E, E] (xavier_uniform_), in_proj_bias [3E] (zeros), and the
// submodule out_proj (torch's NonDynamicallyQuantizableLinear: weight [E, E], bias [E] zeroed).
// attn_output has the query's layout ([L, N, E], or [N, L, E] with batch_first; [L, E] unbatched);
// attn_output_weights is [N, L, S] averaged over heads, or [N, num_heads, L, S].
class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(MultiheadAttentionOptions options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool add_bias_kv = false, bool add_zero_attn = false, std::optional<int64_t> kdim = {},
                     std::optional<int64_t> vdim = {}, bool batch_first = false);

  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  // Module::call with torch's keyword arguments.
  std::vector<Var> attend(Tracer& t, const Var& query, const Var& key, const Var& value,
                          const MultiheadAttentionCall& call = {});

  std::string type_name() const override { return "MultiheadAttention"; }
  const MultiheadAttentionOptions& options() const { return options_; }
  int64_t head_dim() const { return options_.embed_dim / options_.num_heads; }

 private:
  MultiheadAttentionOptions options_;
  ModulePtr out_proj_;
  std::optional<MultiheadAttentionCall> pending_;  // attend()'s flags for the forward it starts
};

// torch.nn.TransformerEncoderLayer's / TransformerDecoderLayer's arguments.
struct TransformerLayerOptions {
  int64_t d_model = 0;
  int64_t nhead = 0;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu" (exact, erf-based, as F.gelu)
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

// Submodules as torch's: self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2.
// The activation is applied as torch's F.relu / F.gelu function: no submodule, as in torch.
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(TransformerEncoderLayerOptions options);
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  // Module::call with torch's keyword arguments.
  Var apply(Tracer& t, const Var& src, const std::optional<Var>& src_mask = {},
            const std::optional<Var>& src_key_padding_mask = {}, bool is_causal = false);

  std::string type_name() const override { return "TransformerEncoderLayer"; }
  const TransformerEncoderLayerOptions& options() const { return options_; }
  bool is_causal = false;  // forward's default: a causal self-attention when src_mask is absent

 private:
  TransformerEncoderLayerOptions options_;
  std::optional<bool> pending_is_causal_;  // apply()'s flag for the forward it starts
  std::shared_ptr<MultiheadAttention> self_attn_;
  ModulePtr linear1_, dropout_, linear2_, norm1_, norm2_, dropout1_, dropout2_;
};

// Submodules as torch's: self_attn, multihead_attn, linear1, dropout, linear2, norm1..3,
// dropout1..3.
class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(TransformerDecoderLayerOptions options);
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  struct Masks {
    std::optional<Var> tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask;
    std::optional<bool> tgt_is_causal, memory_is_causal;  // default: the members below
  };
  Var apply(Tracer& t, const Var& tgt, const Var& memory, const Masks& masks = {});

  std::string type_name() const override { return "TransformerDecoderLayer"; }
  const TransformerDecoderLayerOptions& options() const { return options_; }
  bool tgt_is_causal = false;
  bool memory_is_causal = false;

 private:
  TransformerDecoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_, multihead_attn_;
  ModulePtr linear1_, dropout_, linear2_, norm1_, norm2_, norm3_, dropout1_, dropout2_, dropout3_;
  std::optional<Masks> pending_;
};

}  // namespace kiln::nn
