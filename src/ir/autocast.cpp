// Mixed precision's graph pass (autocast.h).
#include "ir/autocast.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph_editor.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr const char* kOperandSuffixes[] = {"/autocast_bf16", "/autocast_fp16"};
constexpr const char* kResultSuffix = "/autocast_float";

// "bf16" or "fp16": the metadata value, and the suffix of the names autocast gives.
const char* short_name(DType low) { return low == DType::BFloat16 ? "bf16" : "fp16"; }

// The products and which of their inputs are cast: operands, and the bias of Gemm and the
// convolutions (summed into the product's accumulator). Attention's mask and bias stay float32.
const std::vector<size_t>* cast_inputs(const Node& n) {
  static const std::map<std::pair<std::string, std::string>, std::vector<size_t>> kProducts = {
      {{"", "MatMul"}, {0, 1}},
      {{"", "Gemm"}, {0, 1, 2}},
      {{"", "Conv"}, {0, 1, 2}},
      {{"", "ConvTranspose"}, {0, 1, 2}},
      {{kKilnDomain, "FusedMatMul"}, {0, 1}},
      {{kKilnDomain, "Attention"}, {0, 1, 2}},
  };
  const auto it = kProducts.find({n.domain, n.op_type});
  return it == kProducts.end() ? nullptr : &it->second;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Only the products' first outputs are cast back; Attention's second output (the probabilities it
// keeps for its gradient) is read only by that gradient, in bfloat16.
bool eligible(const Graph& g, const Node& n) {
  const std::vector<size_t>* which = cast_inputs(n);
  if (which == nullptr || n.outputs.empty() || n.outputs[0].empty()) return false;
  if (declared_dtype(g, n.outputs[0]) != DType::Float32) return false;
  for (size_t i : *which)
    if (i < n.inputs.size() && !n.inputs[i].empty() && declared_dtype(g, n.inputs[i]) != DType::Float32) return false;
  return true;
}

}  // namespace

size_t autocast(Model& model, DType low) {
  if (low != DType::BFloat16 && low != DType::Float16)
    throw Unsupported(
        fmt::format("mixed precision in {}: Kiln's autocast supports bfloat16 and float16", dtype_name(low)));
  const std::string tag = short_name(low);
  Graph& g = model.graph;
  GraphEditor edit(model);
  std::map<std::string, std::string> low_copy;  // float32 value -> its bfloat16 Cast
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  size_t rewritten = 0;
  for (Node& n : g.nodes) {
    if (!eligible(g, n)) {
      nodes.push_back(std::move(n));
      continue;
    }
    for (size_t i : *cast_inputs(n)) {
      if (i >= n.inputs.size() || n.inputs[i].empty()) continue;
      const std::string& v = n.inputs[i];
      auto it = low_copy.find(v);
      if (it == low_copy.end()) {
        const std::string out = edit.fresh(v + "/" + tag);
        nodes.push_back(cast_node(edit.fresh(v + "/autocast_" + tag), v, out, low));
        it = low_copy.emplace(v, out).first;
      }
      n.inputs[i] = it->second;
    }
    const std::string result = n.outputs[0];
    n.outputs[0] = edit.fresh(result + "/" + tag);
    const std::string low_result = n.outputs[0];
    nodes.push_back(std::move(n));
    nodes.push_back(cast_node(edit.fresh(result + kResultSuffix), low_result, result, DType::Float32));
    ++rewritten;
  }
  g.nodes = std::move(nodes);
  if (rewritten > 0) model.metadata[kMixedPrecisionKey] = tag;
  return rewritten;
}

size_t strip_autocast(Model& model) {
  Graph& g = model.graph;
  std::map<std::string, std::string> operand;  // bfloat16 copy -> the float32 value it copies
  std::map<std::string, std::string> result;   // a product's bfloat16 output -> its float32 name
  std::vector<Node> kept;
  for (Node& n : g.nodes) {
    const bool is_cast = n.domain.empty() && n.op_type == "Cast" && n.inputs.size() == 1 && n.outputs.size() == 1;
    if (is_cast && (ends_with(n.name, kOperandSuffixes[0]) || ends_with(n.name, kOperandSuffixes[1]))) {
      operand[n.outputs[0]] = n.inputs[0];
    } else if (is_cast && ends_with(n.name, kResultSuffix)) {
      result[n.inputs[0]] = n.outputs[0];
    } else {
      kept.push_back(std::move(n));
    }
  }
  for (Node& n : kept) {
    for (auto& v : n.inputs)
      if (const auto it = operand.find(v); it != operand.end()) v = it->second;
    for (auto& v : n.outputs)
      if (const auto it = result.find(v); it != result.end()) v = it->second;
  }
  g.nodes = std::move(kept);
  std::erase_if(g.value_info, [&](const ValueInfo& v) { return operand.count(v.name) || result.count(v.name); });
  model.metadata.erase(kMixedPrecisionKey);
  return operand.size() + result.size();
}

}  // namespace kiln
