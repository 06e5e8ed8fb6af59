#include "training/checkpoint_format.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/safetensors.h"

namespace kiln::training::checkpoint_format {

namespace {

// ordered_json: the nominal entries keep the parameters' order.
using Json = nlohmann::ordered_json;

[[noreturn]] void corrupt(const std::string& source, const std::string& key, const std::string& what) {
  throw CorruptFile(fmt::format("'{}' is not a valid Kiln checkpoint: metadata \"{}\" {}", source, key, what));
}

Json parse_json(const std::string& text, const std::string& key, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    corrupt(source, key, fmt::format("is not valid JSON: {}", e.what()));
  }
}

int64_t get_int64(const Json& v, const std::string& key, const std::string& what, const std::string& source) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return v.get<int64_t>();
  corrupt(source, key, fmt::format("has {} = {}, not a 64-bit integer", what, v.dump()));
}

// A float stored as its exact double value; anything outside float's range is corrupt, not inf.
float get_float(const Json& v, const std::string& key, const std::string& what, const std::string& source) {
  if (v.is_object() && v.size() == 1 && v.contains("float") && v["float"].is_string()) {
    const std::string s = v["float"].get<std::string>();
    if (s == "nan") return std::numeric_limits<float>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<float>::infinity();
    if (s == "-inf") return -std::numeric_limits<float>::infinity();
  }
  if (!v.is_number_float()) corrupt(source, key, fmt::format("has {} = {}, not a float", what, v.dump()));
  const double d = v.get<double>();
  if (std::abs(d) > static_cast<double>(std::numeric_limits<float>::max()))
    corrupt(source, key, fmt::format("has {} = {}, outside the range of float", what, v.dump()));
  return static_cast<float>(d);
}

Json float_json(float f) {
  if (std::isfinite(f)) return static_cast<double>(f);  // exact; dumped as the shortest text reading back to it
  Json special = Json::object();
  special["float"] = std::isnan(f) ? "nan" : f > 0 ? "inf" : "-inf";
  return special;
}

std::vector<std::string> get_strings(const Json& v, const std::string& key, const std::string& what,
                                     const std::string& source) {
  if (!v.is_array()) corrupt(source, key, fmt::format("has {} = {}, not an array of strings", what, v.dump()));
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const Json& s : v) {
    if (!s.is_string()) corrupt(source, key, fmt::format("has {} containing {}, not a string", what, s.dump()));
    if (!seen.insert(s.get<std::string>()).second)
      corrupt(source, key, fmt::format("lists '{}' twice in {}", s.get<std::string>(), what));
    out.push_back(s.get<std::string>());
  }
  return out;
}

const Json& member(const Json& obj, const char* name, const std::string& key, const std::string& source) {
  if (!obj.contains(name)) corrupt(source, key, fmt::format("has no \"{}\"", name));
  return obj[name];
}

}  // namespace

std::string optimizer_tensor_name(const std::string& slot, const std::string& parameter) {
  return kOptimizerPrefix + slot + "." + parameter;
}

std::string encode_names(const std::vector<std::string>& names) { return Json(names).dump(); }

std::vector<std::string> decode_names(const std::string& text, const std::string& key, const std::string& source) {
  return get_strings(parse_json(text, key, source), key, "the value", source);
}

std::string encode_properties(const PropertyBag& properties) {
  Json out = Json::object();
  for (const auto& [name, value] : properties) {
    if (const auto* i = std::get_if<int64_t>(&value)) out[name] = *i;
    else if (const auto* f = std::get_if<float>(&value)) out[name] = float_json(*f);
    else out[name] = std::get<std::string>(value);
  }
  return out.dump();
}

PropertyBag decode_properties(const std::string& text, const std::string& source) {
  const Json j = parse_json(text, kPropertiesKey, source);
  if (!j.is_object()) corrupt(source, kPropertiesKey, fmt::format("is {}, not an object", j.dump()));
  PropertyBag out;
  for (const auto& [name, v] : j.items()) {
    const std::string what = fmt::format("property '{}'", name);
    if (v.is_string()) out.set(name, v.get<std::string>());
    else if (v.is_number_integer()) out.set(name, get_int64(v, kPropertiesKey, what, source));
    else out.set(name, get_float(v, kPropertiesKey, what, source));
  }
  return out;
}

std::string encode_optimizer(const OptimizerState& state) {
  Json slots = Json::array();
  for (const auto& entry : state.slots) slots.push_back(entry.first);
  Json out = {
      {"type", state.type}, {"step", state.step}, {"learning_rate", float_json(state.learning_rate)}, {"slots", slots}};
  return out.dump();
}

OptimizerHeader decode_optimizer(const std::string& text, const std::string& source) {
  const Json j = parse_json(text, kOptimizerKey, source);
  if (!j.is_object()) corrupt(source, kOptimizerKey, fmt::format("is {}, not an object", j.dump()));
  for (const auto& [name, v] : j.items())
    if (name != "type" && name != "step" && name != "learning_rate" && name != "slots")
      corrupt(source, kOptimizerKey, fmt::format("has an unexpected key '{}'", name));
  OptimizerHeader out;
  const Json& type = member(j, "type", kOptimizerKey, source);
  if (!type.is_string() || type.get<std::string>().empty())
    corrupt(source, kOptimizerKey, fmt::format("has \"type\" = {}, not an optimizer name", type.dump()));
  out.type = type.get<std::string>();
  out.step = get_int64(member(j, "step", kOptimizerKey, source), kOptimizerKey, "\"step\"", source);
  out.learning_rate =
      get_float(member(j, "learning_rate", kOptimizerKey, source), kOptimizerKey, "\"learning_rate\"", source);
  out.slots = get_strings(member(j, "slots", kOptimizerKey, source), kOptimizerKey, "\"slots\"", source);
  for (const std::string& slot : out.slots)
    if (slot.empty() || slot.find('.') != std::string::npos)
      corrupt(source, kOptimizerKey, fmt::format("has slot name '{}' (slot names are non-empty, without '.')", slot));
  return out;
}

std::string encode_nominal(const std::vector<NominalEntry>& entries) {
  Json out = Json::object();
  for (const NominalEntry& e : entries) out[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)}, {"shape", e.shape}};
  return out.dump();
}

std::vector<NominalEntry> decode_nominal(const std::string& text, const std::string& source) {
  const Json j = parse_json(text, kNominalKey, source);
  if (!j.is_object()) corrupt(source, kNominalKey, fmt::format("is {}, not an object", j.dump()));
  std::vector<NominalEntry> out;
  for (const auto& [name, v] : j.items()) {
    const std::string what = fmt::format("parameter '{}'", name);
    if (!v.is_object() || v.size() != 2 || !v.contains("dtype") || !v.contains("shape") || !v["dtype"].is_string() ||
        !v["shape"].is_array())
      corrupt(source, kNominalKey,
              fmt::format("has {} = {}, not {{\"dtype\": name, \"shape\": [dims]}}", what, v.dump()));
    NominalEntry e;
    e.name = name;
    try {
      e.dtype = dtype_from_safetensors_name(v["dtype"].get<std::string>());
    } catch (Error& err) {
      err.add_context(fmt::format("'{}': metadata \"{}\", {}: ", source, kNominalKey, what));
      throw;
    }
    for (const Json& d : v["shape"]) {
      const int64_t dim = get_int64(d, kNominalKey, what + " shape", source);
      if (dim < 0) corrupt(source, kNominalKey, fmt::format("has {} with negative dimension {}", what, dim));
      e.shape.push_back(dim);
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kiln::training::checkpoint_format
