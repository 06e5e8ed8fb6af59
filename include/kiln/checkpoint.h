// CheckpointState: the parameters, optimizer state and user properties of a training run, as ONNX
// Runtime's on-device training API names them, stored in one safetensors file.
//
//   auto state = kiln::training::CheckpointState::load_checkpoint("artifacts/checkpoint");
//   state.parameters().at("fc.weight").data();                    // a Tensor
//   state.properties().set("epoch", int64_t{3});
//   kiln::training::CheckpointState::save_checkpoint(state, "run/checkpoint", true);
//
// File layout (docs/checkpoint.md): a safetensors file whose tensors are the parameters under their
// ONNX names and, when the optimizer state is included, "optimizer.<slot>.<parameter>" (slots:
// exp_avg, exp_avg_sq for AdamW; momentum_buffer for SGD). The metadata holds, as JSON strings:
// "kiln.trainable" and "kiln.frozen" (parameter names in order), "kiln.properties" (name -> int,
// float or string), "kiln.optimizer" ({"type", "step", "learning_rate", "slots"}) and, for a nominal
// checkpoint, "kiln.nominal" (name -> {"dtype", "shape"}; no tensor data). Files are written
// atomically: a process killed while saving leaves the previous file or the new one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/safetensors.h"
#include "kiln/tensor.h"

namespace kiln::training {

using PropertyValue = std::variant<int64_t, float, std::string>;

// A model parameter: its value, its accumulated gradient (undefined until a training call has
// produced one) and whether the optimizer updates it.
class Parameter {
 public:
  Parameter() = default;
  Parameter(std::string name, Tensor data, bool requires_grad);
  // For a nominal checkpoint: the dtype and shape are known, the data is not.
  static Parameter nominal(std::string name, DType dtype, Shape shape, bool requires_grad);

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  bool requires_grad() const { return requires_grad_; }
  bool has_data() const { return data_.defined(); }

  // Throws InvalidArgument naming the parameter when it has no data (nominal checkpoint).
  const Tensor& data() const;
  Tensor& data();
  // Copies `value` into the parameter (allocating it for a nominal one). Throws ShapeError /
  // TypeError naming the parameter and both shapes or dtypes when they differ.
  void set_data(const Tensor& value);

  const Tensor& grad() const { return grad_; }
  Tensor& grad() { return grad_; }

 private:
  std::string name_;
  DType dtype_ = DType::Float32;
  Shape shape_;
  bool requires_grad_ = true;
  Tensor data_;
  Tensor grad_;
};

// Named int64 / float / string values kept with the checkpoint (epoch, best metric, run name).
class PropertyBag {
 public:
  // Throws KeyError naming the property when absent.
  const PropertyValue& get(const std::string& name) const;
  template <class T>
  const T& get_as(const std::string& name) const;  // TypeError when the stored type differs
  void set(const std::string& name, PropertyValue value);
  bool contains(const std::string& name) const { return values_.count(name) != 0; }
  bool erase(const std::string& name) { return values_.erase(name) != 0; }
  size_t size() const { return values_.size(); }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }

 private:
  std::map<std::string, PropertyValue> values_;
};

// What an optimizer carries between steps. `slots` maps a slot name ("exp_avg") to the tensors of
// each parameter that has one.
struct OptimizerState {
  std::string type;                                            // "AdamW", "SGD"; empty: no optimizer state
  int64_t step = 0;                                            // optimizer steps taken
  float learning_rate = 0;                                     // the current learning rate
  std::map<std::string, std::map<std::string, Tensor>> slots;  // slot -> parameter -> tensor
  bool empty() const { return type.empty(); }
};

class CheckpointState {
 public:
  CheckpointState() = default;

  // Throws IOError when the file cannot be read and CorruptFile (naming the file and the byte
  // offset or key) when it is truncated, corrupted or not a Kiln checkpoint.
  static CheckpointState load_checkpoint(const std::string& path);
  // The same from a checkpoint file's bytes (ONNX Runtime's LoadCheckpointFromBuffer).
  static CheckpointState load_checkpoint_from_buffer(std::string_view bytes);
  static void save_checkpoint(const CheckpointState& state, const std::string& path,
                              bool include_optimizer_state = false);

  // Parameters by name; `parameter_names()` keeps the checkpoint's order.
  std::map<std::string, Parameter>& parameters() { return parameters_; }
  const std::map<std::string, Parameter>& parameters() const { return parameters_; }
  const std::vector<std::string>& parameter_names() const { return order_; }
  // Throws KeyError naming the parameter when absent.
  Parameter& parameter(const std::string& name);
  const Parameter& parameter(const std::string& name) const;
  void add_parameter(Parameter p);  // InvalidArgument when the name is taken

  PropertyBag& properties() { return properties_; }
  const PropertyBag& properties() const { return properties_; }

  OptimizerState& optimizer_state() { return optimizer_; }
  const OptimizerState& optimizer_state() const { return optimizer_; }

  // True when no parameter has data (a nominal checkpoint, as generated with nominal_checkpoint).
  bool is_nominal() const;

 private:
  static CheckpointState from_file(SafetensorsFile file, const std::string& source);
  std::map<std::string, Parameter> parameters_;
  std::vector<std::string> order_;
  PropertyBag properties_;
  OptimizerState optimizer_;
};

}  // namespace kiln::training
