// ConvNeXt-T as torchvision.models.convnext_tiny builds it (features / avgpool / classifier, CNBlock
// with layer_scale and row-wise stochastic depth), with torchvision's module names and
// initialisation, configured with Hugging Face ConvNextConfig's field names; and its backbone.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/error.h"
#include "kiln/nn/backbone.h"
#include "kiln/nn/layers.h"
#include "models/nn/layer_util.h"
#include "models/zoo/vision.h"

namespace kiln::nn::zoo {
namespace vision {

namespace {

Var transpose(Tracer& t, const Var& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> shape;
  shape.reserve(perm.size());
  for (int64_t p : perm) shape.push_back(x.dim(p));
  return t.op("Transpose", {x}, {{"perm", Attribute::of_ints(perm)}}, x.dtype, shape);
}

// torchvision.ops.misc.Permute.
class Permute : public Module {
 public:
  explicit Permute(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    if (x.rank() != static_cast<int64_t>(dims_.size()))
      throw ShapeError(fmt::format("Permute: input '{}' has rank {}, the permutation {} needs rank {}", x.name,
                                   x.rank(), dims_, dims_.size()));
    return {transpose(t, x, dims_)};
  }
  std::string type_name() const override { return "Permute"; }

 private:
  std::vector<int64_t> dims_;
};

// torchvision's LayerNorm2d: channels-last LayerNorm between two transposes.
class LayerNorm2d : public LayerNorm {
 public:
  explicit LayerNorm2d(int64_t channels) : LayerNorm({channels}, 1e-6) {}
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    if (x.rank() != 4)
      throw ShapeError(
          fmt::format("LayerNorm2d: expected a [B, C, H, W] input, got '{}' of rank {}", x.name, x.rank()));
    const Var y = LayerNorm::forward(t, {transpose(t, x, {0, 2, 3, 1})}).at(0);
    return {transpose(t, y, {0, 3, 1, 2})};
  }
  std::string type_name() const override { return "LayerNorm2d"; }
};

// torchvision.ops.StochasticDepth(p, "row"): in training, each example's residual branch is dropped
// with probability p and the kept ones scaled by 1 / (1 - p). The per-example mask is a Dropout of
// ones [B, 1, 1, 1], so Kiln's seeded, checkpointed Dropout stream draws it and its gradient rule
// applies it; in eval mode (or p = 0) the identity, as torchvision.
class StochasticDepth : public Module {
 public:
  explicit StochasticDepth(double p) : p_(p) {}
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    if (!training() || p_ == 0.0) return {t.op("Identity", {x}, {}, x.dtype, x.shape)};
    const Var batch =
        t.op("Shape", {x}, {{"start", Attribute::of_int(0)}, {"end", Attribute::of_int(1)}}, DType::Int64, {1});
    std::vector<int64_t> ones_shape(static_cast<size_t>(x.rank()), 1);
    ones_shape[0] = x.dim(0);
    const Var shape = t.op("Concat", {batch, t.constant_ints(std::vector<int64_t>(ones_shape.size() - 1, 1))},
                           {{"axis", Attribute::of_int(0)}}, DType::Int64, {x.rank()});
    const Var ones =
        t.op("ConstantOfShape", {shape}, {{"value", Attribute::of_tensor(Tensor::from_vector<float>({1}, {1.f}))}},
             DType::Float32, ones_shape);
    const Var mask = t.op_multi(
        "Dropout",
        {ones, t.constant_scalar(p_, DType::Float32, "ratio"), t.constant_scalar(1.0, DType::Bool, "training_mode")},
        {}, {{DType::Float32, ones_shape}, {DType::Bool, ones_shape}})[0];
    return {t.op("Mul", {x, mask}, {}, x.dtype, x.shape)};
  }
  std::string type_name() const override { return "StochasticDepth"; }
  std::string extra_repr() const override { return fmt::format("p={}, mode=row", kiln::nn::detail::py_float(p_)); }

 private:
  double p_;
};

// trunc_normal_(std=0.02) weights and zero biases: torchvision's ConvNeXt init of Conv2d and Linear.
template <class M>
std::shared_ptr<M> init_trunc_normal(std::shared_ptr<M> m) {
  trunc_normal_(m->get_parameter("weight"), 0.0, 0.02, -2.0, 2.0);
  for (auto& [name, p] : m->named_parameters(false))
    if (name == "bias") constant_(*p, 0.0);
  return m;
}

class CNBlock : public Module {
 public:
  CNBlock(int64_t dim, double layer_scale, double drop_path) {
    block_ = register_module(
        "block", std::make_shared<Sequential>(std::vector<ModulePtr>{
                     init_trunc_normal(std::make_shared<Conv2d>(Conv2dOptions(dim, dim, 7).padding(3).groups(dim))),
                     std::make_shared<Permute>(std::vector<int64_t>{0, 2, 3, 1}),
                     std::make_shared<LayerNorm>(std::vector<int64_t>{dim}, 1e-6),
                     init_trunc_normal(std::make_shared<Linear>(dim, 4 * dim)), std::make_shared<GELU>(),
                     init_trunc_normal(std::make_shared<Linear>(4 * dim, dim)),
                     std::make_shared<Permute>(std::vector<int64_t>{0, 3, 1, 2})}));
    Tensor scale = Tensor::empty(DType::Float32, {dim, 1, 1});
    constant_(scale, layer_scale);
    register_parameter("layer_scale", scale);
    stochastic_depth_ = register_module("stochastic_depth", std::make_shared<StochasticDepth>(drop_path));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    const Var y = block_->call(t, x);
    const Var scaled = t.op("Mul", {t.parameter(*this, "layer_scale"), y}, {}, y.dtype, y.shape);
    return {t.op("Add", {stochastic_depth_->call(t, scaled), x}, {}, x.dtype, x.shape)};
  }
  std::string type_name() const override { return "CNBlock"; }

 private:
  ModulePtr block_, stochastic_depth_;
};

// torchvision's Conv2dNormActivation (a Sequential: 0 the conv, 1 the norm) for the stem.
class Conv2dNormActivation : public Sequential {
 public:
  using Sequential::Sequential;
  std::string type_name() const override { return "Conv2dNormActivation"; }
};

class ConvNeXt : public Module {
 public:
  explicit ConvNeXt(const ConvNextSpec& spec) : stages_(spec.depths.size()) {
    add_convnext_features(*this, spec);
    avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
    const int64_t last = spec.hidden_sizes.back();
    classifier_ =
        register_module("classifier", std::make_shared<Sequential>(std::vector<ModulePtr>{
                                          make_layer_norm_2d(last), std::make_shared<Flatten>(1),
                                          init_trunc_normal(std::make_shared<Linear>(last, spec.num_labels))}));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var x = run_convnext_features(*this, t, inputs.at(0), stages_ + 1).back();
    return {classifier_->call(t, avgpool_->call(t, x))};
  }
  std::string type_name() const override { return "ConvNeXt"; }

 private:
  size_t stages_;
  ModulePtr avgpool_, classifier_;
};

class ConvNextBackbone : public Backbone {
 public:
  ConvNextBackbone(const ConvNextSpec& spec, const BackboneOptions& options) {
    add_convnext_features(*this, spec);
    const auto names = convnext_stage_names(spec);
    const auto channels = convnext_stage_channels(spec);
    std::map<std::string, int64_t> by_name;
    for (size_t i = 0; i < names.size(); ++i) by_name[names[i]] = channels[i];
    init_backbone(names, by_name, options);
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    return select_outputs(run_convnext_features(*this, t, inputs.at(0), stages_needed()));
  }
  std::string type_name() const override { return "ConvNextBackbone"; }
};

const bool registered = [] {
  ZooEntry e;
  e.name = "convnext_tiny";
  e.description = "ConvNeXt-T (torchvision.models.convnext_tiny)";
  e.default_config = {{"num_channels", 3},      {"hidden_sizes", {96, 192, 384, 768}},
                      {"depths", {3, 3, 9, 3}}, {"layer_scale_init_value", 1e-6},
                      {"drop_path_rate", 0.1},  // torchvision's stochastic_depth_prob for convnext_tiny
                      {"num_labels", 1000}};
  e.create = [](const Config& c) -> ModulePtr { return std::make_shared<ConvNeXt>(convnext_spec(c, "convnext_tiny")); };
  e.example_inputs = [](const Config& c) -> InputShapes {
    return {{"pixel_values", {2, convnext_spec(c, "convnext_tiny").num_channels, 224, 224}}};
  };
  e.dynamic_axes = [](const Config&) -> DynamicAxes {
    return {{"pixel_values", {{0, "batch"}, {2, "height"}, {3, "width"}}}, {"logits", {{0, "batch"}}}};
  };
  register_model(std::move(e));
  register_backbone("convnext_tiny", [](const Config& c, const BackboneOptions& o) -> std::shared_ptr<Backbone> {
    return std::make_shared<ConvNextBackbone>(convnext_spec(c, "convnext_tiny"), o);
  });
  return true;
}();

}  // namespace

ModulePtr make_layer_norm_2d(int64_t channels) { return std::make_shared<LayerNorm2d>(channels); }

ConvNextSpec convnext_spec(const Config& c, const std::string& model) {
  ConvNextSpec s;
  s.num_channels = config_int(c, model, "num_channels");
  s.num_labels = config_int(c, model, "num_labels");
  s.hidden_sizes = config_ints(c, model, "hidden_sizes");
  s.depths = config_ints(c, model, "depths");
  s.layer_scale_init_value = config_double(c, model, "layer_scale_init_value", 0.0, 1e9);
  s.drop_path_rate = config_double(c, model, "drop_path_rate", 0.0, 0.999);
  if (s.hidden_sizes.empty() || s.hidden_sizes.size() != s.depths.size())
    throw InvalidArgument(fmt::format("{} config: hidden_sizes {} and depths {} must be non-empty and of one length",
                                      model, s.hidden_sizes, s.depths));
  return s;
}

void add_convnext_features(Module& m, const ConvNextSpec& s) {
  auto features = std::make_shared<Sequential>();
  features->push_back(std::make_shared<Conv2dNormActivation>(std::vector<ModulePtr>{
      init_trunc_normal(std::make_shared<Conv2d>(Conv2dOptions(s.num_channels, s.hidden_sizes[0], 4).stride(4))),
      make_layer_norm_2d(s.hidden_sizes[0])}));
  int64_t total = 0;
  for (int64_t d : s.depths) total += d;
  int64_t block_id = 0;
  for (size_t i = 0; i < s.depths.size(); ++i) {
    if (i > 0)  // downsampling between stages: LayerNorm2d, then a 2x2 stride-2 conv
      features->push_back(std::make_shared<Sequential>(std::vector<ModulePtr>{
          make_layer_norm_2d(s.hidden_sizes[i - 1]),
          init_trunc_normal(
              std::make_shared<Conv2d>(Conv2dOptions(s.hidden_sizes[i - 1], s.hidden_sizes[i], 2).stride(2)))}));
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < s.depths[i]; ++b, ++block_id) {
      // torchvision: the drop probability grows linearly from 0 over all blocks.
      const double p =
          total > 1 ? s.drop_path_rate * static_cast<double>(block_id) / static_cast<double>(total - 1) : 0.0;
      stage->push_back(std::make_shared<CNBlock>(s.hidden_sizes[i], s.layer_scale_init_value, p));
    }
    features->push_back(stage);
  }
  m.register_module("features", features);
}

std::vector<Var> run_convnext_features(Module& m, Tracer& t, const Var& x, size_t count) {
  auto features = std::dynamic_pointer_cast<Sequential>(m.get_submodule("features"));
  std::vector<Var> outs{(*features)[0]->call(t, x)};
  Var y = outs.back();
  for (size_t i = 1; outs.size() < count; ++i) {
    y = (*features)[i]->call(t, y);
    if (i % 2 == 1) outs.push_back(y);  // odd indices are stages, even ones the downsampling between
  }
  return outs;
}

std::vector<std::string> convnext_stage_names(const ConvNextSpec& s) {
  std::vector<std::string> names{"stem"};
  for (size_t i = 0; i < s.depths.size(); ++i) names.push_back(fmt::format("stage{}", i + 1));
  return names;
}

std::vector<int64_t> convnext_stage_channels(const ConvNextSpec& s) {
  std::vector<int64_t> c{s.hidden_sizes[0]};
  c.insert(c.end(), s.hidden_sizes.begin(), s.hidden_sizes.end());
  return c;
}

}  // namespace vision
}  // namespace kiln::nn::zoo
