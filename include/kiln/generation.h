// Text generation from causal language models and encoder-decoder models, with Hugging Face's GenerationConfig names
// and defaults: greedy search, multinomial sampling and beam search, the logits processors (repetition_penalty,
// no_repeat_ngram_size, min lengths, forced bos / eos tokens) and sampling warpers (temperature, top_k, top_p).
//
//   kiln::generation::CausalLM lm(kiln::load_model("gpt2_with_past.onnx"));
//   kiln::generation::GenerationConfig g;
//   g.max_new_tokens = 32;
//   g.num_beams = 4;
//   auto out = kiln::generation::generate(lm, {{464, 3290}, {40}}, g);   // prompts of any length
//   // out.sequences: each row the left-padded prompt and its new tokens, padded after the eos
//
// The model: ONNX with input_ids [B, S] and logits [B, S, V] (its first output, or "logits");
// optional inputs attention_mask and position_ids, fed as Hugging Face does (left padding: masks
// 0 on the padding, positions counted over the real tokens). A model that also takes each layer's
// past_key_values.N.key / .value [B, H, P, d] and returns present.N.key / .value [B, H, P + S, d]
// (optimum's decoder-with-past layout; the zoo's gpt2 with_past) decodes with a KV cache: each new
// token runs alone over the cached keys and values. The cache is held in blocks of
// `cache_block` positions (masked where unfilled), so the shapes, and the Session's plan, change
// once a block rather than every token. Without past inputs (or use_cache false) every token
// reruns the whole sequence.
//
// Errors: an impossible config (num_beams not divisible, top_p outside (0, 1], sampling with beams,
// no length limit, ...) and a model without input_ids or logits are InvalidArgument naming the
// field; bad token ids are InvalidArgument naming the row.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln::generation {

enum class EarlyStopping { False, True, Never };

struct GenerationConfig {
  // Lengths: max_new_tokens wins over max_length (HF's default max_length is 20, prompt included).
  int64_t max_length = 20;
  std::optional<int64_t> max_new_tokens;
  int64_t min_length = 0;
  std::optional<int64_t> min_new_tokens;
  // Strategy.
  bool do_sample = false;
  int64_t num_beams = 1;
  int64_t num_return_sequences = 1;
  EarlyStopping early_stopping = EarlyStopping::False;
  double length_penalty = 1.0;
  // Logits processors and warpers.
  double temperature = 1.0;
  int64_t top_k = 50;
  double top_p = 1.0;
  double repetition_penalty = 1.0;
  int64_t no_repeat_ngram_size = 0;
  // Tokens.
  std::vector<int64_t> eos_token_id;  // one or several; empty: generate to the length limit
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> decoder_start_token_id;
  std::optional<int64_t> forced_bos_token_id;
  std::optional<int64_t> forced_eos_token_id;
  bool use_cache = true;
  uint64_t seed = 0;  // Kiln's: the sampling stream (HF samples from torch's global generator)

  // Throws InvalidArgument naming the field for impossible values (HF's validate(), strict).
  void validate() const;
  // generation_config.json's fields (unknown ones ignored, as HF keeps them as attributes).
  static GenerationConfig from_json(const std::string& json_text);
  std::string to_json() const;
};

struct GenerateOutput {
  // [B * num_return_sequences] rows: the prompt (left-padded to the longest) and the new tokens,
  // rows that stopped early padded with pad_token_id (eos if there is no pad token).
  std::vector<std::vector<int64_t>> sequences;
  // Beam search: each returned sequence's length-normalised log-probability (HF's
  // sequences_scores); empty otherwise.
  std::vector<double> sequences_scores;
  int64_t prompt_length = 0;  // the padded prompt's length: sequences[i][prompt_length:] is new
  int64_t model_calls = 0;    // forward runs, the prompt's included
};

// What the searches drive: rows of tokens that grow one token a step.
class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  // Runs the (left-padded) rows [N rows of one length] with their masks; returns the last
  // position's logits [N, V]. `use_cache`: keep the keys and values (a model with past inputs).
  virtual Tensor start(const std::vector<std::vector<int64_t>>& ids, const std::vector<std::vector<int64_t>>& mask,
                       bool use_cache) = 0;
  // Appends one token to every row; returns the new last logits [N, V].
  virtual Tensor step(const std::vector<int64_t>& tokens) = 0;
  // Row r takes the state (tokens, mask, cache) of row source[r] (beam search's reordering).
  virtual void reorder(const std::vector<int64_t>& source) = 0;
  virtual int64_t calls() const = 0;  // model runs so far
};

class CausalLM final : public LanguageModel {
 public:
  // `num_threads` 0: all cores. `cache_block`: positions the KV cache grows by.
  explicit CausalLM(Model model, int num_threads = 0, int64_t cache_block = 64);
  ~CausalLM() override;
  CausalLM(CausalLM&&) noexcept;
  CausalLM& operator=(CausalLM&&) noexcept;

  bool has_cache_inputs() const;
  int64_t num_layers() const;  // layers with past inputs (0 without)

  Tensor start(const std::vector<std::vector<int64_t>>& ids, const std::vector<std::vector<int64_t>>& mask,
               bool use_cache) override;
  Tensor step(const std::vector<int64_t>& tokens) override;
  void reorder(const std::vector<int64_t>& source) override;
  int64_t calls() const override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// An encoder-decoder model (T5, BART, Marian) as optimum exports it: an encoder (input_ids,
// attention_mask -> last_hidden_state, its first output) and a decoder (input_ids,
// encoder_hidden_states, encoder_attention_mask -> logits); or one model taking input_ids,
// attention_mask and decoder_input_ids (torch.onnx's export of the whole module), whose encoder then
// reruns at every step. The encoder runs once per prompt batch. With optimum's third file, the
// decoder with past (input_ids [B, 1], encoder_attention_mask, past_key_values.N.decoder.key /
// .value and .encoder.key / .value -> logits, present.N.decoder.key / .value), whose cache the
// decoder's first run fills (its present.N.decoder.* and present.N.encoder.* outputs), each new
// token runs alone; the cache grows by one position a step (no decoder mask to hide a block), so
// that model is planned again for every length. Without it the decoder reruns its whole sequence.
class Seq2SeqLM final : public LanguageModel {
 public:
  Seq2SeqLM(Model encoder, Model decoder, int num_threads = 0);
  Seq2SeqLM(Model encoder, Model decoder, Model decoder_with_past, int num_threads = 0);
  explicit Seq2SeqLM(Model whole, int num_threads = 0);
  ~Seq2SeqLM() override;
  Seq2SeqLM(Seq2SeqLM&&) noexcept;
  Seq2SeqLM& operator=(Seq2SeqLM&&) noexcept;

  // The source sentences (right-padded here), each row repeated `copies` times as the decoder's
  // rows will be (beams, num_return_sequences).
  void encode(const std::vector<std::vector<int64_t>>& prompts, int64_t pad, int64_t copies);
  Tensor start(const std::vector<std::vector<int64_t>>& ids, const std::vector<std::vector<int64_t>>& mask,
               bool use_cache) override;
  Tensor step(const std::vector<int64_t>& tokens) override;
  void reorder(const std::vector<int64_t>& source) override;
  int64_t calls() const override;
  // The plans the decoder with past holds (its Session keeps the 8 latest): with Kiln's block
  // cache one per 64 positions generated, without it one per length.
  size_t decoder_with_past_plans() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Generates from `prompts` (token ids, unpadded, of any lengths; left-padded here).
GenerateOutput generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& config);
// Generates target sequences for the source `prompts`: the decoder starts from
// decoder_start_token_id (else bos_token_id; InvalidArgument without either); the sequences
// returned are the decoder's, that start token first (prompt_length 1), as Hugging Face's.
GenerateOutput generate(Seq2SeqLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& config);

}  // namespace kiln::generation
