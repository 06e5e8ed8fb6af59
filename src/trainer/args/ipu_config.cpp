// IPUConfig (kiln/ipu_config.h): optimum-graphcore's keys read and written through one table of
// fields, each with its JSON type, so that from_dict, to_dict and update_from_string agree.
#include "kiln/ipu_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include "core/atomic_file.h"
#include "core/file_io.h"
#include "kiln/error.h"

namespace kiln::trainer {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string type_name(const json& v) { return v.is_null() ? "null" : std::string(v.type_name()); }

[[noreturn]] void bad(const std::string& key, const std::string& want, const json& got) {
  throw InvalidArgument(fmt::format("IPUConfig: `{}` must be {}; got {} ({})", key, want, got.dump(), type_name(got)));
}

int64_t read_int(const std::string& key, const json& v) {
  if (!v.is_number_integer()) bad(key, "an int", v);
  return v.get<int64_t>();
}

std::vector<int64_t> read_ints(const std::string& key, const json& v) {
  if (!v.is_array()) bad(key, "a list of ints", v);
  std::vector<int64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer()) bad(key, "a list of ints", v);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// How update_from_string reads a value for the field.
enum class Kind { Int, Bool, String, IntList, Number, Proportion, Object };

struct Field {
  std::string name;
  Kind kind;
  bool nullable;
  std::function<void(IPUConfig&, const json&)> read;
  std::function<json(const IPUConfig&)> write;
};

template <class T>
Field field(const char* name, T IPUConfig::*member) {
  Field f{name, Kind::Object, false, nullptr, nullptr};
  const std::string key = name;
  if constexpr (std::is_same_v<T, int64_t>) {
    f.kind = Kind::Int;
    f.read = [key, member](IPUConfig& c, const json& v) { c.*member = read_int(key, v); };
  } else if constexpr (std::is_same_v<T, bool>) {
    f.kind = Kind::Bool;
    f.read = [key, member](IPUConfig& c, const json& v) {
      if (!v.is_boolean()) bad(key, "a bool", v);
      c.*member = v.get<bool>();
    };
  } else if constexpr (std::is_same_v<T, std::string>) {
    f.kind = Kind::String;
    f.read = [key, member](IPUConfig& c, const json& v) {
      if (!v.is_string()) bad(key, "a str", v);
      c.*member = v.get<std::string>();
    };
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    f.kind = Kind::IntList;
    f.read = [key, member](IPUConfig& c, const json& v) { c.*member = read_ints(key, v); };
  } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    f.kind = Kind::Int;
    f.nullable = true;
    f.read = [key, member](IPUConfig& c, const json& v) {
      c.*member = v.is_null() ? std::nullopt : std::optional<int64_t>(read_int(key, v));
    };
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    f.kind = Kind::Number;
    f.nullable = true;
    f.read = [key, member](IPUConfig& c, const json& v) {
      if (!v.is_null() && !v.is_number()) bad(key, "a float", v);
      c.*member = v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
    };
  } else if constexpr (std::is_same_v<T, std::optional<std::vector<int64_t>>>) {
    f.kind = Kind::IntList;
    f.nullable = true;
    f.read = [key, member](IPUConfig& c, const json& v) {
      c.*member = v.is_null() ? std::nullopt : std::optional<std::vector<int64_t>>(read_ints(key, v));
    };
  } else {
    static_assert(std::is_same_v<T, json>);
    f.read = [member](IPUConfig& c, const json& v) { c.*member = v; };
  }
  f.write = [member](const IPUConfig& c) -> json {
    if constexpr (std::is_same_v<T, std::optional<int64_t>> || std::is_same_v<T, std::optional<double>> ||
                  std::is_same_v<T, std::optional<std::vector<int64_t>>>) {
      return (c.*member) ? json(*(c.*member)) : json();
    } else {
      return json(c.*member);
    }
  };
  return f;
}

Field proportion(const char* name, json IPUConfig::*member) {
  Field f = field(name, member);
  f.kind = Kind::Proportion;
  f.nullable = std::string(name).starts_with("inference_");
  const std::string key = name;
  f.read = [key, member, nullable = f.nullable](IPUConfig& c, const json& v) {
    const bool ok = v.is_number() || (v.is_null() && nullable) ||
                    (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); }));
    if (!ok) bad(key, "a float or a list of floats", v);
    c.*member = v;
  };
  return f;
}

Field object(const char* name, json IPUConfig::*member) {
  Field f = field(name, member);
  const std::string key = name;
  f.read = [key, member](IPUConfig& c, const json& v) {
    if (!v.is_object() && !v.is_null()) bad(key, "a dict", v);
    c.*member = v.is_null() ? json::object() : v;
  };
  return f;
}

const std::vector<Field>& fields() {
  using C = IPUConfig;
  static const std::vector<Field> table = [] {
    std::vector<Field> f;
    f.push_back(field("replication_factor", &C::replication_factor));
    f.push_back(field("inference_replication_factor", &C::inference_replication_factor));
    f.push_back(field("gradient_accumulation_steps", &C::gradient_accumulation_steps));
    f.push_back(field("layers_per_ipu", &C::layers_per_ipu));
    f.push_back(field("inference_layers_per_ipu", &C::inference_layers_per_ipu));
    f.push_back(field("ipus_per_replica", &C::ipus_per_replica));
    f.push_back(field("inference_ipus_per_replica", &C::inference_ipus_per_replica));
    f.push_back(field("optimizer_state_offchip", &C::optimizer_state_offchip));
    f.push_back(field("replicated_tensor_sharding", &C::replicated_tensor_sharding));
    f.push_back(proportion("matmul_proportion", &C::matmul_proportion));
    f.push_back(proportion("inference_matmul_proportion", &C::inference_matmul_proportion));
    f.push_back(field("enable_half_partials", &C::enable_half_partials));
    f.push_back(field("embedding_serialization_factor", &C::embedding_serialization_factor));
    f.push_back(field("inference_embedding_serialization_factor", &C::inference_embedding_serialization_factor));
    f.push_back(field("serialized_embedding_splits_per_ipu", &C::serialized_embedding_splits_per_ipu));
    f.push_back(
        field("inference_serialized_embedding_splits_per_ipu", &C::inference_serialized_embedding_splits_per_ipu));
    f.push_back(field("projection_serialization_factor", &C::projection_serialization_factor));
    f.push_back(field("inference_projection_serialization_factor", &C::inference_projection_serialization_factor));
    f.push_back(field("serialized_projection_splits_per_ipu", &C::serialized_projection_splits_per_ipu));
    f.push_back(
        field("inference_serialized_projection_splits_per_ipu", &C::inference_serialized_projection_splits_per_ipu));
    f.push_back(field("recompute_checkpoint_every_layer", &C::recompute_checkpoint_every_layer));
    f.push_back(field("device_iterations", &C::device_iterations));
    f.push_back(field("inference_device_iterations", &C::inference_device_iterations));
    f.push_back(field("output_mode", &C::output_mode));
    f.push_back(field("seed", &C::seed));
    f.push_back(field("auto_loss_scaling", &C::auto_loss_scaling));
    f.push_back(field("loss_scaling", &C::loss_scaling));
    f.push_back(field("executable_cache_dir", &C::executable_cache_dir));
    f.push_back(field("explicit_ir_inference", &C::explicit_ir_inference));
    f.push_back(object("parallelize_kwargs", &C::parallelize_kwargs));
    f.push_back(object("inference_parallelize_kwargs", &C::inference_parallelize_kwargs));
    f.push_back(field("pipeline_schedule", &C::pipeline_schedule));
    return f;
  }();
  return table;
}

const Field* find(const std::string& name) {
  for (const Field& f : fields())
    if (f.name == name) return &f;
  return nullptr;
}

// Keys optimum's BaseConfig writes beside the fields, and the deprecated ones it drops with a warning.
bool ignored_key(const std::string& key) {
  static const std::set<std::string> keys = {"optimum_version",
                                             "transformers_version",
                                             "_name_or_path",
                                             "sharded_execution_for_inference",
                                             "enable_half_first_order_momentum",
                                             "execute_encoder_on_cpu_for_generation"};
  return keys.count(key) != 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

json parse_number(const std::string& key, const std::string& text, bool integer) {
  try {
    size_t used = 0;
    if (integer) {
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return json(static_cast<int64_t>(v));
    } else {
      const double v = std::stod(text, &used);
      if (used == text.size()) return json(v);
    }
  } catch (const std::exception&) {
  }
  throw InvalidArgument(
      fmt::format("IPUConfig overrides: `{}={}`: expected {}", key, text, integer ? "an int" : "a float"));
}

// A list "[1 2 -1]" or "[1,2]" (or a bare single value) as the field's element type.
json parse_list(const std::string& key, std::string text, bool integer) {
  text = trim(text);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  for (char& c : text)
    if (c == ',') c = ' ';
  json out = json::array();
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t b = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > b) out.push_back(parse_number(key, text.substr(b, i - b), integer));
  }
  return out;
}

json parse_value(const Field& f, const std::string& text) {
  const std::string t = trim(text);
  if (f.nullable && (t == "None" || t == "null")) return json();
  switch (f.kind) {
    case Kind::Int:
      return parse_number(f.name, t, true);
    case Kind::Number:
      return parse_number(f.name, t, false);
    case Kind::Bool: {
      const std::string v = lower(t);
      if (v == "true" || v == "1" || v == "y" || v == "yes") return json(true);
      if (v == "false" || v == "0" || v == "n" || v == "no") return json(false);
      throw InvalidArgument(
          fmt::format("IPUConfig overrides: `{}={}`: expected a bool (true/false, yes/no, 1/0)", f.name, t));
    }
    case Kind::String:
      return json(t);
    case Kind::IntList:
      return parse_list(f.name, t, true);
    case Kind::Proportion:
      return t.starts_with("[") ? parse_list(f.name, t, false) : parse_number(f.name, t, false);
    case Kind::Object:
      try {
        return json::parse(t);
      } catch (const json::exception&) {
        throw InvalidArgument(fmt::format("IPUConfig overrides: `{}`: expected a JSON object, got '{}'", f.name, t));
      }
  }
  return json();
}

// Splits "a=1,b=[1, 2],c=x" at the commas outside brackets.
std::vector<std::string> split_overrides(const std::string& s) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty() || !parts.empty()) parts.push_back(cur);
  return parts;
}

void check_floor(const std::string& key, int64_t value, int64_t floor) {
  if (value < floor) throw InvalidArgument(fmt::format("IPUConfig: `{}` must be >= {}; got {}", key, floor, value));
}

void check_floor(const std::string& key, const std::vector<int64_t>& values, int64_t floor) {
  for (int64_t v : values)
    if (v < floor)
      throw InvalidArgument(
          fmt::format("IPUConfig: `{}` must have all elements >= {}; got [{}]", key, floor, fmt::join(values, ", ")));
}

void check_splits(const std::string& key, const std::optional<std::vector<int64_t>>& splits, int64_t stages,
                  const std::optional<int64_t>& factor, const std::string& factor_key) {
  if (!splits) return;
  check_floor(key, *splits, 0);
  const auto& v = *splits;
  int64_t sum = 0;
  for (int64_t s : v) sum += s;
  if (sum < 1) throw InvalidArgument(fmt::format("IPUConfig: `{}` must have at least one split on one stage", key));
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    int64_t rest = 0;
    for (size_t j = i + 1; j < v.size(); ++j) rest += v[j];
    if (v[i] != 0 && v[i + 1] == 0 && rest != 0)
      throw InvalidArgument(fmt::format("IPUConfig: `{}` must have its splits on consecutive stages", key));
  }
  if (factor) throw InvalidArgument(fmt::format("IPUConfig: give only one of `{}` and `{}`", factor_key, key));
  if (static_cast<int64_t>(v.size()) != stages)
    throw InvalidArgument(
        fmt::format("IPUConfig: `{}` has {} entries; the pipeline has {} stages", key, v.size(), stages));
}

}  // namespace

int64_t IPUConfig::stages() const {
  return ipus_per_replica > 0 ? ipus_per_replica : static_cast<int64_t>(layers_per_ipu.size());
}

IPUConfig IPUConfig::from_dict(const json& j) {
  if (!j.is_object()) throw InvalidArgument(fmt::format("IPUConfig: expected a JSON object, got {}", type_name(j)));
  IPUConfig c;
  for (const auto& [key, value] : j.items()) {
    if (ignored_key(key)) continue;
    const Field* f = find(key);
    if (f == nullptr)
      throw InvalidArgument(fmt::format("IPUConfig received unknown arguments: {}={}", key, value.dump()));
    f->read(c, value);
  }
  c.validate();
  return c;
}

IPUConfig IPUConfig::from_pretrained(const std::string& dir_or_json) {
  const std::string t = trim(dir_or_json);
  if (t.starts_with("{")) {
    try {
      return from_dict(json::parse(t));
    } catch (const json::parse_error& e) {
      throw InvalidArgument(fmt::format("IPUConfig: the JSON text does not parse: {}", e.what()));
    }
  }
  fs::path path = dir_or_json;
  if (fs::is_directory(path)) path /= "ipu_config.json";
  if (!fs::exists(path))
    throw IOError(
        fmt::format("IPUConfig: '{}' does not exist (a folder with ipu_config.json, a JSON file, or "
                    "JSON text)",
                    path.string()));
  const std::string text = read_file_bytes(path.string(), "IPUConfig");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InvalidArgument(fmt::format("IPUConfig: '{}' is not valid JSON: {}", path.string(), e.what()));
  }
  try {
    return from_dict(j);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{} (in '{}')", e.what(), path.string()));
  }
}

json IPUConfig::to_dict() const {
  json j = json::object();
  for (const Field& f : fields()) j[f.name] = f.write(*this);
  // optimum writes the resolved defaults.
  j["ipus_per_replica"] = stages();
  if (inference_layers_per_ipu.empty()) j["inference_layers_per_ipu"] = layers_per_ipu;
  if (inference_ipus_per_replica == 0) {
    const auto& inf = inference_layers_per_ipu.empty() ? layers_per_ipu : inference_layers_per_ipu;
    const bool fallback = stages() == static_cast<int64_t>(layers_per_ipu.size()) || inf != std::vector<int64_t>{-1};
    j["inference_ipus_per_replica"] = fallback ? static_cast<int64_t>(inf.size()) : stages();
  }
  if (inference_matmul_proportion.is_null()) {
    const bool list_mismatch = matmul_proportion.is_array() &&
                               static_cast<int64_t>(matmul_proportion.size()) != j["inference_ipus_per_replica"];
    j["inference_matmul_proportion"] = list_mismatch ? json(0.2) : matmul_proportion;
  }
  return j;
}

std::string IPUConfig::to_json_string() const { return to_dict().dump(2) + "\n"; }

void IPUConfig::save_pretrained(const std::string& dir) const {
  fs::create_directories(dir);
  write_file_atomically((fs::path(dir) / "ipu_config.json").string(), to_json_string());
}

void IPUConfig::update_from_string(const std::string& overrides) {
  IPUConfig next = *this;
  for (const std::string& part : split_overrides(overrides)) {
    const auto eq = part.find('=');
    if (eq == std::string::npos)
      throw InvalidArgument(fmt::format("IPUConfig overrides: '{}' is not key=value", trim(part)));
    const std::string key = trim(part.substr(0, eq));
    const Field* f = find(key);
    if (f == nullptr)
      throw InvalidArgument(fmt::format("IPUConfig overrides: key {} isn't in the original config dict", key));
    f->read(next, parse_value(*f, part.substr(eq + 1)));
  }
  next.validate();
  *this = std::move(next);
}

void IPUConfig::validate() const {
  check_floor("layers_per_ipu", layers_per_ipu, -1);
  check_floor("inference_layers_per_ipu", inference_layers_per_ipu, -1);
  if (layers_per_ipu.empty()) throw InvalidArgument("IPUConfig: `layers_per_ipu` must name at least one stage");
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"replication_factor", replication_factor},
                               {"inference_replication_factor", inference_replication_factor},
                               {"gradient_accumulation_steps", gradient_accumulation_steps},
                               {"device_iterations", device_iterations},
                               {"inference_device_iterations", inference_device_iterations}})
    check_floor(key, v, 1);
  if (ipus_per_replica != 0) check_floor("ipus_per_replica", ipus_per_replica, 1);
  if (inference_ipus_per_replica != 0) check_floor("inference_ipus_per_replica", inference_ipus_per_replica, 1);
  for (const auto& [key, v] :
       {std::pair<const char*, std::optional<int64_t>>{"embedding_serialization_factor",
                                                       embedding_serialization_factor},
        {"inference_embedding_serialization_factor", inference_embedding_serialization_factor},
        {"projection_serialization_factor", projection_serialization_factor},
        {"inference_projection_serialization_factor", inference_projection_serialization_factor}})
    if (v) check_floor(key, *v, 1);
  static const std::set<std::string> modes = {"all", "sum", "final", "default"};
  if (!modes.count(output_mode))
    throw InvalidArgument(fmt::format(
        "IPUConfig: `output_mode` can only take values in ('all', 'sum', 'final', 'default'); got '{}'", output_mode));
  if (pipeline_schedule != "1f1b" && pipeline_schedule != "gpipe")
    throw InvalidArgument(
        fmt::format("IPUConfig: `pipeline_schedule` is '1f1b' or 'gpipe'; got '{}'", pipeline_schedule));
  if (loss_scaling && !(*loss_scaling > 0 && std::isfinite(*loss_scaling)))
    throw InvalidArgument(fmt::format("IPUConfig: `loss_scaling` must be a finite number > 0; got {}", *loss_scaling));
  if (loss_scaling && auto_loss_scaling)
    throw InvalidArgument("IPUConfig: give one of `loss_scaling` (a fixed scale) and `auto_loss_scaling`");
  const json resolved = to_dict();
  for (const bool inference : {false, true}) {
    const std::string pre = inference ? "inference_" : "";
    const int64_t n = resolved[pre + "ipus_per_replica"].get<int64_t>();
    const json& mp = resolved[pre + "matmul_proportion"];
    if (mp.is_array()) {
      for (const auto& e : mp)
        if (e.get<double>() < 0)
          throw InvalidArgument(fmt::format("IPUConfig: `{}matmul_proportion` must have all elements >= 0", pre));
      if (static_cast<int64_t>(mp.size()) != n)
        throw InvalidArgument(
            fmt::format("IPUConfig: {}matmul_proportion={} should use the same number of stages as "
                        "{}ipus_per_replica={}",
                        pre, mp.dump(), pre, n));
    } else if (mp.get<double>() < 0) {
      throw InvalidArgument(fmt::format("IPUConfig: `{}matmul_proportion` must be >= 0", pre));
    }
    const auto layers = resolved[pre + "layers_per_ipu"].get<std::vector<int64_t>>();
    if (std::find(layers.begin(), layers.end(), -1) == layers.end() && static_cast<int64_t>(layers.size()) != n)
      throw InvalidArgument(
          fmt::format("IPUConfig: {}layers_per_ipu=[{}] should use the same number of stages as {}ipus_per_replica={}",
                      pre, fmt::join(layers, ", "), pre, n));
  }
  check_splits("serialized_embedding_splits_per_ipu", serialized_embedding_splits_per_ipu, stages(),
               embedding_serialization_factor, "embedding_serialization_factor");
  check_splits("serialized_projection_splits_per_ipu", serialized_projection_splits_per_ipu, stages(),
               projection_serialization_factor, "projection_serialization_factor");
  const int64_t inference_stages = resolved["inference_ipus_per_replica"].get<int64_t>();
  check_splits("inference_serialized_embedding_splits_per_ipu", inference_serialized_embedding_splits_per_ipu,
               inference_stages, inference_embedding_serialization_factor, "inference_embedding_serialization_factor");
  check_splits("inference_serialized_projection_splits_per_ipu", inference_serialized_projection_splits_per_ipu,
               inference_stages, inference_projection_serialization_factor,
               "inference_projection_serialization_factor");
}

std::optional<IPUConfig> ipu_config(const TrainingArguments& args) {
  if (!args.ipu_config_name && !args.ipu_config_overrides) return std::nullopt;
  IPUConfig c = args.ipu_config_name ? IPUConfig::from_pretrained(*args.ipu_config_name) : IPUConfig{};
  if (args.ipu_config_overrides) c.update_from_string(*args.ipu_config_overrides);
  return c;
}

TrainingArguments apply_ipu_config(TrainingArguments args, const IPUConfig& c, int world_size) {
  if (c.serialized_embedding_splits_per_ipu || c.serialized_projection_splits_per_ipu)
    throw Unsupported(
        "IPUConfig: serialized_*_splits_per_ipu place chunks on pipeline stages, which Kiln does not run");
  if (c.ranks() != world_size)
    throw InvalidArgument(fmt::format(
        "IPUConfig: replication_factor={} x {} stage(s) = {} ranks, but the run has {} (start it with mpirun -np {})",
        c.replication_factor, c.stages(), c.ranks(), world_size, c.ranks()));
  if (c.inference_replication_factor != 1 && c.inference_replication_factor != world_size)
    throw InvalidArgument(
        fmt::format("IPUConfig: inference_replication_factor={} must be 1 or the run's {} ranks "
                    "(evaluation is sharded over every rank)",
                    c.inference_replication_factor, world_size));
  if (args.n_ipu && *args.n_ipu != world_size)
    throw InvalidArgument(fmt::format("n_ipu={} but the run has {} ranks", *args.n_ipu, world_size));
  if (c.gradient_accumulation_steps != 1) {
    if (args.gradient_accumulation_steps != 1 && args.gradient_accumulation_steps != c.gradient_accumulation_steps)
      throw InvalidArgument(fmt::format(
          "gradient_accumulation_steps={} but the IPUConfig's gradient_accumulation_steps={}: give it in one place",
          args.gradient_accumulation_steps, c.gradient_accumulation_steps));
    args.gradient_accumulation_steps = c.gradient_accumulation_steps;
  }
  if (c.seed) args.seed = *c.seed;
  if (c.recompute_checkpoint_every_layer) args.gradient_checkpointing = true;
  if ((c.loss_scaling || c.auto_loss_scaling) && !args.fp16)
    throw InvalidArgument(fmt::format(
        "IPUConfig: {} scales the loss of float16 training; this run is {} (fp32=False, or fp16=True, trains in fp16)",
        c.loss_scaling ? "loss_scaling" : "auto_loss_scaling", args.bf16 ? "bfloat16" : "float32"));
  const bool zero = c.replicated_tensor_sharding && world_size > 1;
  if (zero || c.loss_scaling) {
    if (args.deepspeed)
      throw InvalidArgument(
          "IPUConfig: replicated_tensor_sharding and loss_scaling configure ZeRO and the loss scale; give them there "
          "or in the DeepSpeed config, not both");
    nlohmann::json ds = {{"zero_optimization", {{"stage", zero ? 1 : 0}}}};
    if (c.loss_scaling) ds["fp16"] = {{"enabled", "auto"}, {"loss_scale", *c.loss_scaling}};
    args.deepspeed = ds.dump();
  }
  args.validate();
  return args;
}

std::vector<int64_t> IPUConfig::layers_per_stage(int64_t layers) const {
  std::vector<int64_t> out = layers_per_ipu;
  if (static_cast<int64_t>(out.size()) < stages()) out.resize(static_cast<size_t>(stages()), -1);
  int64_t fixed = 0, wild = 0;
  for (int64_t v : out) (v == -1 ? wild : fixed) += (v == -1 ? 1 : v);
  const auto shown = fmt::format("layers_per_ipu=[{}]", fmt::join(layers_per_ipu, ", "));
  if (wild == 0) {
    if (fixed != layers)
      throw InvalidArgument(fmt::format("IPUConfig: {} places {} layers; the model has {}", shown, fixed, layers));
    return out;
  }
  const int64_t rest = layers - fixed;
  if (rest < wild || rest % wild != 0)
    throw InvalidArgument(fmt::format(
        "IPUConfig: {}: the {} layers left for the {} wildcard stage(s) of a {}-layer model do not divide evenly",
        shown, rest, wild, layers));
  for (int64_t& v : out)
    if (v == -1) v = rest / wild;
  return out;
}

}  // namespace kiln::trainer
