#include "trainer/loop/artifact_cache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/compression.h"
#include "core/content_hash.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/version.h"
#include "onnx/model_key.h"

namespace kiln::trainer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json options_json(const training::ArtifactOptions& o) {
  json j;
  j["requires_grad"] = o.requires_grad;
  j["frozen_params"] = o.frozen_params;
  j["loss"] = training::to_string(o.loss);
  j["loss_input_names"] = o.loss_input_names;
  j["additional_output_names"] = o.additional_output_names;
  j["optimizer"] = o.optimizer ? training::to_string(*o.optimizer) : "none";
  j["adamw"] = {o.adamw.beta1,        o.adamw.beta2,    o.adamw.epsilon,
                o.adamw.weight_decay, o.adamw.maximize, o.adamw.hf_variant};
  j["sgd"] = {o.sgd.momentum, o.sgd.dampening, o.sgd.weight_decay, o.sgd.nesterov, o.sgd.maximize};
  j["lamb"] = {o.lamb.beta1,        o.lamb.beta2,           o.lamb.epsilon,
               o.lamb.weight_decay, o.lamb.bias_correction, o.lamb.max_weight_norm};
  j["adagrad"] = {o.adagrad.lr_decay, o.adagrad.weight_decay, o.adagrad.initial_accumulator_value, o.adagrad.epsilon,
                  o.adagrad.maximize};
  const auto& f = o.adafactor;
  j["adafactor"] = {f.eps1,
                    f.eps2,
                    f.clip_threshold,
                    f.decay_rate,
                    f.beta1 ? *f.beta1 : -1.0f,
                    f.weight_decay,
                    f.beta1.has_value(),
                    f.scale_parameter,
                    f.relative_step,
                    f.warmup_init};
  j["learning_rate"] = o.learning_rate;
  j["label_smoothing"] = o.label_smoothing;
  j["lm_head_chunks"] = o.lm_head_chunks;
  j["no_weight_decay"] = o.no_weight_decay;
  j["nominal_checkpoint"] = o.nominal_checkpoint;
  j["prefix"] = o.prefix;
  j["recompute"] = {o.recompute.enabled, o.recompute.boundaries};
  j["mixed_precision"] = dtype_name(o.mixed_precision);
  return j;
}

void warn(const std::string& message) { std::cerr << "kiln: executable_cache_dir: " << message << "\n"; }

// The entry's files if its manifest and every file check out; a reason otherwise.
std::string check_entry(const fs::path& entry, const std::string& key, json& manifest) {
  try {
    manifest = parse_json(read_file_bytes((entry / "manifest.json").string(), "cache manifest"),
                          (entry / "manifest.json").string());
  } catch (const Error& e) {
    return e.what();
  }
  if (!manifest.is_object() || manifest.value("key", "") != key || !manifest.contains("files") ||
      !manifest["files"].is_object())
    return "its manifest is not this entry's";
  for (const auto& [name, info] : manifest["files"].items()) {
    if (name.find('/') != std::string::npos || name == ".." || !info.is_object()) return "a malformed file entry";
    std::string bytes;
    try {
      bytes = read_file_bytes((entry / name).string(), "cached artifact");
    } catch (const Error& e) {
      return e.what();
    }
    if (bytes.size() != info.value("size", uint64_t{0}) || crc32_of(bytes) != info.value("crc32", uint32_t{0}))
      return fmt::format("'{}' does not match its manifest (changed or truncated)", name);
  }
  return "";
}

}  // namespace

std::string artifact_cache_key(const Model& forward, const training::ArtifactOptions& options) {
  const std::string text =
      model_content_key(forward) + "|" + options_json(options).dump() + "|" + kVersion + "|" + library_build_id();
  return fmt::format("{:016x}{:08x}", fnv1a(text), crc32_of(text));
}

bool restore_cached_artifacts(const std::string& cache_dir, const std::string& key, const std::string& dir) {
  const fs::path entry = fs::path(cache_dir) / key;
  std::error_code ec;
  if (!fs::is_directory(entry, ec)) return false;
  json manifest;
  if (const std::string bad = check_entry(entry, key, manifest); !bad.empty()) {
    warn(fmt::format("ignoring the cache entry '{}': {}; building the artifacts again", entry.string(), bad));
    return false;
  }
  fs::create_directories(dir, ec);
  if (ec) throw IOError(fmt::format("cannot create '{}': {}", dir, ec.message()));
  for (const auto& [name, info] : manifest["files"].items()) {
    // A hard link where the cache and the run share a file system (the checkpoint is the size of the
    // model: copying it would cost what generating it does), else a copy. Either way a new name
    // replaces the old atomically, and nothing writes into an artifact file once it exists.
    const fs::path target = fs::path(dir) / name;
    const fs::path tmp = fs::path(dir) / fmt::format(".{}.cache-{}", name, getpid());
    fs::remove(tmp, ec);
    fs::create_hard_link(entry / name, tmp, ec);
    if (ec) {
      write_file_atomically(target.string(), read_file_bytes((entry / name).string(), "cached artifact"));
      continue;
    }
    fs::rename(tmp, target, ec);
    if (ec) throw IOError(fmt::format("cannot move '{}' into place: {}", target.string(), ec.message()));
  }
  return true;
}

void store_cached_artifacts(const std::string& cache_dir, const std::string& key,
                            const std::vector<std::string>& files) {
  const fs::path entry = fs::path(cache_dir) / key;
  const fs::path tmp = fs::path(cache_dir) / fmt::format(".{}.tmp-{}", key, getpid());
  try {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp);
    json manifest = {{"key", key}, {"kiln_version", kVersion}, {"files", json::object()}};
    for (const std::string& path : files) {
      const std::string name = fs::path(path).filename().string();
      const std::string bytes = read_file_bytes(path, "generated artifact");
      write_file_atomically((tmp / name).string(), bytes);
      manifest["files"][name] = {{"size", bytes.size()}, {"crc32", crc32_of(bytes)}};
    }
    write_file_atomically((tmp / "manifest.json").string(), manifest.dump(2) + "\n");
    fs::remove_all(entry, ec);  // a stale entry being replaced
    fs::rename(tmp, entry);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    warn(fmt::format("could not store the artifacts in '{}': {}", entry.string(), e.what()));
  }
}

}  // namespace kiln::trainer
