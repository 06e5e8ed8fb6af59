// Pieces shared by the zoo's convolutional entries and their backbones: the bodies of torchvision's
// ResNet and ConvNeXt (registered on a module under torchvision's names, so a classifier and a
// backbone hold the same state_dict keys) and runners that return every stage's output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/nn/zoo.h"

namespace kiln::nn::zoo::vision {

// Typed config values; InvalidArgument naming the model, the key and the value when it is missing,
// of the wrong JSON type or out of range.
int64_t config_int(const Config& c, const std::string& model, const std::string& key, int64_t min = 1);
double config_double(const Config& c, const std::string& model, const std::string& key, double min, double max);
std::string config_string(const Config& c, const std::string& model, const std::string& key);
std::vector<int64_t> config_ints(const Config& c, const std::string& model, const std::string& key, int64_t min = 1);

// torch.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out).
void kaiming_normal_fan_out(Tensor& w);

// The flat per-example view of [B, ...] (torch.flatten(x, 1)) as one ONNX Flatten.
Var flatten_from_1(Tracer& t, const Var& x);

// ---- ResNet (torchvision.models.resnet; HF ResNetConfig's field names) ------------------------------
struct ResNetSpec {
  int64_t num_channels = 3, embedding_size = 64, num_labels = 1000;
  std::vector<int64_t> hidden_sizes, depths;  // a stage's output channels; blocks per stage
  bool bottleneck = false;                    // layer_type "bottleneck" (else "basic")
};
ResNetSpec resnet_spec(const Config& c, const std::string& model);
// Registers conv1, bn1, relu, maxpool, layer1..layerN on `m`, initialised as torchvision does.
void add_resnet_body(Module& m, const ResNetSpec& spec);
// The stem (conv1, bn1, relu, maxpool) and then each stage, stopping after `count` outputs:
// [stem, stage1, ...]. `m` must hold add_resnet_body's modules.
std::vector<Var> run_resnet_body(Module& m, Tracer& t, const Var& x, size_t count);
// HF's ResNet stage names and channels: "stem" (embedding_size), "stage1".. (hidden_sizes).
std::vector<std::string> resnet_stage_names(const ResNetSpec& spec);
std::vector<int64_t> resnet_stage_channels(const ResNetSpec& spec);

// ---- ConvNeXt (torchvision.models.convnext; HF ConvNextConfig's field names) ------------------------
struct ConvNextSpec {
  int64_t num_channels = 3, num_labels = 1000;
  std::vector<int64_t> hidden_sizes, depths;
  double layer_scale_init_value = 1e-6, drop_path_rate = 0.1;
};
ConvNextSpec convnext_spec(const Config& c, const std::string& model);
// Registers "features" (torchvision's Sequential: 0 the patchify stem, then the stages with a
// downsampling layer between each two) on `m`, initialised as torchvision does.
void add_convnext_features(Module& m, const ConvNextSpec& spec);
// [stem, stage1, ...]: features.0, features.1, features.3, ... outputs, stopping after `count`.
std::vector<Var> run_convnext_features(Module& m, Tracer& t, const Var& x, size_t count);
std::vector<std::string> convnext_stage_names(const ConvNextSpec& spec);
std::vector<int64_t> convnext_stage_channels(const ConvNextSpec& spec);
// torchvision's LayerNorm2d: LayerNorm over the channels of [B, C, H, W] (eps 1e-6).
ModulePtr make_layer_norm_2d(int64_t channels);

}  // namespace kiln::nn::zoo::vision
