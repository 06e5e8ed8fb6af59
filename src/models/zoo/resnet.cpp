// ResNet-18/34/50 as torchvision.models.resnet builds them (ResNet v1.5: the stride on the 3x3
// convolution of a bottleneck), with torchvision's module names and initialisation, configured
// with Hugging Face ResNetConfig's field names; and the ResNet backbone (HF's ResNetBackbone).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/error.h"
#include "kiln/nn/backbone.h"
#include "kiln/nn/layers.h"
#include "models/zoo/vision.h"

namespace kiln::nn::zoo {
namespace vision {

namespace {

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  auto c = std::make_shared<Conv2d>(Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
  kaiming_normal_fan_out(c->get_parameter("weight"));
  return c;
}

Var add(Tracer& t, const Var& a, const Var& b) { return t.op("Add", {a, b}, {}, a.dtype, a.shape); }

// conv1x1 + BatchNorm2d when a block changes the channels or the resolution (torchvision's
// downsample Sequential: keys downsample.0.weight, downsample.1.*).
ModulePtr downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return std::make_shared<Sequential>(
      std::vector<ModulePtr>{conv(in, out, 1, stride), std::make_shared<BatchNorm2d>(out)});
}

// Registration order is torchvision's, so state_dict() lists keys in its order.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1_ = register_module("conv1", conv(in, out, 3, stride));
    bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(out));
    relu_ = register_module("relu", std::make_shared<ReLU>(true));
    conv2_ = register_module("conv2", conv(out, out, 3, 1));
    bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(out));
    if (auto d = downsample(in, out, stride)) downsample_ = register_module("downsample", d);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    Var y = relu_->call(t, bn1_->call(t, conv1_->call(t, x)));
    y = bn2_->call(t, conv2_->call(t, y));
    return {relu_->call(t, add(t, y, downsample_ ? downsample_->call(t, x) : x))};
  }
  std::string type_name() const override { return "BasicBlock"; }

 private:
  ModulePtr conv1_, bn1_, relu_, conv2_, bn2_, downsample_;
};

// 1x1 reduce to out / 4, 3x3 (strided), 1x1 expand to out.
class Bottleneck : public Module {
 public:
  Bottleneck(int64_t in, int64_t out, int64_t stride) {
    const int64_t width = out / 4;
    conv1_ = register_module("conv1", conv(in, width, 1, 1));
    bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(width));
    conv2_ = register_module("conv2", conv(width, width, 3, stride));
    bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(width));
    conv3_ = register_module("conv3", conv(width, out, 1, 1));
    bn3_ = register_module("bn3", std::make_shared<BatchNorm2d>(out));
    relu_ = register_module("relu", std::make_shared<ReLU>(true));
    if (auto d = downsample(in, out, stride)) downsample_ = register_module("downsample", d);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    Var y = relu_->call(t, bn1_->call(t, conv1_->call(t, x)));
    y = relu_->call(t, bn2_->call(t, conv2_->call(t, y)));
    y = bn3_->call(t, conv3_->call(t, y));
    return {relu_->call(t, add(t, y, downsample_ ? downsample_->call(t, x) : x))};
  }
  std::string type_name() const override { return "Bottleneck"; }

 private:
  ModulePtr conv1_, bn1_, conv2_, bn2_, conv3_, bn3_, relu_, downsample_;
};

// The classifier: the body, global average pooling, flatten, fc.
class ResNet : public Module {
 public:
  explicit ResNet(const ResNetSpec& spec) : stages_(spec.depths.size()) {
    add_resnet_body(*this, spec);
    avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(std::vector<int64_t>{1, 1}));
    fc_ = register_module("fc", std::make_shared<Linear>(spec.hidden_sizes.back(), spec.num_labels));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var x = run_resnet_body(*this, t, inputs.at(0), stages_ + 1).back();
    return {fc_->call(t, flatten_from_1(t, avgpool_->call(t, x)))};
  }
  std::string type_name() const override { return "ResNet"; }

 private:
  size_t stages_;
  ModulePtr avgpool_, fc_;
};

// HF's ResNetBackbone over torchvision's modules: the classifier's keys without avgpool and fc.
class ResNetBackbone : public Backbone {
 public:
  ResNetBackbone(const ResNetSpec& spec, const BackboneOptions& options) {
    add_resnet_body(*this, spec);
    const auto names = resnet_stage_names(spec);
    const auto channels = resnet_stage_channels(spec);
    std::map<std::string, int64_t> by_name;
    for (size_t i = 0; i < names.size(); ++i) by_name[names[i]] = channels[i];
    init_backbone(names, by_name, options);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    return select_outputs(run_resnet_body(*this, t, inputs.at(0), stages_needed()));
  }
  std::string type_name() const override { return "ResNetBackbone"; }
};

ZooEntry resnet_entry(const std::string& name, const std::string& description, Config defaults) {
  ZooEntry e;
  e.name = name;
  e.description = description;
  e.default_config = std::move(defaults);
  e.create = [name](const Config& c) -> ModulePtr { return std::make_shared<ResNet>(resnet_spec(c, name)); };
  e.example_inputs = [name](const Config& c) -> InputShapes {
    return {{"pixel_values", {2, resnet_spec(c, name).num_channels, 224, 224}}};
  };
  // Fully convolutional up to a global pool: any image size runs (28x28 Fashion-MNIST included).
  e.dynamic_axes = [](const Config&) -> DynamicAxes {
    return {{"pixel_values", {{0, "batch"}, {2, "height"}, {3, "width"}}}, {"logits", {{0, "batch"}}}};
  };
  return e;
}

Config resnet_config(std::vector<int64_t> hidden_sizes, std::vector<int64_t> depths, const std::string& layer_type) {
  return {{"num_channels", 3},           {"embedding_size", 64},     {"hidden_sizes", std::move(hidden_sizes)},
          {"depths", std::move(depths)}, {"layer_type", layer_type}, {"num_labels", 1000}};
}

const bool registered = [] {
  register_model(resnet_entry("resnet18", "ResNet-18 (torchvision.models.resnet18)",
                              resnet_config({64, 128, 256, 512}, {2, 2, 2, 2}, "basic")));
  register_model(resnet_entry("resnet34", "ResNet-34 (torchvision.models.resnet34)",
                              resnet_config({64, 128, 256, 512}, {3, 4, 6, 3}, "basic")));
  register_model(resnet_entry("resnet50", "ResNet-50 (torchvision.models.resnet50, v1.5)",
                              resnet_config({256, 512, 1024, 2048}, {3, 4, 6, 3}, "bottleneck")));
  for (const char* name : {"resnet18", "resnet34", "resnet50"})
    register_backbone(
        name, [name = std::string(name)](const Config& c, const BackboneOptions& o) -> std::shared_ptr<Backbone> {
          return std::make_shared<ResNetBackbone>(resnet_spec(c, name), o);
        });
  return true;
}();

}  // namespace

ResNetSpec resnet_spec(const Config& c, const std::string& model) {
  ResNetSpec s;
  s.num_channels = config_int(c, model, "num_channels");
  s.embedding_size = config_int(c, model, "embedding_size");
  s.num_labels = config_int(c, model, "num_labels");
  s.hidden_sizes = config_ints(c, model, "hidden_sizes");
  s.depths = config_ints(c, model, "depths");
  const std::string type = config_string(c, model, "layer_type");
  if (type != "basic" && type != "bottleneck")
    throw InvalidArgument(
        fmt::format("{} config: layer_type must be \"basic\" or \"bottleneck\", got \"{}\"", model, type));
  s.bottleneck = type == "bottleneck";
  if (s.hidden_sizes.empty() || s.hidden_sizes.size() != s.depths.size())
    throw InvalidArgument(fmt::format("{} config: hidden_sizes {} and depths {} must be non-empty and of one length",
                                      model, s.hidden_sizes, s.depths));
  if (s.bottleneck)
    for (int64_t h : s.hidden_sizes)
      if (h % 4 != 0)
        throw InvalidArgument(
            fmt::format("{} config: a bottleneck stage's hidden size must be divisible by 4 (its "
                        "width is a quarter of it), got hidden_sizes {}",
                        model, s.hidden_sizes));
  return s;
}

void add_resnet_body(Module& m, const ResNetSpec& s) {
  m.register_module("conv1", conv(s.num_channels, s.embedding_size, 7, 2));
  m.register_module("bn1", std::make_shared<BatchNorm2d>(s.embedding_size));
  m.register_module("relu", std::make_shared<ReLU>(true));
  m.register_module("maxpool", std::make_shared<MaxPool2d>(MaxPool2dOptions(3).stride(2).padding(1)));
  int64_t in = s.embedding_size;
  for (size_t i = 0; i < s.depths.size(); ++i) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < s.depths[i]; ++b) {
      const int64_t stride = i > 0 && b == 0 ? 2 : 1;  // the first stage keeps the pooled resolution
      if (s.bottleneck) stage->push_back(std::make_shared<Bottleneck>(in, s.hidden_sizes[i], stride));
      else stage->push_back(std::make_shared<BasicBlock>(in, s.hidden_sizes[i], stride));
      in = s.hidden_sizes[i];
    }
    m.register_module(fmt::format("layer{}", i + 1), stage);
  }
}

std::vector<Var> run_resnet_body(Module& m, Tracer& t, const Var& x, size_t count) {
  std::vector<Var> outs;
  Var y = m.get_submodule("conv1")->call(t, x);
  y = m.get_submodule("relu")->call(t, m.get_submodule("bn1")->call(t, y));
  outs.push_back(m.get_submodule("maxpool")->call(t, y));
  for (size_t i = 1; outs.size() < count; ++i)
    outs.push_back(m.get_submodule(fmt::format("layer{}", i))->call(t, outs.back()));
  return outs;
}

std::vector<std::string> resnet_stage_names(const ResNetSpec& s) {
  std::vector<std::string> names{"stem"};
  for (size_t i = 0; i < s.depths.size(); ++i) names.push_back(fmt::format("stage{}", i + 1));
  return names;
}

std::vector<int64_t> resnet_stage_channels(const ResNetSpec& s) {
  std::vector<int64_t> c{s.embedding_size};
  c.insert(c.end(), s.hidden_sizes.begin(), s.hidden_sizes.end());
  return c;
}

}  // namespace vision
}  // namespace kiln::nn::zoo
