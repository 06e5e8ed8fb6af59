// A whole graph in 16 bits (to_low_precision.h).
#include "ir/to_low_precision.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/autocast.h"
#include "ir/graph_editor.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// A float32 tensor rounded to `low` (nearest even).
Tensor rounded(const Tensor& t, DType low) {
  const Tensor src = t.contiguous();
  Tensor out = Tensor::empty(low, src.shape());
  const float* p = src.data<float>();
  for (int64_t i = 0; i < src.numel(); ++i) {
    if (low == DType::BFloat16) out.data<BFloat16>()[i] = float_to_bfloat16(p[i]);
    else out.data<Half>()[i] = float_to_half(p[i]);
  }
  return out;
}

// Inputs ONNX requires to be float32 whatever the data's type.
bool float32_only(const Node& n, size_t input) {
  if (!n.domain.empty()) return false;
  if (n.op_type == "Resize") return input == 1 || input == 2;  // roi, scales
  if (n.op_type == "Upsample") return input == 1;              // scales
  return false;
}

// Values that stay float32: those at float32_only positions, and the float32 inputs of nodes all
// of whose outputs stay float32 (the computation of a Resize's scales, say).
std::set<std::string> pinned_values(const Graph& g) {
  std::set<std::string> pinned;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    const Node& n = *it;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && float32_only(n, i)) pinned.insert(n.inputs[i]);
    bool all = !n.outputs.empty();
    for (const auto& o : n.outputs) all = all && (o.empty() || pinned.count(o));
    if (all)
      for (const auto& v : n.inputs)
        if (!v.empty()) pinned.insert(v);
  }
  return pinned;
}

bool is_float_code(int64_t code) { return code == dtype_to_onnx(DType::Float32); }

// Node attributes that make float32 values: Cast's `to`, the constants' values, the generators'
// `dtype`. Returns whether the node changed.
bool retype_attributes(Node& n, DType low) {
  if (!n.domain.empty()) return false;
  const int64_t low_code = dtype_to_onnx(low);
  bool changed = false;
  if (n.op_type == "Cast") {
    if (auto it = n.attrs.find("to"); it != n.attrs.end() && is_float_code(it->second.i)) {
      it->second.i = low_code;
      changed = true;
    }
  } else if (n.op_type == "Constant" || n.op_type == "ConstantOfShape") {
    if (auto it = n.attrs.find("value");
        it != n.attrs.end() && it->second.kind == Attribute::Kind::Tensor && it->second.t.dtype() == DType::Float32) {
      it->second.t = rounded(it->second.t, low);
      changed = true;
    } else if (auto f = n.attrs.find("value_float"); f != n.attrs.end()) {
      const Tensor value = rounded(Tensor::scalar<float>(f->second.f), low);
      n.attrs.erase(f);
      n.attrs["value"] = Attribute::of_tensor(value);
      changed = true;
    } else if (n.op_type == "ConstantOfShape" && it == n.attrs.end()) {  // the default value is float32 0
      n.attrs["value"] = Attribute::of_tensor(rounded(Tensor::zeros(DType::Float32, {1}), low));
      changed = true;
    }
  } else if (n.op_type == "RandomNormal" || n.op_type == "RandomUniform" || n.op_type == "EyeLike" ||
             n.op_type == "RandomNormalLike" || n.op_type == "RandomUniformLike" || n.op_type == "Bernoulli") {
    auto it = n.attrs.find("dtype");
    const bool float_by_default = n.op_type == "RandomNormal" || n.op_type == "RandomUniform";
    if ((it == n.attrs.end() && float_by_default) || (it != n.attrs.end() && is_float_code(it->second.i))) {
      n.attrs["dtype"] = Attribute::of_int(low_code);
      changed = true;
    }
  }
  return changed;
}

}  // namespace

size_t to_low_precision(Model& model, DType low) {
  if (low != DType::BFloat16 && low != DType::Float16)
    throw Unsupported(fmt::format("a whole graph in {}: Kiln runs graphs in bfloat16 or float16", dtype_name(low)));
  if (model.metadata.count(kMixedPrecisionKey))
    throw InvalidArgument(fmt::format(
        "the graph '{}' already computes its products in {} (mixed precision); cast the float32 graph instead",
        model.graph.name, model.metadata.at(kMixedPrecisionKey)));
  const std::string tag = low == DType::BFloat16 ? "bf16" : "fp16";
  Graph& g = model.graph;
  const std::set<std::string> pinned = pinned_values(g);
  auto converts = [&](const std::string& v) {
    return !v.empty() && !pinned.count(v) && declared_dtype(g, v) == DType::Float32;
  };
  GraphEditor edit(model);
  size_t changed = 0;

  // float32 graph outputs: their producers write a 16-bit copy, cast back at the end.
  std::map<std::string, std::string> output_rename;
  std::vector<Node> tail;
  std::set<std::string> input_names;
  for (const ValueInfo& v : g.inputs) input_names.insert(v.name);
  for (const ValueInfo& v : g.outputs) {
    if (!converts(v.name) || input_names.count(v.name) || g.initializers.count(v.name)) continue;
    const std::string low_name = edit.fresh(v.name + "/" + tag);
    output_rename[v.name] = low_name;
    tail.push_back(cast_node(edit.fresh(v.name + "/to_float"), low_name, v.name, DType::Float32));
  }
  // float32 graph inputs: cast once, up front; constants: rounded in place.
  std::map<std::string, std::string> input_rename;
  std::vector<Node> nodes;
  for (const ValueInfo& v : g.inputs) {
    if (!converts(v.name) || g.initializers.count(v.name)) continue;
    const std::string low_name = edit.fresh(v.name + "/" + tag);
    input_rename[v.name] = low_name;
    nodes.push_back(cast_node(edit.fresh(v.name + "/to_" + tag), v.name, low_name, low));
    ++changed;
  }
  for (auto& [name, t] : g.initializers) {
    if (!converts(name) || input_names.count(name)) continue;
    t = rounded(t, low);
    ++changed;
  }
  for (Node& n : g.nodes) {
    for (auto& v : n.inputs) {
      if (const auto it = input_rename.find(v); it != input_rename.end()) v = it->second;
      else if (const auto o = output_rename.find(v); o != output_rename.end()) v = o->second;
    }
    bool outputs_pinned = true;
    for (const auto& o : n.outputs) outputs_pinned = outputs_pinned && (o.empty() || pinned.count(o));
    if (!outputs_pinned && retype_attributes(n, low)) ++changed;
    for (auto& v : n.outputs) {
      if (converts(v)) ++changed;
      if (const auto it = output_rename.find(v); it != output_rename.end()) v = it->second;
    }
    nodes.push_back(std::move(n));
  }
  for (Node& c : tail) nodes.push_back(std::move(c));
  g.nodes = std::move(nodes);
  // The hints of the values that changed type are stale: shape inference finds them again.
  std::erase_if(g.value_info, [&](const ValueInfo& v) { return v.has_type && v.dtype == DType::Float32; });
  model.metadata[kFullPrecisionKey] = tag;
  return changed;
}

size_t store_initializers_in(Model& model, DType low) {
  if (low != DType::BFloat16 && low != DType::Float16)
    throw Unsupported(fmt::format("initializers in {}: Kiln stores them in bfloat16 or float16", dtype_name(low)));
  Graph& g = model.graph;
  GraphEditor edit(model);
  const std::string tag = low == DType::BFloat16 ? "bf16" : "fp16";
  std::map<std::string, std::string> stored;  // float32 name -> its 16-bit initializer
  std::vector<Node> casts;
  std::map<std::string, Tensor> initializers;
  for (auto& [name, t] : g.initializers) {
    if (t.dtype() != DType::Float32) {
      initializers.emplace(name, t);
      continue;
    }
    const std::string low_name = edit.fresh(name + "/" + tag);
    initializers.emplace(low_name, rounded(t, low));
    stored[name] = low_name;
    casts.push_back(cast_node(edit.fresh(name + "/to_float"), low_name, name, DType::Float32));
  }
  g.initializers = std::move(initializers);
  std::erase_if(g.inputs, [&](const ValueInfo& v) { return stored.count(v.name) != 0; });  // IR < 4 lists them
  for (Node& n : g.nodes) casts.push_back(std::move(n));
  g.nodes = std::move(casts);
  return stored.size();
}

}  // namespace kiln
