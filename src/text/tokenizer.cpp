// What every tokenizer shares (kiln/tokenizers.h): batches with truncation and padding, the pad
// token, and reading a tokenizer folder.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/file_io.h"
#include "text/tokenizer_files.h"

namespace kiln::text {

namespace fs = std::filesystem;
using nlohmann::json;

json parse_json_file(const std::string& path, const char* what) {
  const std::string bytes = read_file_bytes(path, what);
  try {
    return json::parse(bytes);
  } catch (const json::parse_error& e) {
    throw CorruptFile(fmt::format("{} '{}' is not valid JSON: {}", what, path, e.what()));
  }
}

json special_tokens_json(const SpecialTokens& s) {
  json j = json::object();
  if (!s.bos.empty()) j["bos_token"] = s.bos;
  if (!s.eos.empty()) j["eos_token"] = s.eos;
  if (!s.unk.empty()) j["unk_token"] = s.unk;
  if (!s.pad.empty()) j["pad_token"] = s.pad;
  return j;
}

void read_special_tokens(const json& j, SpecialTokens& s) {
  if (!j.is_object()) return;
  auto read = [&](const char* key, std::string& into) {
    if (!j.contains(key)) return;
    const json& v = j[key];
    if (v.is_string()) into = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) into = v["content"].get<std::string>();
  };
  read("bos_token", s.bos);
  read("eos_token", s.eos);
  read("unk_token", s.unk);
  read("pad_token", s.pad);
}

void Tokenizer::set_pad_token(const std::string& token) {
  if (!token_to_id(token)) throw InvalidArgument(fmt::format("set_pad_token: '{}' is not in the vocabulary", token));
  special_.pad = token;
}

namespace {

Tensor rows_tensor(const std::vector<std::vector<int64_t>>& rows, const char* what) {
  const size_t width = rows.empty() ? 0 : rows[0].size();
  std::vector<int64_t> flat;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].size() != width)
      throw InvalidArgument(
          fmt::format("BatchEncoding.{}: row {} has {} tokens and row 0 has {}; pad the batch "
                      "(padding Longest or MaxLength) to make a tensor",
                      what, i, rows[i].size(), width));
    flat.insert(flat.end(), rows[i].begin(), rows[i].end());
  }
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(rows.size()), static_cast<int64_t>(width)}, flat);
}

}  // namespace

Tensor BatchEncoding::input_ids_tensor() const { return rows_tensor(input_ids, "input_ids"); }
Tensor BatchEncoding::attention_mask_tensor() const { return rows_tensor(attention_mask, "attention_mask"); }

BatchEncoding Tokenizer::encode_batch(const std::vector<std::string>& texts, const BatchOptions& o) const {
  if ((o.truncation || o.padding == Padding::MaxLength) && !o.max_length)
    throw InvalidArgument("encode_batch: truncation and padding to max_length need max_length");
  if (o.max_length && *o.max_length < 0)
    throw InvalidArgument(fmt::format("encode_batch: max_length {} < 0", *o.max_length));
  const auto [prefix, suffix] = o.add_special_tokens ? added_special_ids() : decltype(added_special_ids()){};
  BatchEncoding b;
  for (const std::string& text : texts) {
    std::vector<int64_t> ids = encode(text, false).ids;
    if (o.truncation) {  // as Hugging Face: the text is cut, the special tokens stay
      const int64_t room = std::max<int64_t>(0, *o.max_length - static_cast<int64_t>(prefix.size() + suffix.size()));
      if (static_cast<int64_t>(ids.size()) > room) {
        if (o.truncate_left) ids.erase(ids.begin(), ids.end() - room);
        else ids.resize(static_cast<size_t>(room));
      }
    }
    std::vector<int64_t> row(prefix);
    row.insert(row.end(), ids.begin(), ids.end());
    row.insert(row.end(), suffix.begin(), suffix.end());
    b.attention_mask.emplace_back(row.size(), 1);
    b.input_ids.push_back(std::move(row));
  }
  if (o.padding == Padding::None) return b;
  int64_t width = o.padding == Padding::MaxLength ? *o.max_length : 0;
  for (const auto& row : b.input_ids) width = std::max(width, static_cast<int64_t>(row.size()));
  if (o.pad_to_multiple_of > 0)
    width = (width + o.pad_to_multiple_of - 1) / o.pad_to_multiple_of * o.pad_to_multiple_of;
  const std::optional<int64_t> pad = pad_id();
  bool needs_pad = false;
  for (const auto& row : b.input_ids) needs_pad = needs_pad || static_cast<int64_t>(row.size()) < width;
  if (needs_pad && !pad)
    throw InvalidArgument(
        "encode_batch: asked to pad but the tokenizer has no pad token (set_pad_token, e.g. the "
        "eos token, as Hugging Face scripts do for GPT-2)");
  for (size_t i = 0; i < b.input_ids.size(); ++i) {
    const size_t missing = static_cast<size_t>(width) - b.input_ids[i].size();
    auto& ids = b.input_ids[i];
    auto& mask = b.attention_mask[i];
    ids.insert(o.pad_left ? ids.begin() : ids.end(), missing, pad.value_or(0));
    mask.insert(o.pad_left ? mask.begin() : mask.end(), missing, 0);
  }
  return b;
}

namespace {

// The folder's tokenizer files, by Hugging Face's precedence: a byte-level tokenizer.json, a
// SentencePiece model, GPT-2's vocab.json + merges.txt, else a tokenizer.json Kiln cannot read
// (whose loader says why).
std::unique_ptr<Tokenizer> open_files(const fs::path& d, const json& config, const SpecialTokens& named) {
  const bool has_json = fs::exists(d / "tokenizer.json");
  const bool byte_level_json =
      has_json &&
      parse_json_file(d / "tokenizer.json", "tokenizer.json").value("model", json::object()).value("type", "") == "BPE";
  if (byte_level_json) return load_bpe_tokenizer_json(d / "tokenizer.json");
  for (const char* name : {"spiece.model", "tokenizer.model", "sentencepiece.bpe.model"})
    if (fs::exists(d / name))
      return load_sentencepiece(d / name, config.value("add_bos_token", false), config.value("add_eos_token", true));
  if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"))
    return load_bpe_tokenizer(d / "vocab.json", d / "merges.txt", named);
  if (has_json) return load_bpe_tokenizer_json(d / "tokenizer.json");
  throw IOError(
      fmt::format("'{}' holds no tokenizer (tokenizer.json, vocab.json + merges.txt, spiece.model, "
                  "tokenizer.model or sentencepiece.bpe.model)",
                  d.string()));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  if (!fs::is_directory(dir)) throw IOError(fmt::format("tokenizer folder '{}' does not exist", dir));
  const fs::path d(dir);
  const json config = fs::exists(d / "tokenizer_config.json")
                          ? parse_json_file(d / "tokenizer_config.json", "tokenizer_config.json")
                          : json::object();
  SpecialTokens named;
  if (fs::exists(d / "special_tokens_map.json"))
    read_special_tokens(parse_json_file(d / "special_tokens_map.json", "special_tokens_map.json"), named);
  read_special_tokens(config, named);
  std::unique_ptr<Tokenizer> tok = open_files(d, config, named);
  SpecialTokens roles = tok->special_;  // what the model's files name, overridden by the folder's maps
  for (auto [from, to] : {std::pair{&named.bos, &roles.bos},
                          {&named.eos, &roles.eos},
                          {&named.unk, &roles.unk},
                          {&named.pad, &roles.pad}})
    if (!from->empty()) *to = *from;
  for (const std::string& t : {roles.bos, roles.eos, roles.unk, roles.pad})
    if (!t.empty() && !tok->token_to_id(t))
      throw CorruptFile(fmt::format("'{}': the special token '{}' is not in the vocabulary", dir, t));
  tok->special_ = roles;
  return tok;
}

}  // namespace kiln::text
