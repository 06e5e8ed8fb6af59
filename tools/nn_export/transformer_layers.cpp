// `kiln-nn-export transformer-layers SPEC`: the Kiln side of tests/python/test_nn_transformer.py.
// Builds MultiheadAttention / TransformerEncoderLayer / TransformerDecoderLayer modules from a JSON
// spec, loads torch's state_dict (safetensors) into them and exports each to ONNX, which the Python
// test then runs with `kiln run` and compares against torch.
//
// Spec: {"cases": [{"module": "MultiheadAttention" | "TransformerEncoderLayer" |
//   "TransformerDecoderLayer", "options": {torch's constructor arguments}, "weights": "w.safetensors",
//   "onnx": "out.onnx", "inputs": [{"name", "dtype": "float"|"bool", "shape": [-1 = dynamic],
//   "slots": [forward positions it fills]}], "flags": {need_weights, average_attn_weights,
//   is_causal, tgt_is_causal, memory_is_causal}, "outputs": [names]}]}
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/nn/transformer.h"
#include "kiln/onnx_io.h"
#include "spec_exports.h"

namespace kiln::nn_export {
namespace {

using namespace kiln::nn;
using nlohmann::json;

DType parse_dtype(const std::string& s) {
  if (s == "float") return DType::Float32;
  if (s == "double") return DType::Float64;
  if (s == "bool") return DType::Bool;
  throw InvalidArgument("spec: unknown dtype '" + s + "'");
}

TransformerLayerOptions layer_options(const json& o) {
  TransformerLayerOptions r;
  r.d_model = o.at("d_model");
  r.nhead = o.at("nhead");
  r.dim_feedforward = o.value("dim_feedforward", r.dim_feedforward);
  r.dropout = o.value("dropout", r.dropout);
  r.activation = o.value("activation", r.activation);
  r.layer_norm_eps = o.value("layer_norm_eps", r.layer_norm_eps);
  r.batch_first = o.value("batch_first", r.batch_first);
  r.norm_first = o.value("norm_first", r.norm_first);
  r.bias = o.value("bias", r.bias);
  return r;
}

ModulePtr build(const json& c) {
  const std::string type = c.at("module");
  const json& o = c.at("options");
  if (type == "MultiheadAttention")
    return std::make_shared<MultiheadAttention>(
        MultiheadAttentionOptions{.embed_dim = o.at("embed_dim"),
                                  .num_heads = o.at("num_heads"),
                                  .dropout = o.value("dropout", 0.0),
                                  .bias = o.value("bias", true),
                                  .batch_first = o.value("batch_first", false)});
  if (type == "TransformerEncoderLayer") return std::make_shared<TransformerEncoderLayer>(layer_options(o));
  if (type == "TransformerDecoderLayer") return std::make_shared<TransformerDecoderLayer>(layer_options(o));
  throw InvalidArgument("spec: unknown module '" + type + "'");
}

std::optional<Var> slot(const std::vector<Var>& s, size_t i) {
  return i < s.size() && !s[i].name.empty() ? std::optional<Var>(s[i]) : std::nullopt;
}

std::vector<Var> run_forward(Module& m, Tracer& t, const std::vector<Var>& s, const json& flags) {
  if (auto* mha = dynamic_cast<MultiheadAttention*>(&m)) {
    MultiheadAttentionCall call;
    call.key_padding_mask = slot(s, 3);
    call.attn_mask = slot(s, 4);
    if (flags.contains("need_weights")) call.need_weights = flags["need_weights"].get<bool>();
    if (flags.contains("average_attn_weights")) call.average_attn_weights = flags["average_attn_weights"].get<bool>();
    if (flags.contains("is_causal")) call.is_causal = flags["is_causal"].get<bool>();
    return mha->attend(t, s.at(0), s.at(1), s.at(2), call);
  }
  if (auto* enc = dynamic_cast<TransformerEncoderLayer*>(&m))
    return {enc->apply(t, s.at(0), slot(s, 1), slot(s, 2), flags.value("is_causal", false))};
  auto& dec = dynamic_cast<TransformerDecoderLayer&>(m);
  TransformerDecoderLayer::Masks masks{slot(s, 2), slot(s, 3), slot(s, 4), slot(s, 5), std::nullopt, std::nullopt};
  if (flags.contains("tgt_is_causal")) masks.tgt_is_causal = flags["tgt_is_causal"].get<bool>();
  if (flags.contains("memory_is_causal")) masks.memory_is_causal = flags["memory_is_causal"].get<bool>();
  return {dec.apply(t, s.at(0), s.at(1), masks)};
}

}  // namespace

void export_transformer_layer(const json& c) {
  ModulePtr m = build(c);
  m->load_safetensors(c.at("weights").get<std::string>());
  m->train(c.value("train", false));
  Tracer t;
  std::vector<Var> slots;
  for (const json& in : c.at("inputs")) {
    const std::vector<int64_t> shape = in.at("shape");
    std::map<int64_t, std::string> names;
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] < 0) names[static_cast<int64_t>(i)] = in.at("name").get<std::string>() + "_d" + std::to_string(i);
    const Var v = t.input(in.at("name"), parse_dtype(in.at("dtype")), shape, names);
    for (size_t k : in.at("slots").get<std::vector<size_t>>()) {
      if (slots.size() <= k) slots.resize(k + 1, Tracer::none());
      slots[k] = v;
    }
  }
  const std::vector<Var> out = run_forward(*m, t, slots, c.value("flags", json::object()));
  const std::vector<std::string> names = c.at("outputs");
  if (names.size() != out.size())
    throw InvalidArgument("spec: " + std::to_string(names.size()) + " output names for " + std::to_string(out.size()) +
                          " outputs");
  for (size_t i = 0; i < out.size(); ++i) t.output(out[i], names[i]);
  save_model(t.finish(), c.at("onnx").get<std::string>());
}

}  // namespace kiln::nn_export
