// GenerationConfig's checks and generation_config.json (kiln/generation.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "kiln/generation.h"

namespace kiln::generation {

namespace {

using nlohmann::json;

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument("GenerationConfig: " + message);
}

template <class T>
void read(const json& j, const char* key, T& into) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    into = j[key].get<T>();
  } catch (const json::exception& e) {
    throw InvalidArgument(fmt::format("GenerationConfig: '{}' has the wrong type ({})", key, j[key].dump()));
  }
}

template <class T>
void read(const json& j, const char* key, std::optional<T>& into) {
  if (!j.contains(key) || j[key].is_null()) return;
  T value{};
  read(j, key, value);
  into = value;
}

}  // namespace

void GenerationConfig::validate() const {
  require(max_length > 0, fmt::format("max_length must be > 0, got {}", max_length));
  require(!max_new_tokens || *max_new_tokens > 0,
          fmt::format("max_new_tokens must be > 0, got {}", max_new_tokens.value_or(0)));
  require(min_length >= 0 && min_new_tokens.value_or(0) >= 0, "min_length and min_new_tokens must be >= 0");
  require(num_beams >= 1, fmt::format("num_beams must be >= 1, got {}", num_beams));
  require(num_return_sequences >= 1, fmt::format("num_return_sequences must be >= 1, got {}", num_return_sequences));
  if (num_beams > 1) {
    require(num_return_sequences <= num_beams,
            fmt::format("num_return_sequences ({}) has to be smaller or equal to num_beams ({})", num_return_sequences,
                        num_beams));
    if (do_sample)
      throw Unsupported("GenerationConfig: beam sampling (do_sample with num_beams > 1) is not implemented");
  } else {
    require(do_sample || num_return_sequences == 1,
            "greedy search (num_beams 1, do_sample false) returns one sequence: num_return_sequences must be 1");
  }
  require(temperature > 0, fmt::format("temperature must be strictly positive, got {}", temperature));
  require(top_k >= 0, fmt::format("top_k must be >= 0 (0 disables it), got {}", top_k));
  require(top_p > 0 && top_p <= 1, fmt::format("top_p must be in (0, 1], got {}", top_p));
  require(repetition_penalty > 0,
          fmt::format("repetition_penalty must be strictly positive, got {}", repetition_penalty));
  require(no_repeat_ngram_size >= 0, fmt::format("no_repeat_ngram_size must be >= 0, got {}", no_repeat_ngram_size));
  for (int64_t id : eos_token_id) require(id >= 0, fmt::format("eos_token_id {} is negative", id));
  require(pad_token_id.value_or(0) >= 0, "pad_token_id is negative");
}

GenerationConfig GenerationConfig::from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InvalidArgument(fmt::format("GenerationConfig: not JSON: {}", e.what()));
  }
  if (!j.is_object()) throw InvalidArgument("GenerationConfig: the JSON must be an object");
  GenerationConfig c;
  read(j, "max_length", c.max_length);
  read(j, "max_new_tokens", c.max_new_tokens);
  read(j, "min_length", c.min_length);
  read(j, "min_new_tokens", c.min_new_tokens);
  read(j, "do_sample", c.do_sample);
  read(j, "num_beams", c.num_beams);
  read(j, "num_return_sequences", c.num_return_sequences);
  read(j, "length_penalty", c.length_penalty);
  read(j, "temperature", c.temperature);
  read(j, "top_k", c.top_k);
  read(j, "top_p", c.top_p);
  read(j, "repetition_penalty", c.repetition_penalty);
  read(j, "no_repeat_ngram_size", c.no_repeat_ngram_size);
  read(j, "pad_token_id", c.pad_token_id);
  read(j, "bos_token_id", c.bos_token_id);
  read(j, "decoder_start_token_id", c.decoder_start_token_id);
  read(j, "forced_bos_token_id", c.forced_bos_token_id);
  read(j, "forced_eos_token_id", c.forced_eos_token_id);
  read(j, "use_cache", c.use_cache);
  read(j, "seed", c.seed);
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    if (j["eos_token_id"].is_array()) read(j, "eos_token_id", c.eos_token_id);
    else c.eos_token_id = {j["eos_token_id"].get<int64_t>()};
  }
  if (j.contains("early_stopping")) {
    const json& e = j["early_stopping"];
    if (e.is_boolean()) c.early_stopping = e.get<bool>() ? EarlyStopping::True : EarlyStopping::False;
    else if (e == "never") c.early_stopping = EarlyStopping::Never;
    else
      throw InvalidArgument(
          fmt::format("GenerationConfig: early_stopping must be true, false or \"never\", got {}", e.dump()));
  }
  c.validate();
  return c;
}

std::string GenerationConfig::to_json() const {
  json j = {{"max_length", max_length},
            {"min_length", min_length},
            {"do_sample", do_sample},
            {"num_beams", num_beams},
            {"num_return_sequences", num_return_sequences},
            {"length_penalty", length_penalty},
            {"temperature", temperature},
            {"top_k", top_k},
            {"top_p", top_p},
            {"repetition_penalty", repetition_penalty},
            {"no_repeat_ngram_size", no_repeat_ngram_size},
            {"use_cache", use_cache}};
  j["early_stopping"] =
      early_stopping == EarlyStopping::Never ? json("never") : json(early_stopping == EarlyStopping::True);
  if (max_new_tokens) j["max_new_tokens"] = *max_new_tokens;
  if (min_new_tokens) j["min_new_tokens"] = *min_new_tokens;
  if (eos_token_id.size() == 1) j["eos_token_id"] = eos_token_id[0];
  else if (!eos_token_id.empty()) j["eos_token_id"] = eos_token_id;
  for (auto [key, value] : {std::pair{"pad_token_id", pad_token_id},
                            {"bos_token_id", bos_token_id},
                            {"decoder_start_token_id", decoder_start_token_id},
                            {"forced_bos_token_id", forced_bos_token_id},
                            {"forced_eos_token_id", forced_eos_token_id}})
    if (value) j[key] = *value;
  return j.dump(2);
}

}  // namespace kiln::generation
