// Byte-level BPE (text/bpe_tokenizer.cpp): the vocabulary, the merges by rank, the added tokens,
// and the tokenizer.json options Kiln reads. Built by the loaders in bpe_files.cpp.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/tokenizers.h"

namespace kiln::text {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = true;
};

struct BpeModel {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added;
  SpecialTokens special;
  bool add_prefix_space = false;  // a space before the text (RoBERTa, BART)
  bool trim_offsets = false;      // offsets leave a token's leading space out
  // Tokens encode() puts around the text (the post-processor's template, e.g. RoBERTa's <s> ... </s>).
  std::vector<std::string> prefix_tokens, suffix_tokens;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeModel model);

  std::string kind() const override { return "bpe"; }
  Encoding encode(const std::string& text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;
  bool is_special(int64_t id) const override;
  void save_pretrained(const std::string& dir) const override;

  const BpeModel& model() const { return model_; }

 protected:
  std::pair<std::vector<int64_t>, std::vector<int64_t>> added_special_ids() const override;

 private:
  // The symbols BPE merges a pre-token's byte symbols into (cached per pre-token).
  std::vector<std::string> bpe(const std::string& word) const;
  void encode_piece(std::string_view text, size_t base, Encoding& out) const;
  void append_token(Encoding& out, const std::string& token, size_t begin, size_t end) const;

  BpeModel model_;
  std::unordered_map<std::string, size_t> ranks_;  // "a b" -> rank
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_ids_;
  std::vector<bool> added_ids_;
  std::unordered_map<std::string, int64_t> added_ids_by_content_;  // the first listed wins, as the scan did
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::string>> cache_;
};

}  // namespace kiln::text
