// Byte-level BPE encoding and decoding (kiln/tokenizers.h), GPT-2's algorithm: added tokens split
// out first (longest first), the pre-tokenizer's words, each word's bytes as symbols merged by
// rank until no ranked pair is left.
#include "text/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace kiln::text {

BpeTokenizer::BpeTokenizer(BpeModel model) : model_(std::move(model)) {
  for (size_t r = 0; r < model_.merges.size(); ++r)
    ranks_.emplace(model_.merges[r].first + " " + model_.merges[r].second, r);
  int64_t size = 0;
  for (const auto& [token, id] : model_.vocab) size = std::max(size, id + 1);
  for (const AddedToken& a : model_.added) size = std::max(size, a.id + 1);
  id_to_token_.assign(static_cast<size_t>(size), std::string());
  special_ids_.assign(static_cast<size_t>(size), false);
  added_ids_.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : model_.vocab) {
    if (id < 0) throw InvalidArgument(fmt::format("BPE vocabulary: token '{}' has the negative id {}", token, id));
    id_to_token_[static_cast<size_t>(id)] = token;
  }
  for (const AddedToken& a : model_.added) {
    if (a.id < 0) throw InvalidArgument(fmt::format("added token '{}' has the negative id {}", a.content, a.id));
    id_to_token_[static_cast<size_t>(a.id)] = a.content;
    special_ids_[static_cast<size_t>(a.id)] = a.special;
    added_ids_[static_cast<size_t>(a.id)] = true;
    added_ids_by_content_.emplace(a.content, a.id);
  }
  std::sort(model_.added.begin(), model_.added.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  special_ = model_.special;
}

std::optional<int64_t> BpeTokenizer::token_to_id(const std::string& token) const {
  if (auto added = added_ids_by_content_.find(token); added != added_ids_by_content_.end()) return added->second;
  auto it = model_.vocab.find(token);
  if (it == model_.vocab.end()) return std::nullopt;
  return it->second;
}

std::string BpeTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw InvalidArgument(fmt::format("token id {} is outside the vocabulary (size {})", id, vocab_size()));
  return id_to_token_[static_cast<size_t>(id)];
}

bool BpeTokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && special_ids_[static_cast<size_t>(id)];
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> BpeTokenizer::added_special_ids() const {
  std::pair<std::vector<int64_t>, std::vector<int64_t>> out;
  for (const std::string& t : model_.prefix_tokens) out.first.push_back(token_to_id(t).value_or(-1));
  for (const std::string& t : model_.suffix_tokens) out.second.push_back(token_to_id(t).value_or(-1));
  for (const auto* ids : {&out.first, &out.second})
    for (int64_t id : *ids)
      if (id < 0) throw InvalidArgument("BPE: a post-processor's special token is not in the vocabulary");
  return out;
}

std::vector<std::string> BpeTokenizer::bpe(const std::string& word) const {
  {
    const std::lock_guard lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) return it->second;
  }
  std::vector<std::string> symbols;
  for (char32_t cp : decode_utf8(word)) symbols.push_back(encode_utf8({cp}));
  while (symbols.size() > 1) {
    size_t best = std::numeric_limits<size_t>::max();
    std::string first, second;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = ranks_.find(symbols[i] + " " + symbols[i + 1]);
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        first = symbols[i];
        second = symbols[i + 1];
      }
    }
    if (best == std::numeric_limits<size_t>::max()) break;
    std::vector<std::string> merged;  // every occurrence of the pair, left to right
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(symbols[i++]);
      }
    }
    symbols = std::move(merged);
  }
  const std::lock_guard lock(cache_mutex_);
  if (cache_.size() < 100000) cache_.emplace(word, symbols);
  return symbols;
}

void BpeTokenizer::append_token(Encoding& out, const std::string& token, size_t begin, size_t end) const {
  auto id = token_to_id(token);
  if (!id) {
    const std::optional<int64_t> unk = unk_id();
    if (!unk)
      throw InvalidArgument(
          fmt::format("BPE: the token '{}' is not in the vocabulary and there is no unk token", token));
    id = unk;
  }
  out.ids.push_back(*id);
  out.tokens.push_back(token);
  out.offsets.emplace_back(begin, end);
}

void BpeTokenizer::encode_piece(std::string_view text, size_t base, Encoding& out) const {
  const auto& symbols = byte_symbols();
  for (const auto& [begin, end] : pre_tokenize(text)) {
    std::string word;
    for (size_t k = begin; k < end; ++k) word += symbols[static_cast<unsigned char>(text[k])];
    size_t at = begin;
    for (const std::string& token : bpe(word)) {
      const size_t bytes = decode_utf8(token).size();  // one symbol per byte
      size_t from = at, to = at + bytes;
      if (model_.trim_offsets) {  // the post-processor's trim_offsets: spaces at either end left out
        while (from < to && text[from] == ' ') ++from;
        while (to > from && text[to - 1] == ' ') --to;
      }
      append_token(out, token, base + from, base + to);
      at += bytes;
    }
  }
}

Encoding BpeTokenizer::encode(const std::string& input, bool add_special_tokens) const {
  Encoding out;
  if (add_special_tokens)
    for (const std::string& t : model_.prefix_tokens) append_token(out, t, 0, 0);
  // Added tokens split the text; the pieces between them are byte-level encoded.
  size_t start = 0, pos = 0;
  const std::string text = model_.add_prefix_space && !input.empty() && input[0] != ' ' ? " " + input : input;
  const size_t shift = text.size() - input.size();  // offsets are the caller's
  auto piece = [&](size_t from, size_t to) {
    if (to > from) encode_piece(std::string_view(text).substr(from, to - from), from, out);
  };
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : model_.added)
      if (!a.content.empty() && text.compare(pos, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++pos;
      continue;
    }
    piece(start, pos);
    out.ids.push_back(hit->id);
    out.tokens.push_back(hit->content);
    out.offsets.emplace_back(pos, pos + hit->content.size());
    pos += hit->content.size();
    start = pos;
  }
  piece(start, text.size());
  if (add_special_tokens)
    for (const std::string& t : model_.suffix_tokens) append_token(out, t, 0, 0);
  for (auto& [b, e] : out.offsets)
    if (e > 0) {
      b = b >= shift ? b - shift : 0;
      e -= shift;
    }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int64_t id : ids) {
    const std::string token = id_to_token(id);
    if (skip_special_tokens && is_special(id)) continue;
    if (added_ids_[static_cast<size_t>(id)]) {
      bytes += token;
      continue;
    }
    for (char32_t cp : decode_utf8(token)) {
      const int b = symbol_byte(cp);
      if (b < 0) append_utf8(bytes, cp);
      else bytes += static_cast<char>(b);
    }
  }
  return decode_utf8_lossy(bytes);
}

}  // namespace kiln::text
