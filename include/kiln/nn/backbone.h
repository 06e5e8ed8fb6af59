// Backbones with Hugging Face's interface (transformers.utils.backbone_utils / AutoBackbone): a
// model's stages by name, the ones asked for by out_features or out_indices, and their feature
// maps when run.
//
//   auto bb = kiln::nn::AutoBackbone::from_config("resnet50", {}, {.out_indices = {{0, 1, 2, 3, 4}}});
//   bb->stage_names();            // {"stem", "stage1", "stage2", "stage3", "stage4"}
//   bb->channels();               // {64, 256, 512, 1024, 2048}
//   auto maps = (*bb)({x});       // feature_maps in order: [B,64,56,56] ... [B,2048,7,7] for 224²
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/nn/zoo.h"

namespace kiln::nn {

struct BackboneOptions {
  std::optional<std::vector<std::string>> out_features;
  std::optional<std::vector<int64_t>> out_indices;  // negative counts from the end, as HF allows
};

// HF's get_aligned_output_features_output_indices + verify_out_features_out_indices: neither ->
// the last stage; one -> the other derived; both -> they must name the same stages. Names must be
// stage names, in stage order, without duplicates; indices in range. InvalidArgument with HF's
// messages otherwise.
std::pair<std::vector<std::string>, std::vector<int64_t>> align_output_features_output_indices(
    const std::optional<std::vector<std::string>>& out_features, const std::optional<std::vector<int64_t>>& out_indices,
    const std::vector<std::string>& stage_names);

// A backbone module: forward returns the feature maps of out_features, in stage order (exported
// outputs are "output0", "output1", ... unless ExportOptions names them, e.g. by out_features()).
class Backbone : public Module {
 public:
  const std::vector<std::string>& stage_names() const { return stage_names_; }
  const std::vector<std::string>& out_features() const { return out_features_; }
  const std::vector<int64_t>& out_indices() const { return out_indices_; }
  // Channels of every stage by name, and of the output stages in order (HF's channels).
  const std::map<std::string, int64_t>& out_feature_channels() const { return out_feature_channels_; }
  std::vector<int64_t> channels() const;
  // Re-selects the outputs (HF's setters for out_features / out_indices), with the same rules.
  void set_out_features(std::vector<std::string> names);
  void set_out_indices(std::vector<int64_t> indices);

 protected:
  void init_backbone(std::vector<std::string> stage_names, std::map<std::string, int64_t> channels,
                     const BackboneOptions& options);
  // For forward: how many stages (stem first) must run to produce every output, and the outputs
  // picked from those stages' values ([stem, stage1, ...], at least stages_needed() of them).
  size_t stages_needed() const;
  std::vector<Var> select_outputs(const std::vector<Var>& stages) const;

 private:
  std::vector<std::string> stage_names_, out_features_;
  std::vector<int64_t> out_indices_;
  std::map<std::string, int64_t> out_feature_channels_;
};

// A backbone factory: gets the zoo model's full config (its defaults merged with the caller's
// overrides) and the output selection. Model files register theirs by zoo name (a static
// registrar, as zoo entries do); registering a name again replaces it.
using BackboneFactory =
    std::function<std::shared_ptr<Backbone>(const zoo::Config& config, const BackboneOptions& options)>;
void register_backbone(const std::string& name, BackboneFactory factory);

struct AutoBackbone {
  // "resnet18" / "resnet34" / "resnet50", "convnext_tiny", "vit": the zoo model's config (its
  // classification head left out) with HF's stage names: "stem", "stage1", ... InvalidArgument for
  // a model without a backbone (naming the ones that have one).
  static std::shared_ptr<Backbone> from_config(const std::string& name,
                                               const zoo::Config& config = zoo::Config::object(),
                                               const BackboneOptions& options = {});
  static std::vector<std::string> names();
};

}  // namespace kiln::nn
