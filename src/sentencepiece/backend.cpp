// libkiln_sentencepiece.so: Debian's libsentencepiece behind Kiln's SpmBackend interface
// (src/text/spm_backend.h says why it is a library of its own). Nothing here throws across the
// boundary: sentencepiece reports through util::Status, turned into strings.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "text/spm_backend.h"

namespace {

using kiln::text::SpmPiece;

class Model final : public kiln::text::SpmModel {
 public:
  std::string load(const std::string& bytes) {
    const auto status = sp_.LoadFromSerializedProto(bytes);
    return status.ok() ? std::string() : status.ToString();
  }
  int piece_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  int unk_id() const override { return sp_.unk_id(); }
  int pad_id() const override { return sp_.pad_id(); }
  int piece_to_id(const std::string& piece) const override { return sp_.PieceToId(piece); }
  std::string id_to_piece(int id) const override { return sp_.IdToPiece(id); }
  bool is_control(int id) const override { return sp_.IsControl(id); }
  bool is_unknown(int id) const override { return sp_.IsUnknown(id); }

  std::string encode(const std::string& text, std::vector<SpmPiece>& pieces) const override {
    try {
      const auto proto = sp_.EncodeAsImmutableProto(text);
      for (const auto& p : proto.pieces()) pieces.push_back({static_cast<int>(p.id()), p.piece(), p.begin(), p.end()});
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  std::string decode(const std::vector<int>& ids, std::string& text) const override {
    const auto status = sp_.Decode(ids, &text);
    return status.ok() ? std::string() : status.ToString();
  }

  std::string serialized() const override { return sp_.serialized_model_proto(); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

class Backend final : public kiln::text::SpmBackend {
 public:
  std::unique_ptr<kiln::text::SpmModel> load(const std::string& bytes, std::string& error) const override {
    auto m = std::make_unique<Model>();
    error = m->load(bytes);
    if (!error.empty()) return nullptr;
    return m;
  }

  std::string train(const std::unordered_map<std::string, std::string>& args, unsigned seed,
                    std::string& model) const override {
    try {
      sentencepiece::SetRandomGeneratorSeed(seed);
      const auto status = sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model);
      return status.ok() ? std::string() : status.ToString();
    } catch (const std::exception& e) {
      return e.what();
    }
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) kiln::text::SpmBackend* kiln_sentencepiece_backend() {
  static Backend backend;
  return &backend;
}
