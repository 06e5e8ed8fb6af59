// The layout pass (fusion.h, to_channels_last): regions of 2-D convolutional networks rewritten to
// hold their activations channels last, the layout oneDNN's convolution kernels read and write.
#include <algorithm>
#include <numeric>

#include "ir/fusion.h"
#include "ir/fusion_rewrite.h"

namespace kiln {
namespace {

using fusion::kNone;

// How a node takes part in a region.
enum class Role {
  None,         // stays as it is
  Conv,         // Conv -> ai.kiln.ConvChannelsLast
  Pool,         // MaxPool / AveragePool -> ai.kiln.*ChannelsLast, channels last in and out
  GlobalPool,   // GlobalAveragePool / GlobalMaxPool -> ai.kiln.*ChannelsLast: its output is channels first
  Norm,         // BatchNormalization -> ai.kiln.BatchNormalizationChannelsLast
  Elementwise,  // the same op over channels-last operands
  // Training graphs' backward: the gradient ops of the above, dY (and X) channels last
  ConvGrad,       // ai.kiln.ConvGrad -> ConvGradChannelsLast: dX channels last when X is
  Grad,           // BatchNormalizationGrad, MaxPoolGrad, AveragePoolGrad -> *ChannelsLast
  GlobalPoolGrad  // GlobalAveragePoolGrad -> *ChannelsLast: dY stays [N, C, 1, 1]
};

bool is_standard(const Node& n, std::initializer_list<const char*> ops) {
  if (!n.domain.empty()) return false;
  for (const char* op : ops)
    if (n.op_type == op) return true;
  return false;
}

// Ops that compute each element from the same element of their operands (broadcast alike in any
// layout when every operand is permuted alike): unary ones, and those of several operands.
bool is_unary(const Node& n) {
  if (n.domain == kKilnDomain) return n.op_type == "Gelu";
  return is_standard(n, {"Relu",
                         "LeakyRelu",
                         "Elu",
                         "Selu",
                         "Celu",
                         "Sigmoid",
                         "HardSigmoid",
                         "HardSwish",
                         "Tanh",
                         "Softplus",
                         "Softsign",
                         "Identity",
                         "Neg",
                         "Abs",
                         "Sqrt",
                         "Exp",
                         "Erf",
                         "Clip",
                         "ThresholdedRelu",
                         "Mish"});
}
bool is_binary(const Node& n) {
  return is_standard(n, {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "PRelu", "Pow"});
}
// Gradients of unary ops: (dY, Y or X) -> dX, element by element, both operands of one shape.
bool is_unary_grad(const Node& n) {
  return n.domain == kKilnDomain && (n.op_type == "ReluGrad" || n.op_type == "GeluGrad");
}
bool is_kiln(const Node& n, const char* op) { return n.domain == kKilnDomain && n.op_type == op; }

// A float32 rank-4 convolution weight: an initializer, or a declared graph input.
bool conv_weight_ok(const Graph& g, const std::string& w) {
  if (const auto it = g.initializers.find(w); it != g.initializers.end())
    return it->second.dtype() == DType::Float32 && it->second.rank() == 4;
  const ValueInfo* info = find_declared(g, w);
  return info != nullptr && info->has_type && info->dtype == DType::Float32 && info->has_shape &&
         info->dims.size() == 4;
}

struct Pass {
  Model& model;
  Graph& g = model.graph;
  const fusion::Uses uses{g};
  std::set<std::string> overridable;
  std::vector<Role> role;
  std::map<std::string, size_t> region_value;  // a value held channels last -> the node writing it
  std::vector<size_t> parent;                  // union-find over nodes: one component per region

  explicit Pass(Model& m) : model(m) {
    for (const ValueInfo& v : g.overridable_initializers) overridable.insert(v.name);
    role.assign(g.nodes.size(), Role::None);
    parent.resize(g.nodes.size());
    std::iota(parent.begin(), parent.end(), size_t{0});
  }

  size_t find(size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }

  // A constant operand an elementwise op can take beside channels-last ones: an initializer of rank
  // <= 4 (permuted alike when it is not one value), or a one-element Constant of rank <= 4.
  bool constant_ok(const std::string& v) const {
    if (const auto it = g.initializers.find(v); it != g.initializers.end())
      return !overridable.count(v) && it->second.defined() && it->second.rank() <= 4;
    const size_t p = uses.producer_any(v);
    if (p == kNone || !uses.scalar(v, true)) return false;
    const auto a = g.nodes[p].attrs.find("value");
    return a == g.nodes[p].attrs.end() || a->second.t.rank() <= 4;
  }

  bool in_region(const std::string& v) const { return region_value.count(v) != 0; }

  // Whether inputs [from, ...) are declared float32 (the channels-last normalisation's parameters).
  bool float32(const std::vector<std::string>& inputs, size_t from) const {
    for (size_t k = from; k < inputs.size(); ++k)
      if (inputs[k].empty() || declared_dtype(g, inputs[k]) != DType::Float32) return false;
    return true;
  }

  Role classify(const Node& n) const {
    const bool x_in = !n.inputs.empty() && in_region(n.inputs[0]);
    const bool one_output = n.outputs.size() == 1 || (n.outputs.size() > 1 && n.outputs[1].empty());
    if (is_standard(n, {"Conv"})) {  // weights made by the region's own convolutions stay channels first
      const bool weights = n.inputs.size() >= 2 && conv_weight_ok(g, n.inputs[1]) && !in_region(n.inputs[1]) &&
                           (n.inputs.size() < 3 || !in_region(n.inputs[2]));
      return weights && n.outputs.size() == 1 ? Role::Conv : Role::None;
    }
    if (is_binary(n)) {
      if (n.outputs.size() != 1) return Role::None;
      bool any = false;
      for (const std::string& v : n.inputs) {
        if (v.empty()) return Role::None;
        if (in_region(v)) any = true;
        else if (!constant_ok(v)) return Role::None;
      }
      return any ? Role::Elementwise : Role::None;
    }
    if (const Role r = classify_grad(n); r != Role::None) return r;
    if (!x_in) return Role::None;
    if (is_standard(n, {"MaxPool"})) return one_output && n.attr_int("storage_order", 0) == 0 ? Role::Pool : Role::None;
    if (is_standard(n, {"AveragePool"}))
      return n.attr_int("ceil_mode", 0) != 0 && n.attr_int("count_include_pad", 0) != 0 ? Role::None : Role::Pool;
    if (is_standard(n, {"GlobalAveragePool", "GlobalMaxPool"})) return Role::GlobalPool;
    if (is_standard(n, {"BatchNormalization"})) {  // training mode: running_mean and running_var too
      const bool training = n.attr_int("training_mode", 0) != 0;
      const bool outputs = training ? n.outputs.size() <= 3 && model.opset() >= 14 : one_output && model.opset() >= 7;
      return outputs && n.inputs.size() == 5 && n.attr_int("spatial", 1) == 1 && float32(n.inputs, 1) ? Role::Norm
                                                                                                      : Role::None;
    }
    if (n.outputs.size() != 1 || !is_unary(n)) return Role::None;
    for (size_t k = 1; k < n.inputs.size(); ++k)
      if (!n.inputs[k].empty() && !uses.scalar(n.inputs[k], true)) return Role::None;
    return Role::Elementwise;
  }

  // The backward's ops: dY channels last, and X too but for a convolution's (its first layer reads
  // the graph's input). Topological order puts them after the forward's ops and dY's producer.
  Role classify_grad(const Node& n) const {
    if (n.domain != kKilnDomain || n.inputs.size() < 2) return Role::None;
    const bool dy_in = in_region(n.inputs[0]), x_in = in_region(n.inputs[1]);
    if (is_unary_grad(n)) return dy_in && x_in && n.inputs.size() == 2 ? Role::Elementwise : Role::None;
    if (is_kiln(n, "ConvGrad"))
      return dy_in && n.inputs.size() == 3 && conv_weight_ok(g, n.inputs[2]) && !in_region(n.inputs[2]) ? Role::ConvGrad
                                                                                                        : Role::None;
    if (is_kiln(n, "GlobalAveragePoolGrad")) return x_in && !dy_in ? Role::GlobalPoolGrad : Role::None;
    if (!dy_in || !x_in) return Role::None;
    if (is_kiln(n, "BatchNormalizationGrad"))  // the per-channel inputs stay as they are
      return std::none_of(n.inputs.begin() + 2, n.inputs.end(), [&](const std::string& v) { return in_region(v); }) &&
                     float32(n.inputs, 2) && n.inputs.size() <= 7
                 ? Role::Grad
                 : Role::None;
    if (is_kiln(n, "MaxPoolGrad")) return n.inputs.size() == 2 ? Role::Grad : Role::None;
    if (is_kiln(n, "AveragePoolGrad"))
      return n.inputs.size() == 2 && !(n.attr_int("ceil_mode", 0) != 0 && n.attr_int("count_include_pad", 0) != 0)
                 ? Role::Grad
                 : Role::None;
    return Role::None;
  }

  // Finds the regions: nodes in topological order join when their activations are channels last.
  void find_regions() {
    for (size_t i : g.topological_order()) {
      const Node& n = g.nodes[i];
      role[i] = classify(n);
      if (role[i] == Role::None) continue;
      for (const std::string& v : n.inputs)
        if (!v.empty() && in_region(v)) join(i, region_value.at(v));
      const bool dx_channels_last = role[i] != Role::ConvGrad || in_region(n.inputs[1]);
      if (role[i] != Role::GlobalPool && !n.outputs[0].empty() && dx_channels_last) region_value[n.outputs[0]] = i;
    }
  }

  // A region value something outside the region reads (or the graph returns): it gets a Transpose
  // back to channels first.
  bool needs_exit(const std::string& v) const {
    if (uses.returned(v)) return true;
    const std::vector<size_t>& readers = uses.readers(v);
    return std::any_of(readers.begin(), readers.end(), [&](size_t r) { return role[r] == Role::None; });
  }

  // Keeps the regions worth it: each convolution reorders its input and output otherwise, each exit
  // costs one Transpose, so a region must have at least two convolutions per exit (a lone Conv
  // stays; a training graph, whose backward reads most activations, keeps its layout).
  void keep_profitable_regions() {
    std::map<size_t, size_t> convs, exits;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (role[i] == Role::Conv) ++convs[find(i)];
    for (const auto& [v, i] : region_value)
      if (needs_exit(v)) ++exits[find(i)];
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (role[i] == Role::None) continue;
      const size_t c = find(i);
      if (convs[c] == 0 || 2 * exits[c] > convs[c]) role[i] = Role::None;
    }
    std::erase_if(region_value, [&](const auto& kv) { return role[kv.second] == Role::None; });
  }

  // What a convolution applies as it writes (oneDNN's post-ops): an Add alone reading its output
  // whose other operand is channels last too (a residual), then a Relu alone reading that.
  std::map<size_t, size_t> relu_of, add_of;
  std::set<size_t> dropped;  // the Adds and Relus the convolutions apply

  void find_post_ops() {
    auto sole = [&](const std::string& v, const char* op) {
      const size_t r = uses.sole_reader(v);
      const bool ok = r != kNone && !dropped.count(r) && is_standard(g.nodes[r], {op}) && role[r] == Role::Elementwise;
      return ok ? r : kNone;
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (role[i] != Role::Conv) continue;
      std::string out = g.nodes[i].outputs[0];
      if (const size_t add = sole(out, "Add"); add != kNone && g.nodes[add].inputs.size() == 2) {
        const std::vector<std::string>& in = g.nodes[add].inputs;
        const std::string& other = in[0] == out ? in[1] : in[0];
        if (other != out && in_region(other)) {
          add_of[i] = add;
          dropped.insert(add);
          out = g.nodes[add].outputs[0];
        }
      }
      if (const size_t relu = sole(out, "Relu"); relu != kNone) {
        relu_of[i] = relu;
        dropped.insert(relu);
      }
    }
  }

  std::map<std::string, std::string> cl;        // region value -> its channels-last name
  std::map<std::string, std::string> permuted;  // constant -> its channels-last copy

  // The name node inputs read `v` by in the region: its channels-last value, a constant's permuted
  // copy (one value: as it is), or `v`.
  std::string operand(GraphEditor& edit, const std::string& v) {
    if (v.empty()) return v;
    if (const auto it = cl.find(v); it != cl.end()) return it->second;
    const auto c = g.initializers.find(v);
    if (c == g.initializers.end() || c->second.numel() == 1) return v;
    if (const auto it = permuted.find(v); it != permuted.end()) return it->second;
    const Tensor t = c->second;
    Shape four(4 - t.shape().size(), 1);
    four.insert(four.end(), t.shape().begin(), t.shape().end());
    const Tensor nhwc = t.reshape(four).permute({0, 2, 3, 1}).contiguous();
    return permuted[v] = edit.constant(v + "/channels_last", nhwc);
  }

  bool backward(Role r) const { return r == Role::ConvGrad || r == Role::Grad || r == Role::GlobalPoolGrad; }

  void rewrite_node(GraphEditor& edit, size_t i) {
    Node& n = g.nodes[i];
    const Role r = role[i];
    const bool x_channels_last = in_region(n.inputs[r == Role::ConvGrad ? 1 : 0]);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (backward(r)) {  // the activations it reads: those of the region channels last, the rest as they are
        if (const auto it = cl.find(n.inputs[k]); it != cl.end()) n.inputs[k] = it->second;
      } else if (r == Role::Elementwise || k == 0) {
        n.inputs[k] = operand(edit, n.inputs[k]);
      }
    }
    if (r == Role::Elementwise) {
      n.outputs[0] = cl.at(n.outputs[0]);
      return;
    }
    n.domain = kKilnDomain;
    n.op_type += "ChannelsLast";
    if (r == Role::GlobalPool) return;  // writes [N, C, 1, 1] under its old name
    while (n.outputs.size() > 1 && n.outputs.back().empty()) n.outputs.pop_back();
    const std::string out = n.outputs[0];
    if (region_value.count(out)) n.outputs[0] = cl.at(out);  // not a first layer's dX: channels first
    if (r == Role::Conv || r == Role::ConvGrad) n.attrs["input_channels_last"] = Attribute::of_int(x_channels_last);
    if (r != Role::Conv) return;
    if (const auto a = add_of.find(i); a != add_of.end()) {
      const std::vector<std::string>& in = g.nodes[a->second].inputs;
      n.inputs.resize(3);
      n.inputs.push_back(cl.at(in[0] == out ? in[1] : in[0]));
      n.outputs[0] = cl.at(g.nodes[a->second].outputs[0]);
    }
    if (const auto relu = relu_of.find(i); relu != relu_of.end()) {
      n.attrs["activation"] = Attribute::of_string("Relu");
      n.outputs[0] = cl.at(g.nodes[relu->second].outputs[0]);
    }
  }

  size_t rewrite() {
    GraphEditor edit(model);
    for (const auto& [v, i] : region_value) cl[v] = edit.fresh(v + "/channels_last");
    find_post_ops();
    size_t rewritten = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (role[i] != Role::None && !dropped.count(i)) {
        rewrite_node(edit, i);
        ++rewritten;
      }
    std::vector<Node> kept;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!dropped.count(i)) kept.push_back(std::move(g.nodes[i]));
    for (const auto& [v, i] : region_value)  // back to channels first for the readers outside
      if (needs_exit(v))
        kept.push_back(Node{edit.fresh(v + "/to_channels_first"),
                            "Transpose",
                            "",
                            {cl.at(v)},
                            {v},
                            {{"perm", Attribute::of_ints({0, 3, 1, 2})}},
                            ""});
    g.nodes = std::move(kept);
    std::erase_if(g.value_info, [&](const ValueInfo& v) { return region_value.count(v.name) != 0; });
    if (!model.opsets.count(kKilnDomain)) model.opsets[kKilnDomain] = 1;
    return rewritten;
  }
};

}  // namespace

size_t to_channels_last(Model& model) {
  Pass pass(model);
  pass.find_regions();
  pass.keep_profitable_regions();
  if (pass.region_value.empty()) return 0;
  return pass.rewrite();
}

}  // namespace kiln
