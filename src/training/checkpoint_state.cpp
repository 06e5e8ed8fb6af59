// CheckpointState, Parameter and PropertyBag, and the checkpoint file (docs/checkpoint.md): a
// safetensors file holding the parameters, optionally the optimizer's slot tensors, and JSON
// metadata for everything else (checkpoint_format.h).
#include <fmt/format.h>

#include <set>

#include "kiln/checkpoint.h"
#include "kiln/safetensors.h"
#include "kiln/version.h"
#include "training/checkpoint_format.h"

namespace kiln::training {

namespace format = checkpoint_format;

// ---------------------------------------------------------------------------------- Parameter

Parameter::Parameter(std::string name, Tensor data, bool requires_grad)
    : name_(std::move(name)), requires_grad_(requires_grad) {
  if (!data.defined())
    throw InvalidArgument(
        fmt::format("parameter '{}': the data tensor is undefined (use Parameter::nominal for a "
                    "parameter without data)",
                    name_));
  dtype_ = data.dtype();
  shape_ = data.shape();
  data_ = std::move(data);  // shared, not copied: the caller's tensor is the parameter
}

Parameter Parameter::nominal(std::string name, DType dtype, Shape shape, bool requires_grad) {
  for (int64_t d : shape)
    if (d < 0) throw ShapeError(fmt::format("parameter '{}': negative dimension in shape {}", name, to_string(shape)));
  Parameter p;
  p.name_ = std::move(name);
  p.dtype_ = dtype;
  p.shape_ = std::move(shape);
  p.requires_grad_ = requires_grad;
  return p;
}

const Tensor& Parameter::data() const {
  if (!data_.defined())
    throw InvalidArgument(
        fmt::format("parameter '{}' ({}{}) has no data: it comes from a nominal checkpoint; "
                    "load a full checkpoint or call set_data",
                    name_, dtype_name(dtype_), to_string(shape_)));
  return data_;
}

Tensor& Parameter::data() { return const_cast<Tensor&>(static_cast<const Parameter&>(*this).data()); }

void Parameter::set_data(const Tensor& value) {
  if (!value.defined()) throw InvalidArgument(fmt::format("parameter '{}': set_data with an undefined tensor", name_));
  if (value.dtype() != dtype_)
    throw TypeError(fmt::format("parameter '{}' is {}{}; set_data was given {}", name_, dtype_name(dtype_),
                                to_string(shape_), value.describe()));
  if (value.shape() != shape_)
    throw ShapeError(fmt::format("parameter '{}' has shape {}; set_data was given shape {}", name_, to_string(shape_),
                                 to_string(value.shape())));
  // Copy into the existing buffer: modules hold views of it and must see the new values.
  if (!data_.defined()) data_ = Tensor::empty(dtype_, shape_);
  data_.copy_from(value);
}

// -------------------------------------------------------------------------------- PropertyBag

const PropertyValue& PropertyBag::get(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) {
    std::string known;
    for (const auto& entry : values_) known += (known.empty() ? "" : ", ") + entry.first;
    throw KeyError(
        fmt::format("no property '{}' in the checkpoint (properties: {})", name, known.empty() ? "none" : known));
  }
  return it->second;
}

namespace {
template <class T>
constexpr const char* kPropertyTypeName = "";
template <>
constexpr const char* kPropertyTypeName<int64_t> = "int64";
template <>
constexpr const char* kPropertyTypeName<float> = "float";
template <>
constexpr const char* kPropertyTypeName<std::string> = "string";

const char* property_type_name(const PropertyValue& v) {
  return std::visit([](const auto& x) { return kPropertyTypeName<std::decay_t<decltype(x)>>; }, v);
}
}  // namespace

template <class T>
const T& PropertyBag::get_as(const std::string& name) const {
  const PropertyValue& v = get(name);
  if (const T* p = std::get_if<T>(&v)) return *p;
  throw TypeError(fmt::format("property '{}' is {}, read as {}", name, property_type_name(v), kPropertyTypeName<T>));
}
template const int64_t& PropertyBag::get_as<int64_t>(const std::string&) const;
template const float& PropertyBag::get_as<float>(const std::string&) const;
template const std::string& PropertyBag::get_as<std::string>(const std::string&) const;

void PropertyBag::set(const std::string& name, PropertyValue value) { values_[name] = std::move(value); }

// ---------------------------------------------------------------------------- CheckpointState

Parameter& CheckpointState::parameter(const std::string& name) {
  return const_cast<Parameter&>(static_cast<const CheckpointState&>(*this).parameter(name));
}

const Parameter& CheckpointState::parameter(const std::string& name) const {
  const auto it = parameters_.find(name);
  if (it == parameters_.end())
    throw KeyError(fmt::format("no parameter '{}' in the checkpoint ({} parameters{})", name, parameters_.size(),
                               order_.empty() ? "" : ", first '" + order_.front() + "'"));
  return it->second;
}

void CheckpointState::add_parameter(Parameter p) {
  if (parameters_.count(p.name()) != 0)
    throw InvalidArgument(fmt::format("the checkpoint already has a parameter named '{}'", p.name()));
  order_.push_back(p.name());
  std::string name = p.name();
  parameters_.emplace(std::move(name), std::move(p));
}

bool CheckpointState::is_nominal() const {
  for (const auto& entry : parameters_)
    if (entry.second.has_data()) return false;
  return true;
}

namespace {

// parameter_names() order, then any parameter inserted into parameters() directly; every map key
// must be its parameter's name, because the file stores the name once.
std::vector<const Parameter*> ordered_parameters(const std::map<std::string, Parameter>& params,
                                                 const std::vector<std::string>& order) {
  std::vector<const Parameter*> out;
  std::set<std::string> placed;
  auto place = [&](const std::string& key) {
    const auto it = params.find(key);
    if (it == params.end() || !placed.insert(key).second) return;
    if (it->second.name() != key)
      throw InvalidArgument(
          fmt::format("save_checkpoint: parameters()['{}'] holds a parameter named '{}'", key, it->second.name()));
    out.push_back(&it->second);
  };
  for (const std::string& name : order) place(name);
  for (const auto& entry : params) place(entry.first);
  return out;
}

}  // namespace

void CheckpointState::save_checkpoint(const CheckpointState& state, const std::string& path,
                                      bool include_optimizer_state) {
  const std::vector<const Parameter*> params = ordered_parameters(state.parameters_, state.order_);
  const bool nominal = state.is_nominal();
  std::vector<std::string> trainable, frozen;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<format::NominalEntry> nominal_entries;
  for (const Parameter* p : params) {
    (p->requires_grad() ? trainable : frozen).push_back(p->name());
    if (nominal) {
      nominal_entries.push_back({p->name(), p->dtype(), p->shape()});
    } else if (!p->has_data()) {
      throw InvalidArgument(
          fmt::format("save_checkpoint('{}'): parameter '{}' has no data while others have; a "
                      "checkpoint holds all parameters' data or none (nominal)",
                      path, p->name()));
    } else {
      tensors.emplace_back(p->name(), p->data());
    }
  }

  std::map<std::string, std::string> metadata = {
      {format::kFormatKey, format::kFormatValue},
      {format::kVersionKey, kVersion},
      {format::kTrainableKey, format::encode_names(trainable)},
      {format::kFrozenKey, format::encode_names(frozen)},
      {format::kPropertiesKey, format::encode_properties(state.properties_)},
  };
  if (nominal) metadata[format::kNominalKey] = format::encode_nominal(nominal_entries);

  const OptimizerState& opt = state.optimizer_;
  if (include_optimizer_state && !opt.empty()) {
    for (const auto& [slot, per_param] : opt.slots) {
      if (slot.empty() || slot.find('.') != std::string::npos)
        throw InvalidArgument(
            fmt::format("save_checkpoint('{}'): optimizer slot name '{}' must be non-empty and "
                        "without '.'",
                        path, slot));
      for (const auto& [param, tensor] : per_param) {
        if (state.parameters_.count(param) == 0)
          throw InvalidArgument(
              fmt::format("save_checkpoint('{}'): optimizer slot '{}' has a tensor for '{}', which "
                          "is not a parameter",
                          path, slot, param));
        if (!tensor.defined())
          throw InvalidArgument(
              fmt::format("save_checkpoint('{}'): optimizer slot '{}' of parameter '{}' is "
                          "undefined",
                          path, slot, param));
        if (nominal)
          throw InvalidArgument(
              fmt::format("save_checkpoint('{}'): the parameters have no data (nominal) but "
                          "optimizer slot '{}' of '{}' has; save without the optimizer state",
                          path, slot, param));
      }
      for (const Parameter* p : params) {  // parameter order, as the parameters themselves
        const auto it = per_param.find(p->name());
        if (it == per_param.end()) continue;
        const std::string key = format::optimizer_tensor_name(slot, p->name());
        if (state.parameters_.count(key) != 0)
          throw InvalidArgument(
              fmt::format("save_checkpoint('{}'): parameter '{}' has the name of optimizer slot "
                          "'{}' of parameter '{}'; rename the parameter",
                          path, key, slot, p->name()));
        tensors.emplace_back(key, it->second);
      }
    }
    metadata[format::kOptimizerKey] = format::encode_optimizer(opt);
  }
  write_safetensors(path, tensors, metadata);
}

namespace {

[[noreturn]] void not_a_checkpoint(const std::string& path, const std::string& what) {
  throw CorruptFile(fmt::format("'{}' is not a valid Kiln checkpoint: {}", path, what));
}

const std::string* find_meta(const std::map<std::string, std::string>& meta, const std::string& key) {
  const auto it = meta.find(key);
  return it == meta.end() ? nullptr : &it->second;
}

}  // namespace

CheckpointState CheckpointState::load_checkpoint(const std::string& path) {
  return from_file(read_safetensors(path), path);
}

CheckpointState CheckpointState::load_checkpoint_from_buffer(std::string_view bytes) {
  return from_file(parse_safetensors(bytes, "checkpoint buffer"), "checkpoint buffer");
}

CheckpointState CheckpointState::from_file(SafetensorsFile file, const std::string& path) {
  const auto& meta = file.metadata;
  const std::string* fmt_value = find_meta(meta, format::kFormatKey);
  if (fmt_value == nullptr || *fmt_value != format::kFormatValue)
    not_a_checkpoint(path, fmt::format("it is a safetensors file but its metadata has {} instead of \"format\": "
                                       "\"kiln.checkpoint\"",
                                       fmt_value == nullptr ? "no \"format\"" : "\"format\": \"" + *fmt_value + "\""));
  for (const char* key : {format::kTrainableKey, format::kFrozenKey})
    if (find_meta(meta, key) == nullptr) not_a_checkpoint(path, fmt::format("its metadata has no \"{}\"", key));

  // name -> requires_grad, from the two lists.
  std::map<std::string, bool> listed;
  for (const auto& [key, trainable] : {std::pair{format::kTrainableKey, true}, std::pair{format::kFrozenKey, false}})
    for (const std::string& name : format::decode_names(*find_meta(meta, key), key, path))
      if (!listed.emplace(name, trainable).second)
        not_a_checkpoint(path,
                         fmt::format("parameter '{}' is listed in both \"kiln.trainable\" and \"kiln.frozen\"", name));

  CheckpointState state;
  if (const std::string* props = find_meta(meta, format::kPropertiesKey))
    state.properties_ = format::decode_properties(*props, path);
  format::OptimizerHeader opt;
  if (const std::string* o = find_meta(meta, format::kOptimizerKey)) opt = format::decode_optimizer(*o, path);

  if (const std::string* nominal = find_meta(meta, format::kNominalKey)) {
    if (!file.tensors.empty())
      not_a_checkpoint(
          path, fmt::format("it is nominal (\"kiln.nominal\") yet holds tensor '{}'", file.tensors.front().first));
    for (format::NominalEntry& e : format::decode_nominal(*nominal, path)) {
      const auto it = listed.find(e.name);
      if (it == listed.end())
        not_a_checkpoint(path, fmt::format("\"kiln.nominal\" describes '{}', which neither \"kiln.trainable\" nor "
                                           "\"kiln.frozen\" lists",
                                           e.name));
      state.add_parameter(Parameter::nominal(e.name, e.dtype, std::move(e.shape), it->second));
    }
  } else {
    for (auto& [name, tensor] : file.tensors) {
      if (const auto it = listed.find(name); it != listed.end()) {
        state.add_parameter(Parameter(name, std::move(tensor), it->second));
        continue;
      }
      bool is_slot = false;
      for (const std::string& slot : opt.slots) {
        const std::string prefix = format::optimizer_tensor_name(slot, "");
        if (name.rfind(prefix, 0) != 0 || listed.count(name.substr(prefix.size())) == 0) continue;
        state.optimizer_.slots[slot][name.substr(prefix.size())] = std::move(tensor);
        is_slot = true;
        break;
      }
      if (!is_slot)
        not_a_checkpoint(path, fmt::format("tensor '{}' is neither a parameter listed in \"kiln.trainable\" / "
                                           "\"kiln.frozen\" nor an optimizer slot of one",
                                           name));
    }
  }
  for (const auto& [name, trainable] : listed)
    if (state.parameters_.count(name) == 0)
      not_a_checkpoint(path, fmt::format("parameter '{}' is listed in \"{}\" but the file has no {} for it", name,
                                         trainable ? format::kTrainableKey : format::kFrozenKey,
                                         find_meta(meta, format::kNominalKey) ? "\"kiln.nominal\" entry" : "tensor"));

  if (!opt.type.empty()) {
    state.optimizer_.type = opt.type;
    state.optimizer_.step = opt.step;
    state.optimizer_.learning_rate = opt.learning_rate;
    for (const std::string& slot : opt.slots) state.optimizer_.slots[slot];  // a slot with no tensors yet stays
  }
  return state;
}

}  // namespace kiln::training
