// Backbones with Hugging Face's interface: the out_features / out_indices alignment of
// transformers.utils.backbone_utils (its rules and messages, Python reprs included), the Backbone
// base and the AutoBackbone registry that the zoo's model files fill.
#include "kiln/nn/backbone.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "kiln/error.h"
#include "models/nn/generation.h"

namespace kiln::nn {

namespace {

// Python's repr of a list of str, of a list of int, and of a tuple of int.
std::string py_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", '" : "'") + v[i] + "'";
  return s + "]";
}
std::string py_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
std::string py_tuple(const std::vector<int64_t>& v) {
  std::string s = py_list(v);
  s.front() = '(';
  s.back() = ')';
  return v.size() == 1 ? s.substr(0, s.size() - 1) + ",)" : s;
}

int64_t stage_count(const std::vector<std::string>& stage_names) { return static_cast<int64_t>(stage_names.size()); }

// HF's verify_out_features_out_indices.
void verify(const std::optional<std::vector<std::string>>& out_features,
            const std::optional<std::vector<int64_t>>& out_indices, const std::vector<std::string>& stage_names) {
  if (out_features) {
    const auto& f = *out_features;
    for (const auto& name : f)
      if (std::find(stage_names.begin(), stage_names.end(), name) == stage_names.end())
        throw InvalidArgument(
            fmt::format("out_features must be a subset of stage_names: {} got {}", py_list(stage_names), py_list(f)));
    if (std::set<std::string>(f.begin(), f.end()).size() != f.size())
      throw InvalidArgument(fmt::format("out_features must not contain any duplicates, got {}", py_list(f)));
    std::vector<std::string> sorted;
    for (const auto& name : stage_names)
      if (std::find(f.begin(), f.end(), name) != f.end()) sorted.push_back(name);
    if (sorted != f)
      throw InvalidArgument(fmt::format("out_features must be in the same order as stage_names, expected {} got {}",
                                        py_list(sorted), py_list(f)));
  }
  if (out_indices) {
    const auto& idx = *out_indices;
    const int64_t n = stage_count(stage_names);
    std::vector<int64_t> positive;
    for (int64_t i : idx) {
      if (i >= n || i < -n)
        throw InvalidArgument(fmt::format("out_indices must be valid indices for stage_names {}, got {}",
                                          py_list(stage_names), py_list(idx)));
      positive.push_back(i < 0 ? i + n : i);
    }
    if (std::set<int64_t>(positive.begin(), positive.end()).size() != positive.size())
      throw InvalidArgument(fmt::format("out_indices must not contain any duplicates, got {}{}", py_list(idx),
                                        positive != idx ? fmt::format(" (equivalent to {})", py_tuple(positive)) : ""));
    if (!std::is_sorted(positive.begin(), positive.end())) {
      std::vector<size_t> order(idx.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return positive[a] < positive[b]; });
      std::vector<int64_t> expected;
      expected.reserve(order.size());
      for (size_t i : order) expected.push_back(idx[i]);
      throw InvalidArgument(fmt::format("out_indices must be in the same order as stage_names, expected {} got {}",
                                        py_list(expected), py_list(idx)));
    }
  }
  if (out_features && out_indices) {
    if (out_features->size() != out_indices->size())
      throw InvalidArgument("out_features and out_indices should have the same length if both are set");
    const int64_t n = stage_count(stage_names);
    for (size_t i = 0; i < out_features->size(); ++i) {
      const int64_t k = (*out_indices)[i] < 0 ? (*out_indices)[i] + n : (*out_indices)[i];
      if ((*out_features)[i] != stage_names[static_cast<size_t>(k)])
        throw InvalidArgument("out_features and out_indices should correspond to the same stages if both are set");
    }
  }
}

struct BackboneRegistry {
  std::mutex mutex;
  std::map<std::string, BackboneFactory> factories;
};

BackboneRegistry& backbones() {
  static BackboneRegistry r;
  return r;
}

}  // namespace

std::pair<std::vector<std::string>, std::vector<int64_t>> align_output_features_output_indices(
    const std::optional<std::vector<std::string>>& out_features, const std::optional<std::vector<int64_t>>& out_indices,
    const std::vector<std::string>& stage_names) {
  if (stage_names.empty()) throw InvalidArgument("Stage_names must be set for transformers backbones");
  verify(out_features, out_indices, stage_names);
  std::vector<std::string> features;
  std::vector<int64_t> indices;
  const int64_t n = stage_count(stage_names);
  if (!out_features && !out_indices) {
    features = {stage_names.back()};
    indices = {n - 1};
  } else if (!out_indices) {
    features = *out_features;
    for (const auto& f : features)
      indices.push_back(std::find(stage_names.begin(), stage_names.end(), f) - stage_names.begin());
  } else if (!out_features) {
    indices = *out_indices;  // kept as given (negative ones too), as HF does
    for (int64_t i : indices) features.push_back(stage_names[static_cast<size_t>(i < 0 ? i + n : i)]);
  } else {
    features = *out_features;
    indices = *out_indices;
  }
  verify(features, indices, stage_names);
  return {features, indices};
}

// ---- Backbone ------------------------------------------------------------------------------------

std::vector<int64_t> Backbone::channels() const {
  std::vector<int64_t> c;
  for (const auto& name : out_features_) c.push_back(out_feature_channels_.at(name));
  return c;
}

void Backbone::set_out_features(std::vector<std::string> names) {
  std::tie(out_features_, out_indices_) =
      align_output_features_output_indices(std::move(names), std::nullopt, stage_names_);
  detail::bump_generation();  // the outputs changed: Module::operator() must retrace
}

void Backbone::set_out_indices(std::vector<int64_t> indices) {
  std::tie(out_features_, out_indices_) =
      align_output_features_output_indices(std::nullopt, std::move(indices), stage_names_);
  detail::bump_generation();
}

void Backbone::init_backbone(std::vector<std::string> stage_names, std::map<std::string, int64_t> channels,
                             const BackboneOptions& options) {
  for (const auto& name : stage_names)
    if (!channels.count(name))
      throw InvalidArgument(fmt::format("{}: no channel count for stage '{}'", type_name(), name));
  std::tie(out_features_, out_indices_) =
      align_output_features_output_indices(options.out_features, options.out_indices, stage_names);
  stage_names_ = std::move(stage_names);
  out_feature_channels_ = std::move(channels);
}

size_t Backbone::stages_needed() const {
  size_t needed = 0;
  for (const auto& name : out_features_)
    needed = std::max(
        needed,
        static_cast<size_t>(std::find(stage_names_.begin(), stage_names_.end(), name) - stage_names_.begin()) + 1);
  return needed;
}

std::vector<Var> Backbone::select_outputs(const std::vector<Var>& stages) const {
  std::vector<Var> out;
  for (const auto& name : out_features_) {
    const size_t i =
        static_cast<size_t>(std::find(stage_names_.begin(), stage_names_.end(), name) - stage_names_.begin());
    if (i >= stages.size())
      throw InvalidArgument(
          fmt::format("{}: stage '{}' was asked for but only {} stages ran", type_name(), name, stages.size()));
    out.push_back(stages[i]);
  }
  return out;
}

// ---- AutoBackbone --------------------------------------------------------------------------------

void register_backbone(const std::string& name, BackboneFactory factory) {
  if (name.empty() || !factory) throw InvalidArgument("register_backbone: a backbone needs a name and a factory");
  BackboneRegistry& r = backbones();
  std::lock_guard lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> AutoBackbone::names() {
  BackboneRegistry& r = backbones();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [n, f] : r.factories) names.push_back(n);
  return names;
}

std::shared_ptr<Backbone> AutoBackbone::from_config(const std::string& name, const zoo::Config& config,
                                                    const BackboneOptions& options) {
  BackboneFactory factory;
  {
    BackboneRegistry& r = backbones();
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw InvalidArgument(
        fmt::format("AutoBackbone: the model '{}' has no backbone; models with one: {}", name, known));
  }
  return factory(zoo::config_for(name, config), options);
}

}  // namespace kiln::nn
