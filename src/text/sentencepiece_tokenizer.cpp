// SentencePiece models through Debian's libsentencepiece (kiln/tokenizers.h): encoding with byte
// offsets, decoding with special tokens kept or skipped, training, and the folder Hugging Face's
// T5Tokenizer / LlamaTokenizer reads.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "text/spm_backend.h"
#include "text/tokenizer_files.h"

namespace kiln::text {

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, bool add_bos, bool add_eos) : add_bos_(add_bos), add_eos_(add_eos) {
    const std::string bytes = read_file_bytes(path, "SentencePiece model");
    std::string error;
    model_ = sentencepiece_backend().load(bytes, error);
    if (!model_) throw CorruptFile(fmt::format("'{}' is not a SentencePiece model: {}", path, error));
    const SpmModel& sp = *model_;
    auto piece = [&](int id) { return id >= 0 ? sp.id_to_piece(id) : std::string(); };
    special_ = {piece(sp.bos_id()), piece(sp.eos_id()), piece(sp.unk_id()), piece(sp.pad_id())};
    if (add_bos_ && sp.bos_id() < 0)
      throw InvalidArgument(fmt::format("'{}': add_bos but the model has no bos piece", path));
    if (add_eos_ && sp.eos_id() < 0)
      throw InvalidArgument(fmt::format("'{}': add_eos but the model has no eos piece", path));
  }

  std::string kind() const override { return "sentencepiece"; }

  Encoding encode(const std::string& text, bool add_special_tokens) const override {
    std::vector<SpmPiece> pieces;
    const std::string error = model_->encode(text, pieces);
    if (!error.empty()) throw InvalidArgument(fmt::format("SentencePiece encode: {}", error));
    Encoding e;
    const auto [prefix, suffix] = add_special_tokens ? added_special_ids() : decltype(added_special_ids()){};
    auto special = [&](int64_t id) {
      e.ids.push_back(id);
      e.tokens.push_back(model_->id_to_piece(static_cast<int>(id)));
      e.offsets.emplace_back(0, 0);
    };
    for (int64_t id : prefix) special(id);
    for (SpmPiece& p : pieces) {
      e.ids.push_back(p.id);
      e.tokens.push_back(std::move(p.piece));
      e.offsets.emplace_back(p.begin, p.end);
    }
    for (int64_t id : suffix) special(id);
    return e;
  }

  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::string out;
    std::vector<int> run;  // ordinary pieces, decoded together (their spaces depend on each other)
    auto flush = [&] {
      if (run.empty()) return;
      std::string text;
      const std::string error = model_->decode(run, text);
      if (!error.empty()) throw InvalidArgument(fmt::format("SentencePiece decode: {}", error));
      out += text;
      run.clear();
    };
    for (int64_t id : ids) {
      check_id(id);
      if (is_special(id)) {
        flush();
        if (!skip_special_tokens) out += model_->id_to_piece(static_cast<int>(id));
      } else {
        run.push_back(static_cast<int>(id));
      }
    }
    flush();
    return out;
  }

  int64_t vocab_size() const override { return model_->piece_size(); }

  std::optional<int64_t> token_to_id(const std::string& token) const override {
    const int id = model_->piece_to_id(token);
    if (id == model_->unk_id() && token != model_->id_to_piece(id)) return std::nullopt;
    return id;
  }

  std::string id_to_token(int64_t id) const override {
    check_id(id);
    return model_->id_to_piece(static_cast<int>(id));
  }

  bool is_special(int64_t id) const override {
    const int i = static_cast<int>(id);
    return id >= 0 && id < vocab_size() && (model_->is_control(i) || model_->is_unknown(i));
  }

  void save_pretrained(const std::string& dir) const override {
    std::filesystem::create_directories(dir);
    // T5Tokenizer reads spiece.model and adds </s>; LlamaTokenizer reads tokenizer.model and adds <s>.
    const bool t5 = add_eos_ && !add_bos_;
    write_file_atomically(dir + (t5 ? "/spiece.model" : "/tokenizer.model"), model_->serialized());
    nlohmann::json config = special_tokens_json(special_);
    write_file_atomically(dir + "/special_tokens_map.json", config.dump(2));
    config["tokenizer_class"] = t5 ? "T5Tokenizer" : "LlamaTokenizer";
    config["add_bos_token"] = add_bos_;
    config["add_eos_token"] = add_eos_;
    if (t5) config["extra_ids"] = 0;
    write_file_atomically(dir + "/tokenizer_config.json", config.dump(2));
  }

 protected:
  std::pair<std::vector<int64_t>, std::vector<int64_t>> added_special_ids() const override {
    std::pair<std::vector<int64_t>, std::vector<int64_t>> out;
    if (add_bos_) out.first.push_back(model_->bos_id());
    if (add_eos_) out.second.push_back(model_->eos_id());
    return out;
  }

 private:
  void check_id(int64_t id) const {
    if (id < 0 || id >= vocab_size())
      throw InvalidArgument(fmt::format("token id {} is outside the vocabulary (size {})", id, vocab_size()));
  }

  std::unique_ptr<SpmModel> model_;
  bool add_bos_, add_eos_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path, bool add_bos, bool add_eos) {
  return std::make_unique<SentencePieceTokenizer>(model_path, add_bos, add_eos);
}

void train_sentencepiece(const std::string& corpus, const std::string& model_path, const SentencePieceTrainOptions& o) {
  if (!std::filesystem::is_regular_file(corpus)) throw IOError(fmt::format("corpus '{}' is not a file", corpus));
  if (std::filesystem::file_size(corpus) == 0) throw InvalidArgument(fmt::format("corpus '{}' is empty", corpus));
  const std::vector<std::string> types = {"unigram", "bpe", "char", "word"};
  if (std::find(types.begin(), types.end(), o.model_type) == types.end())
    throw InvalidArgument(
        fmt::format("train_sentencepiece: model_type '{}' is unknown (unigram, bpe, char, word)", o.model_type));
  const std::unordered_map<std::string, std::string> args = {
      {"input", corpus},
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", fmt::format("{}", o.character_coverage)},
      {"pad_id", std::to_string(o.pad_id)},
      {"eos_id", std::to_string(o.eos_id)},
      {"unk_id", std::to_string(o.unk_id)},
      {"bos_id", std::to_string(o.bos_id)},
      {"input_sentence_size", std::to_string(o.input_sentence_size)},
      {"num_threads", std::to_string(o.num_threads)},
      {"minloglevel", "1"},
  };
  std::string proto;
  const std::string error = sentencepiece_backend().train(args, static_cast<unsigned>(o.seed), proto);
  if (!error.empty()) throw InvalidArgument(fmt::format("train_sentencepiece on '{}': {}", corpus, error));
  write_file_atomically(model_path, proto);
}

}  // namespace kiln::text
