// Pieces shared by the zoo's transformer entries (vit, bert, gpt2): config readers that name the
// model and key in their errors, Hugging Face's activation table, and the eager attention of HF's
// BERT and GPT-2 emitted as plain ONNX.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/layers.h"
#include "kiln/nn/zoo.h"

namespace kiln::nn::zoo::transformers {

// Typed config values; InvalidArgument naming the model, the key and the value when it is missing,
// of the wrong JSON type or out of range.
int64_t config_int(const Config& c, const std::string& model, const std::string& key, int64_t min = 1);
std::optional<int64_t> config_optional_int(const Config& c, const std::string& model, const std::string& key,
                                           int64_t min = 1);  // JSON null -> nullopt
double config_double(const Config& c, const std::string& model, const std::string& key);
double config_prob(const Config& c, const std::string& model, const std::string& key);  // in [0, 1)
std::string config_string(const Config& c, const std::string& model, const std::string& key);
bool config_bool(const Config& c, const std::string& model, const std::string& key);
// ShapeError unless `numerator` is divisible by `denominator` (hidden size by heads, ...).
void require_divisible(const std::string& model, const std::string& numerator_key, int64_t numerator,
                       const std::string& denominator_key, int64_t denominator);

// transformers.activations.ACT2FN by name, as a kiln::nn module ("gelu" is the exact erf form,
// "gelu_new" / "gelu_pytorch_tanh" the tanh form). Unsupported naming the known names otherwise.
ModulePtr make_activation(const std::string& model, const std::string& key, const std::string& name);

// Hugging Face's _init_weights for a Linear / Conv1D / Embedding: weight ~ N(0, std), bias zero.
void hf_normal_init(Module& m, double std);
// A Linear / an Embedding drawn that way (the embedding's padding row zero, as HF's _init_weights).
std::shared_ptr<Linear> hf_linear(int64_t in, int64_t out, double std, bool bias = true);
std::shared_ptr<Embedding> hf_embedding(int64_t n, int64_t dim, double std, std::optional<int64_t> padding_idx = {});

// torch's Linear(dim, vocab, bias=False) whose weight is the word embedding's (HF's tie_weights):
// registered as a parameter sharing the embedding's storage, and traced as the embedding's own
// initializer so that the exported model holds the matrix once. `scale` (T5's d_model ** -0.5 on
// tied heads) multiplies the input first when not 1.
class TiedLinear : public Module {
 public:
  explicit TiedLinear(std::shared_ptr<Embedding> embedding, double scale = 1.0);
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

 private:
  std::shared_ptr<Embedding> embedding_;
  double scale_;
};

// HF's inverted attention mask: (1 - mask[:, None, None, :]) * float32 lowest, for a 0/1 mask
// [B, L] of any integer or float dtype -> float32 [B, 1, 1, L].
Var padding_mask(Tracer& t, const Var& mask);

// HF's language-model loss: CrossEntropyLoss(logits.view(-1, V), labels.view(-1)) with
// ignore_index -100 and the mean over the other positions; logits [B, T, V], labels [B, T] -> [].
Var lm_loss(Tracer& t, const Var& logits, const Var& labels);

// x[:, index] of [B, S, D] -> [B, D].
Var select_token(Tracer& t, const Var& x, int64_t index);
// torch.arange(S).unsqueeze(0) for ids [B, S], with S read at run time: [1, S] int64.
Var position_ids(Tracer& t, const Var& ids);
// [B, S, H * d] -> [B, H, S, d] (HF's transpose_for_scores / _split_heads), and back.
Var split_heads(Tracer& t, const Var& x, int64_t heads);
Var merge_heads(Tracer& t, const Var& x);

// HF's eager attention over q, k, v [B, H, S, d]: scores = q k^T divided by each of `divisors` in
// turn (HF's GPT-2 divides twice when scaling by the layer index);
// causal: positions after the query set to float32's lowest value (HF's mask_value): with
// `keys_past` the keys are L >= S long and query i sits at position L - S + i (a decoder's cached
// keys come first, HF's causal bias sliced [L - S : L, :L]); then the additive mask ([B, 1, 1, L])
// if given; softmax over the keys; `dropout` (a module called on the
// probabilities, HF's attn_dropout); @ v.
struct EagerAttention {
  std::vector<double> divisors;
  bool causal = false;
  bool keys_past = false;
  std::optional<Var> additive_mask;
  Module* dropout = nullptr;
};
Var eager_attention(Tracer& t, const Var& q, const Var& k, const Var& v, const EagerAttention& a);

// A layer's cached keys or values [B, H, P, d] with this call's [B, H, S, d] after them (HF's
// torch.cat([past_key, key], dim=2)).
Var append_past(Tracer& t, const Var& past, const Var& now);

// float32's lowest value, torch.finfo(torch.float32).min: what HF fills masked scores with.
double float32_lowest();

}  // namespace kiln::nn::zoo::transformers
