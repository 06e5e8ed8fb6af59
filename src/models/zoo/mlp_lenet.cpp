// The zoo's small models, the Trainer's historical built-ins: an MLP (Flatten + Linear/ReLU stack)
// and LeNet-5 with BatchNorm, with the built-ins' parameter names (fc1, conv1, bn1, ...) and torch's
// default initialisation. Input "input" [B, 1, 28, 28] by default, output "logits".
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/error.h"
#include "kiln/nn/layers.h"
#include "models/zoo/vision.h"

namespace kiln::nn::zoo::vision {
namespace {

// The per-example input shape of the MLP: `input_shape` (null: [input_size]), whose element count
// must be input_size (Flatten feeds fc1).
std::vector<int64_t> mlp_input_shape(const Config& c) {
  const int64_t size = config_int(c, "mlp", "input_size");
  if (!c.contains("input_shape") || c.at("input_shape").is_null()) return {size};
  std::vector<int64_t> shape = config_ints(c, "mlp", "input_shape");
  const int64_t n = numel(shape);  // checked: negative or huge dims are a ShapeError
  if (shape.empty() || n != size)
    throw InvalidArgument(
        fmt::format("mlp config: input_shape {} has {} elements but input_size is {}; set both (or "
                    "input_shape null for [input_size])",
                    shape, n, size));
  return shape;
}

class MLP : public Module {
 public:
  explicit MLP(const Config& c) {
    flatten_ = register_module("flatten", std::make_shared<Flatten>());
    int64_t in = config_int(c, "mlp", "input_size");
    const std::vector<int64_t> hidden = config_ints(c, "mlp", "hidden_sizes");
    for (size_t i = 0; i <= hidden.size(); ++i) {
      const int64_t out = i < hidden.size() ? hidden[i] : config_int(c, "mlp", "num_labels");
      fc_.push_back(register_module(fmt::format("fc{}", i + 1), std::make_shared<Linear>(in, out)));
      in = out;
    }
    relu_ = register_module("relu", std::make_shared<ReLU>());
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    Var x = flatten_->call(t, inputs.at(0));
    for (size_t i = 0; i < fc_.size(); ++i) {
      x = fc_[i]->call(t, x);
      if (i + 1 < fc_.size()) x = relu_->call(t, x);
    }
    return {x};
  }
  std::string type_name() const override { return "MLP"; }

 private:
  ModulePtr flatten_, relu_;
  std::vector<ModulePtr> fc_;
};

// conv1 (5x5, pad 2) -> bn1 -> relu -> pool -> conv2 (5x5) -> bn2 -> relu -> pool -> fc1 -> relu
// -> fc2 -> relu -> fc3.
class LeNet : public Module {
 public:
  LeNet(int64_t channels, int64_t image_size, int64_t labels) {
    const int64_t side = (image_size / 2 - 4) / 2;  // after conv1 (same size), pool, conv2 (-4), pool
    if (side < 1)
      throw InvalidArgument(
          fmt::format("lenet config: image_size {} is too small (LeNet needs at least 12)", image_size));
    conv1_ = register_module("conv1", std::make_shared<Conv2d>(Conv2dOptions(channels, 6, 5).padding(2)));
    bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(6));
    conv2_ = register_module("conv2", std::make_shared<Conv2d>(6, 16, 5));
    bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(16));
    fc1_ = register_module("fc1", std::make_shared<Linear>(16 * side * side, 120));
    fc2_ = register_module("fc2", std::make_shared<Linear>(120, 84));
    fc3_ = register_module("fc3", std::make_shared<Linear>(84, labels));
    relu_ = register_module("relu", std::make_shared<ReLU>());
    pool_ = register_module("pool", std::make_shared<MaxPool2d>(2));
    flatten_ = register_module("flatten", std::make_shared<Flatten>());
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    Var x = pool_->call(t, relu_->call(t, bn1_->call(t, conv1_->call(t, inputs.at(0)))));
    x = pool_->call(t, relu_->call(t, bn2_->call(t, conv2_->call(t, x))));
    x = relu_->call(t, fc1_->call(t, flatten_->call(t, x)));
    x = relu_->call(t, fc2_->call(t, x));
    return {fc3_->call(t, x)};
  }
  std::string type_name() const override { return "LeNet"; }

 private:
  ModulePtr conv1_, bn1_, conv2_, bn2_, fc1_, fc2_, fc3_, relu_, pool_, flatten_;
};

const bool registered = [] {
  ZooEntry mlp;
  mlp.name = "mlp";
  mlp.description = "Flatten -> Linear/ReLU stack (default: Linear(784, 128) -> ReLU -> Linear(128, 10))";
  mlp.default_config = {{"input_size", 784}, {"input_shape", {1, 28, 28}}, {"hidden_sizes", {128}}, {"num_labels", 10}};
  mlp.create = [](const Config& c) -> ModulePtr {
    mlp_input_shape(c);  // validates input_shape against input_size
    return std::make_shared<MLP>(c);
  };
  mlp.example_inputs = [](const Config& c) -> InputShapes {
    std::vector<int64_t> shape{2};
    for (int64_t d : mlp_input_shape(c)) shape.push_back(d);
    return {{"input", shape}};
  };
  register_model(std::move(mlp));

  ZooEntry lenet;
  lenet.name = "lenet";
  lenet.description = "LeNet-5 with BatchNorm after each convolution";
  lenet.default_config = {{"num_channels", 1}, {"image_size", 28}, {"num_labels", 10}};
  lenet.create = [](const Config& c) -> ModulePtr {
    return std::make_shared<LeNet>(config_int(c, "lenet", "num_channels"), config_int(c, "lenet", "image_size"),
                                   config_int(c, "lenet", "num_labels"));
  };
  lenet.example_inputs = [](const Config& c) -> InputShapes {
    const int64_t side = config_int(c, "lenet", "image_size");
    return {{"input", {2, config_int(c, "lenet", "num_channels"), side, side}}};
  };
  register_model(std::move(lenet));
  return true;
}();

}  // namespace
}  // namespace kiln::nn::zoo::vision
