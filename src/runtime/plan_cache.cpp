#include "runtime/plan_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/compression.h"
#include "core/content_hash.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "kiln/version.h"
#include "onnx/model_key.h"

namespace kiln {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kMagic = "KILNPLAN1 ";

void warn(const std::string& message) { std::cerr << "kiln: plan cache: " << message << "\n"; }

bool has_subgraphs(const Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
    return std::any_of(n.attrs.begin(), n.attrs.end(),
                       [](const auto& a) { return a.second.kind == Attribute::Kind::Graph; });
  });
}

// An entry: the magic word and a JSON header on the first line, then the payload.
void write_entry(const std::string& path, json header, const std::string& payload) {
  header["bytes"] = payload.size();
  header["crc32"] = crc32_of(payload);
  header["kiln_version"] = kVersion;
  try {
    fs::create_directories(fs::path(path).parent_path());
    write_file_atomically(path, std::string(kMagic) + header.dump() + "\n" + payload);
  } catch (const std::exception& e) {
    warn(fmt::format("could not store '{}': {}", path, e.what()));
  }
}

// The payload of the entry at `path` whose header has `expected`'s fields; nullopt when there is
// none, or (with a warning) when it does not check out.
std::optional<std::string> read_entry(const std::string& path, const json& expected, json* header_out = nullptr) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  auto ignore = [&](const std::string& why) -> std::optional<std::string> {
    warn(fmt::format("ignoring '{}': {}; planning again", path, why));
    return std::nullopt;
  };
  std::string bytes;
  try {
    bytes = read_file_bytes(path, "plan cache entry");
  } catch (const Error& e) {
    return ignore(e.what());
  }
  const size_t eol = bytes.find('\n');
  if (bytes.compare(0, kMagic.size(), kMagic) != 0 || eol == std::string::npos) return ignore("not a plan cache entry");
  json header;
  try {
    header = parse_json(std::string_view(bytes).substr(kMagic.size(), eol - kMagic.size()), path);
  } catch (const Error& e) {
    return ignore(e.what());
  }
  if (!header.is_object()) return ignore("its header is not a JSON object");
  for (const auto& [field, value] : expected.items())
    if (!header.contains(field) || header[field] != value)
      return ignore(fmt::format("it was written for another {} (stale)", field));
  std::string payload = bytes.substr(eol + 1);
  if (header.value("bytes", uint64_t{0}) != payload.size() || header.value("crc32", uint32_t{0}) != crc32_of(payload))
    return ignore("its contents do not match its header (changed or truncated)");
  if (header_out) *header_out = std::move(header);
  return payload;
}

bool same_values(const std::vector<ValueInfo>& a, const std::vector<ValueInfo>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].describe() != b[i].describe()) return false;
  return true;
}

json requests_json(const std::vector<BufferRequest>& requests) {
  json out = json::array();
  for (const BufferRequest& r : requests) out.push_back({r.bytes, r.first, r.last});
  return out;
}

}  // namespace

std::unique_ptr<PlanCache> PlanCache::open(const std::string& dir, const Model& model, bool fuse) {
  if (has_subgraphs(model.graph)) return nullptr;
  const std::string text =
      fmt::format("{}|fuse={}|{}|{}", model_content_key(model), fuse, kVersion, library_build_id());
  std::string key = fmt::format("{:016x}{:08x}", fnv1a(text), crc32_of(text));
  std::string folder = (fs::path(dir) / "plans" / key).string();
  return std::unique_ptr<PlanCache>(new PlanCache(std::move(folder), std::move(key)));
}

std::string PlanCache::graph_path() const { return (fs::path(folder_) / "graph.kplan").string(); }

std::string PlanCache::memory_plan_path(const std::string& signature) const {
  return (fs::path(folder_) / fmt::format("{:016x}.kplan", fnv1a(signature))).string();
}

void PlanCache::store_graph(const Model& planned, const std::map<std::string, Tensor>& given) const {
  // An initializer the passes left as it was (the same bytes) is named, not copied: a model's
  // weights stay in the model.
  Model stored = planned;
  json kept = json::array();
  for (auto it = stored.graph.initializers.begin(); it != stored.graph.initializers.end();) {
    const auto g = given.find(it->first);
    const bool same = g != given.end() && g->second.storage() == it->second.storage() &&
                      g->second.raw_data() == it->second.raw_data() && g->second.shape() == it->second.shape() &&
                      g->second.strides() == it->second.strides() && g->second.dtype() == it->second.dtype();
    if (!same) {
      ++it;
      continue;
    }
    kept.push_back(it->first);
    it = stored.graph.initializers.erase(it);
  }
  std::string payload;
  try {
    payload = serialize_model(stored);
  } catch (const std::exception& e) {
    warn(fmt::format("could not store the graph: {}", e.what()));
    return;
  }
  write_entry(graph_path(), {{"key", key_}, {"kind", "graph"}, {"kept", kept}}, payload);
}

std::optional<Model> PlanCache::load_graph(const Model& model) const {
  json header;
  const std::optional<std::string> payload = read_entry(graph_path(), {{"key", key_}, {"kind", "graph"}}, &header);
  if (!payload) return std::nullopt;
  auto ignore = [&](const std::string& why) -> std::optional<Model> {
    warn(fmt::format("ignoring '{}': {}; planning again", graph_path(), why));
    return std::nullopt;
  };
  Model m;
  try {
    LoadOptions options;
    options.run_checker = false;  // the file is this build's own output, checked by its CRC
    options.infer_shapes = false;
    options.load_external_data = false;
    m = load_model_from_bytes(*payload, "", options, graph_path());
  } catch (const Error& e) {
    return ignore(e.what());
  }
  if (!header.contains("kept") || !header["kept"].is_array()) return ignore("its header lists no initializers");
  for (const auto& name : header["kept"]) {
    if (!name.is_string()) return ignore("a malformed initializer name");
    const auto it = model.graph.initializers.find(name.get<std::string>());
    if (it == model.graph.initializers.end())
      return ignore(fmt::format("it names an initializer '{}' the model lacks", name.get<std::string>()));
    m.graph.initializers[it->first] = it->second;
  }
  // Overridable initializers whose tensor was left out read back as plain inputs: the model's own
  // list stands, each with its tensor.
  std::set<std::string> overridable;
  for (const ValueInfo& v : model.graph.overridable_initializers) {
    if (!m.graph.initializers.count(v.name))
      return ignore(fmt::format("it lacks the overridable initializer '{}'", v.name));
    overridable.insert(v.name);
  }
  std::vector<ValueInfo> inputs;
  for (ValueInfo& v : m.graph.inputs)
    if (!overridable.count(v.name)) inputs.push_back(std::move(v));
  m.graph.inputs = std::move(inputs);
  m.graph.overridable_initializers = model.graph.overridable_initializers;
  // The passes keep a graph's inputs and outputs as they are.
  if (!same_values(m.graph.inputs, model.graph.inputs) || !same_values(m.graph.outputs, model.graph.outputs))
    return ignore("its inputs or outputs are not the model's");
  return m;
}

void PlanCache::store_memory_plan(const std::string& signature, const std::vector<BufferRequest>& requests,
                                  const MemoryPlan& plan) const {
  const json payload = {
      {"requests", requests_json(requests)}, {"offsets", plan.offsets}, {"arena_bytes", plan.arena_bytes}};
  write_entry(memory_plan_path(signature), {{"key", key_}, {"kind", "memory plan"}, {"signature", signature}},
              payload.dump());
}

std::optional<MemoryPlan> PlanCache::load_memory_plan(const std::string& signature,
                                                      const std::vector<BufferRequest>& requests) const {
  const std::string path = memory_plan_path(signature);
  const std::optional<std::string> payload =
      read_entry(path, {{"key", key_}, {"kind", "memory plan"}, {"signature", signature}});
  if (!payload) return std::nullopt;
  auto ignore = [&](const std::string& why) -> std::optional<MemoryPlan> {
    warn(fmt::format("ignoring '{}': {}; planning again", path, why));
    return std::nullopt;
  };
  MemoryPlan plan;
  try {
    const json j = parse_json(*payload, path);
    if (j.at("requests") != requests_json(requests))
      return ignore("the planner asks for other buffers than it was made for (stale)");
    plan.offsets = j.at("offsets").get<std::vector<size_t>>();
    plan.arena_bytes = j.at("arena_bytes").get<size_t>();
  } catch (const Error& e) {
    return ignore(e.what());
  } catch (const json::exception& e) {
    return ignore(fmt::format("a malformed memory plan ({})", e.what()));
  }
  if (std::string why; !memory_plan_fits(requests, plan, &why)) return ignore(why);
  return plan;
}

}  // namespace kiln
