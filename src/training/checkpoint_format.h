// The metadata of a Kiln checkpoint (docs/checkpoint.md): its keys and the JSON each holds. The
// safetensors layer carries only string -> string metadata, so every structured value is a JSON
// document in one string. Decoders throw CorruptFile naming the file and the key.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/checkpoint.h"

namespace kiln::training::checkpoint_format {

inline constexpr const char* kFormatKey = "format";
inline constexpr const char* kFormatValue = "kiln.checkpoint";
inline constexpr const char* kVersionKey = "kiln.version";
inline constexpr const char* kTrainableKey = "kiln.trainable";    // ["name", ...]
inline constexpr const char* kFrozenKey = "kiln.frozen";          // ["name", ...]
inline constexpr const char* kPropertiesKey = "kiln.properties";  // {"name": 3 | 0.5 | "text"}
inline constexpr const char* kOptimizerKey = "kiln.optimizer";    // {"type", "step", "learning_rate", "slots"}
inline constexpr const char* kNominalKey = "kiln.nominal";        // {"name": {"dtype", "shape"}}
inline constexpr const char* kOptimizerPrefix = "optimizer.";

// "optimizer.<slot>.<parameter>"
std::string optimizer_tensor_name(const std::string& slot, const std::string& parameter);

std::string encode_names(const std::vector<std::string>& names);
std::vector<std::string> decode_names(const std::string& text, const std::string& key, const std::string& source);

// int64 -> JSON integer, float -> JSON number with a fraction or exponent (its exact value as a
// double, so it reads back bit for bit), string -> string. NaN and infinities, which JSON lacks,
// become {"float": "nan" | "inf" | "-inf"}.
std::string encode_properties(const PropertyBag& properties);
PropertyBag decode_properties(const std::string& text, const std::string& source);

// The optimizer's scalars and slot names; the slot tensors travel as safetensors tensors.
struct OptimizerHeader {
  std::string type;
  int64_t step = 0;
  float learning_rate = 0;
  std::vector<std::string> slots;
};
std::string encode_optimizer(const OptimizerState& state);
OptimizerHeader decode_optimizer(const std::string& text, const std::string& source);

struct NominalEntry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
};
std::string encode_nominal(const std::vector<NominalEntry>& entries);
std::vector<NominalEntry> decode_nominal(const std::string& text, const std::string& source);

}  // namespace kiln::training::checkpoint_format
