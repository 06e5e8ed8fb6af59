// Byte-level BPE's files (kiln/tokenizers.h): Hugging Face's tokenizer.json, GPT-2's vocab.json +
// merges.txt, and the folder save_pretrained writes.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "text/bpe_tokenizer.h"
#include "text/tokenizer_files.h"

namespace kiln::text {

namespace {

using nlohmann::json;

std::unordered_map<std::string, int64_t> read_vocab(const json& v, const std::string& what) {
  if (!v.is_object()) throw CorruptFile(fmt::format("{}: the vocabulary is not a JSON object of token -> id", what));
  std::unordered_map<std::string, int64_t> vocab;
  for (const auto& [token, id] : v.items()) {
    if (!id.is_number_integer()) throw CorruptFile(fmt::format("{}: token '{}' has a non-integer id", what, token));
    vocab[token] = id.get<int64_t>();
  }
  return vocab;
}

std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& what, size_t index) {
  const size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 >= line.size() ||
      line.find(' ', space + 1) != std::string::npos)
    throw CorruptFile(fmt::format("{}: merge {} '{}' is not two symbols separated by one space", what, index, line));
  return {line.substr(0, space), line.substr(space + 1)};
}

// tokenizer.json's options Kiln does not implement, refused by name.
void refuse(const json& j, const char* field, const std::string& what, const std::string& detail) {
  throw Unsupported(
      fmt::format("{}: {} {} is not supported (Kiln reads byte-level BPE: model BPE, pre_tokenizer "
                  "ByteLevel, no normalizer)",
                  what, field, detail));
}

void read_model(const json& model, BpeModel& m, const std::string& what) {
  if (!model.is_object() || model.value("type", "BPE") != "BPE")
    refuse(model, "model", what, model.dump().substr(0, 60));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      refuse(model, key, what, model[key].dump());
  if (model.contains("dropout") && !model["dropout"].is_null()) refuse(model, "dropout", what, model["dropout"].dump());
  if (model.value("byte_fallback", false)) refuse(model, "byte_fallback", what, "true");
  m.vocab = read_vocab(model.at("vocab"), what);
  const json& merges = model.at("merges");
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    if (e.is_string()) m.merges.push_back(split_merge(e.get<std::string>(), what, i));
    else if (e.is_array() && e.size() == 2) m.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    else throw CorruptFile(fmt::format("{}: merge {} is neither \"a b\" nor [a, b]", what, i));
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) m.special.unk = model["unk_token"];
}

void read_pre_tokenizer(const json& pre, BpeModel& m, const std::string& what) {
  if (pre.is_null() || pre.value("type", "") != "ByteLevel")
    refuse(pre, "pre_tokenizer", what, pre.dump().substr(0, 80));
  if (!pre.value("use_regex", true)) refuse(pre, "pre_tokenizer use_regex", what, "false");
  m.add_prefix_space = pre.value("add_prefix_space", false);
}

// The special tokens of a post-processor's single-sequence template.
void read_post_processor(const json& post, BpeModel& m, const std::string& what) {
  if (post.is_null()) return;
  const std::string type = post.value("type", "");
  m.trim_offsets = post.value("trim_offsets", type != "TemplateProcessing");
  if (type == "ByteLevel") return;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    m.prefix_tokens = {post.at("cls").at(0).get<std::string>()};
    m.suffix_tokens = {post.at("sep").at(0).get<std::string>()};
    return;
  }
  if (type != "TemplateProcessing") refuse(post, "post_processor", what, type);
  bool seen_sequence = false;
  for (const json& piece : post.at("single")) {
    if (piece.contains("Sequence")) seen_sequence = true;
    else if (piece.contains("SpecialToken"))
      (seen_sequence ? m.suffix_tokens : m.prefix_tokens).push_back(piece["SpecialToken"].at("id").get<std::string>());
  }
}

std::string merges_text(const BpeModel& m) {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : m.merges) out += a + " " + b + "\n";
  return out;
}

json template_processor(const BpeModel& m) {
  json single = json::array();
  for (const auto& t : m.prefix_tokens) single.push_back({{"SpecialToken", {{"id", t}, {"type_id", 0}}}});
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (const auto& t : m.suffix_tokens) single.push_back({{"SpecialToken", {{"id", t}, {"type_id", 0}}}});
  json specials = json::object();
  for (const auto& t : m.prefix_tokens) specials[t] = {{"id", t}, {"ids", json::array()}, {"tokens", {t}}};
  for (const auto& t : m.suffix_tokens) specials[t] = {{"id", t}, {"ids", json::array()}, {"tokens", {t}}};
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", specials}};
}

json tokenizer_json(const BpeTokenizer& tok) {
  const BpeModel& m = tok.model();
  json added = json::array();
  for (const AddedToken& a : m.added)
    added.push_back({{"id", a.id},
                     {"content", a.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", a.special}});
  json merges = json::array();
  for (const auto& [a, b] : m.merges) merges.push_back(a + " " + b);
  json vocab = json::object();
  for (const auto& [token, id] : m.vocab) vocab[token] = id;
  json post = m.prefix_tokens.empty() && m.suffix_tokens.empty() ? json{{"type", "ByteLevel"},
                                                                        {"add_prefix_space", m.add_prefix_space},
                                                                        {"trim_offsets", m.trim_offsets},
                                                                        {"use_regex", true}}
                                                                 : template_processor(m);
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", m.add_prefix_space}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", post},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", m.special.unk.empty() ? json(nullptr) : json(m.special.unk)},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merges}}}};
}

}  // namespace

std::unique_ptr<Tokenizer> load_bpe_tokenizer_json(const std::string& path) {
  const json j = parse_json_file(path, "tokenizer.json");
  BpeModel m;
  try {
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      refuse(j["normalizer"], "normalizer", path, j["normalizer"].value("type", "?"));
    read_model(j.at("model"), m, path);
    read_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(nullptr), m, path);
    read_post_processor(j.contains("post_processor") ? j["post_processor"] : json(nullptr), m, path);
    if (j.contains("added_tokens"))
      for (const json& a : j["added_tokens"])
        m.added.push_back({a.at("content").get<std::string>(), a.at("id").get<int64_t>(), a.value("special", false)});
  } catch (const json::exception& e) {
    throw CorruptFile(fmt::format("{}: not a tokenizer.json Kiln can read: {}", path, e.what()));
  }
  return std::make_unique<BpeTokenizer>(std::move(m));
}

std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& vocab_json, const std::string& merges_txt,
                                              SpecialTokens special) {
  BpeModel m;
  m.vocab = read_vocab(parse_json_file(vocab_json, "vocab.json"), vocab_json);
  std::istringstream lines(read_file_bytes(merges_txt, "merges.txt"));
  std::string line;
  for (size_t n = 0; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    m.merges.push_back(split_merge(line, merges_txt, n));
  }
  const std::string gpt2_special = "<|endoftext|>";
  if (special.bos.empty() && special.eos.empty() && special.unk.empty() && m.vocab.count(gpt2_special))
    special.bos = special.eos = special.unk = gpt2_special;
  for (const std::string& t : {special.bos, special.eos, special.unk, special.pad}) {
    if (t.empty()) continue;
    auto it = m.vocab.find(t);
    if (it == m.vocab.end())
      throw InvalidArgument(fmt::format("{}: the special token '{}' is not in the vocabulary", vocab_json, t));
    bool listed = false;
    for (const AddedToken& a : m.added) listed = listed || a.content == t;
    if (!listed) m.added.push_back({t, it->second, true});
  }
  m.special = std::move(special);
  return std::make_unique<BpeTokenizer>(std::move(m));
}

void BpeTokenizer::save_pretrained(const std::string& dir) const {
  std::filesystem::create_directories(dir);
  json vocab = json::object();
  for (const auto& [token, id] : model_.vocab) vocab[token] = id;
  write_file_atomically(dir + "/tokenizer.json", tokenizer_json(*this).dump(2));
  write_file_atomically(dir + "/vocab.json", vocab.dump());
  write_file_atomically(dir + "/merges.txt", merges_text(model_));
  json config = special_tokens_json(special_);
  write_file_atomically(dir + "/special_tokens_map.json", config.dump(2));
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["add_prefix_space"] = model_.add_prefix_space;
  write_file_atomically(dir + "/tokenizer_config.json", config.dump(2));
}

}  // namespace kiln::text
