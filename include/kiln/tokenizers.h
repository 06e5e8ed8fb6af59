// Tokenizers for text models: byte-level BPE (GPT-2, RoBERTa, BART: Hugging Face's tokenizer.json
// or GPT-2's vocab.json + merges.txt) and SentencePiece models (T5, Marian, LLaMA: Debian's
// libsentencepiece), including training a SentencePiece model from a corpus.
//
//   auto tok = kiln::text::load_tokenizer("gpt2-folder");   // tokenizer.json, vocab.json or spiece.model
//   kiln::text::Encoding e = tok->encode("Hello world");   // ids, tokens, byte offsets
//   std::string back = tok->decode(e.ids);
//   auto batch = tok->encode_batch({"a", "longer text"}, {.padding = kiln::text::Padding::Longest});
//   tok->save_pretrained("out");                            // a folder load_tokenizer (and HF) reads
//
// Errors: a missing or malformed file is an IOError / CorruptFile naming it; a tokenizer.json
// using what Kiln does not implement (normalizers, other models or pre-tokenizers) is Unsupported
// naming the field; an id outside the vocabulary is an InvalidArgument. Every method is const and
// may be called from several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::text {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  // Each token's [begin, end) byte range in the text; special tokens the tokenizer adds get (0, 0).
  std::vector<std::pair<size_t, size_t>> offsets;
};

// The roles Hugging Face's tokenizers give special tokens; empty when the tokenizer has none.
struct SpecialTokens {
  std::string bos, eos, unk, pad;
};

enum class Padding { None, Longest, MaxLength };

struct BatchOptions {
  bool add_special_tokens = true;
  Padding padding = Padding::None;
  bool truncation = false;
  std::optional<int64_t> max_length;  // truncation's and Padding::MaxLength's length
  int64_t pad_to_multiple_of = 0;
  bool pad_left = false;  // padding_side "left" (decoder-only generation)
  bool truncate_left = false;
};

struct BatchEncoding {
  std::vector<std::vector<int64_t>> input_ids;
  std::vector<std::vector<int64_t>> attention_mask;
  // [N, L] int64 tensors; InvalidArgument when the rows differ in length (no padding asked for).
  Tensor input_ids_tensor() const;
  Tensor attention_mask_tensor() const;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "bpe" or "sentencepiece".
  virtual std::string kind() const = 0;
  virtual Encoding encode(const std::string& text, bool add_special_tokens = true) const = 0;
  // The text of `ids`; special tokens left out with skip_special_tokens. Bytes that do not form
  // UTF-8 become U+FFFD.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int64_t vocab_size() const = 0;  // added tokens included
  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;
  virtual std::string id_to_token(int64_t id) const = 0;
  virtual bool is_special(int64_t id) const = 0;
  // Writes a folder that load_tokenizer and Hugging Face's AutoTokenizer read; every file written
  // to a temporary name, synced and renamed.
  virtual void save_pretrained(const std::string& dir) const = 0;

  const SpecialTokens& special_tokens() const { return special_; }
  // The id of a special token's role, if the tokenizer has that token.
  std::optional<int64_t> bos_id() const { return role_id(special_.bos); }
  std::optional<int64_t> eos_id() const { return role_id(special_.eos); }
  std::optional<int64_t> unk_id() const { return role_id(special_.unk); }
  std::optional<int64_t> pad_id() const { return role_id(special_.pad); }
  // Sets the padding token (GPT-2 has none: `set_pad_token(eos)` as HF scripts do); it must be in
  // the vocabulary.
  void set_pad_token(const std::string& token);

  // Encodes each text, then truncates and pads as asked; the attention mask is 1 on the tokens.
  BatchEncoding encode_batch(const std::vector<std::string>& texts, const BatchOptions& options = {}) const;

 protected:
  // The special token ids encode() puts before and after the text when asked to.
  virtual std::pair<std::vector<int64_t>, std::vector<int64_t>> added_special_ids() const = 0;
  SpecialTokens special_;

  friend std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

 private:
  std::optional<int64_t> role_id(const std::string& token) const {
    return token.empty() ? std::nullopt : token_to_id(token);
  }
};

// Reads a tokenizer folder: tokenizer.json (byte-level BPE), else vocab.json + merges.txt, else
// spiece.model / tokenizer.model / sentencepiece.bpe.model (SentencePiece); tokenizer_config.json
// and special_tokens_map.json, when present, name the special tokens.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

// Byte-level BPE from Hugging Face's tokenizer.json (model BPE, pre-tokenizer ByteLevel).
std::unique_ptr<Tokenizer> load_bpe_tokenizer_json(const std::string& path);
// Byte-level BPE from GPT-2's files; `special` names the special tokens (GPT-2's "<|endoftext|>"
// for bos, eos and unk when left empty and the vocabulary has it).
std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& vocab_json, const std::string& merges_txt,
                                              SpecialTokens special = {});
// A SentencePiece model file. add_bos / add_eos: the special tokens encode() adds (T5 adds </s>,
// LLaMA adds <s>).
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path, bool add_bos = false, bool add_eos = true);

struct SentencePieceTrainOptions {
  std::string model_type = "unigram";  // unigram, bpe, char or word
  int64_t vocab_size = 8000;
  double character_coverage = 1.0;
  int64_t pad_id = 0, eos_id = 1, unk_id = 2, bos_id = -1;  // T5's layout; -1 leaves a role out
  int64_t input_sentence_size = 0;                          // 0: every line
  uint64_t seed = 0;                                        // sentencepiece's own sampling is seeded
  int num_threads = 1;
};

// Trains a SentencePiece model on `corpus` (one sentence per line) and writes `model_path` (and
// nothing else), atomically. Errors (a vocabulary larger than the corpus allows, an empty corpus)
// are InvalidArgument with sentencepiece's message.
void train_sentencepiece(const std::string& corpus, const std::string& model_path,
                         const SentencePieceTrainOptions& options = {});

}  // namespace kiln::text
