// The boundary between Kiln and Debian's libsentencepiece. That library carries its own copy of
// protobuf-lite (3.14), whose symbols clash with the protobuf Kiln links for ONNX (3.21): in one
// symbol scope, the first message sentencepiece parses aborts on a version check. So sentencepiece
// lives in a library of its own, libkiln_sentencepiece.so (src/sentencepiece/backend.cpp), loaded
// with RTLD_DEEPBIND so that it binds to its own protobuf, and reached through this interface only:
// virtual calls and standard-library types (one libstdc++ serves both sides), no exceptions across.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::text {

struct SpmPiece {
  int id = 0;
  std::string piece;
  size_t begin = 0, end = 0;  // bytes of the input
};

class SpmModel {
 public:
  virtual ~SpmModel() = default;
  virtual int piece_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
  virtual int pad_id() const = 0;
  virtual int piece_to_id(const std::string& piece) const = 0;
  virtual std::string id_to_piece(int id) const = 0;
  virtual bool is_control(int id) const = 0;
  virtual bool is_unknown(int id) const = 0;
  // Each returns "" or sentencepiece's error message.
  virtual std::string encode(const std::string& text, std::vector<SpmPiece>& pieces) const = 0;
  virtual std::string decode(const std::vector<int>& ids, std::string& text) const = 0;
  virtual std::string serialized() const = 0;
};

class SpmBackend {
 public:
  virtual ~SpmBackend() = default;
  // nullptr with `error` set when `bytes` is not a model.
  virtual std::unique_ptr<SpmModel> load(const std::string& bytes, std::string& error) const = 0;
  // SentencePieceTrainer::Train over `args` (its flag names), the model's bytes into `model`;
  // returns "" or the error.
  virtual std::string train(const std::unordered_map<std::string, std::string>& args, unsigned seed,
                            std::string& model) const = 0;
};

// libkiln_sentencepiece.so's one exported function.
using SpmBackendFactory = SpmBackend* (*)();
inline constexpr const char* kSpmBackendSymbol = "kiln_sentencepiece_backend";

// The backend, loaded on first use from beside libkiln.so; IOError naming the library when it
// cannot be loaded, Unsupported in sanitizer builds (which refuse RTLD_DEEPBIND).
const SpmBackend& sentencepiece_backend();

}  // namespace kiln::text
