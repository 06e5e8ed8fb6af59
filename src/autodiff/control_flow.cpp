// Gradient rules of the control-flow ops (kernels/cpu/control_flow.cpp).
//
// If: the gradient is another If on the same condition whose branches are the gradients of the
// forward branches (autodiff/subgraph_gradient.h): each recomputes its branch's forward and runs
// it backward from the outputs' gradients, giving one gradient per outer value the branches read
// that needs one (zeros from a branch that does not read it). ONNX Runtime has no gradient for If.
//
// Scan (opset 9+): a second forward Scan records the state entering every step (the body with its
// state inputs added as scan outputs); then a Scan runs backward over those states, the scan inputs
// and the scan outputs' gradients, in reverse step order, with a body that recomputes the step's
// forward and runs it backward (the gradient of the body w.r.t. its state and scan inputs and the
// outer values it reads), carrying the states' gradient and accumulating the outer values'.
//
// Loop with a trip count fixed by M (the body's cond output is its cond input, or the node's):
// the same scheme, a recording Loop, then a Loop of M steps whose body picks step t = M - 1 - j of the
// recorded states and of the scan outputs' gradients (Gather), recomputes the step and runs it
// backward. A loop that its condition may stop early is an Unsupported error naming the node.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "autodiff/registry.h"
#include "autodiff/subgraph_gradient.h"
#include "ir/subgraph.h"

namespace kiln {
namespace {

const Graph& branch(const Node& n, const char* key) {
  const auto it = n.attrs.find(key);
  if (it == n.attrs.end() || !it->second.g)
    throw InvalidModel(fmt::format("If: graph attribute '{}' is required", key));
  return *it->second.g;
}

ValueInfo typed(const std::string& name, const GradContext& g, const std::string& outer) {
  ValueInfo v;
  v.name = name;
  if (const auto dt = g.dtype(outer)) {
    v.dtype = *dt;
    v.has_type = true;
  }
  return v;
}

void if_grad(GradContext& g) {
  const Node& n = g.node;
  const auto cap = n.attrs.find(kCapturesAttr);
  if (cap == n.attrs.end()) return;  // the branches read nothing from outside: nothing to differentiate
  const std::vector<std::string>& inner = cap->second.strings;  // as the branches name them
  const size_t first = n.inputs.size() - inner.size();
  SubgraphGradientRequest req;
  req.opset = g.opset();
  std::vector<size_t> wrt_inputs;
  for (size_t k = 0; k < inner.size(); ++k) {
    req.outer.push_back(typed(inner[k], g, g.I(first + k)));
    if (g.needs(first + k)) {
      req.wrt.push_back(inner[k]);
      wrt_inputs.push_back(first + k);
    }
  }
  if (req.wrt.empty()) return;
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    const std::string go = n.outputs[j].empty() ? std::string() : g.GO(j);
    req.seeds.push_back(go);
    req.seed_info.push_back(go.empty() ? ValueInfo{} : typed(go, g, n.outputs[j]));
  }
  const std::string base = (n.name.empty() ? std::string("If") : n.name) + "/grad/";
  req.graph = &branch(n, "then_branch");
  req.prefix = base + "then/";
  Attribute then_grad, else_grad;
  then_grad.kind = else_grad.kind = Attribute::Kind::Graph;
  then_grad.g = std::make_shared<Graph>(build_subgraph_gradient(req));
  req.graph = &branch(n, "else_branch");
  req.prefix = base + "else/";
  else_grad.g = std::make_shared<Graph>(build_subgraph_gradient(req));
  // The gradient If reads the forward's outer values and the seeds: its captures, made explicit.
  std::vector<std::string> inputs{g.I(0)}, names;
  std::set<std::string> seen;
  for (const Graph* b : {then_grad.g.get(), else_grad.g.get()})
    for (const std::string& f : free_values(*b)) {
      if (!seen.insert(f).second) continue;
      std::string outer = f;
      for (size_t k = 0; k < inner.size(); ++k)
        if (inner[k] == f) outer = g.I(first + k);
      inputs.push_back(outer);
      names.push_back(f);
    }
  const std::vector<std::string> grads = g.emit_multi(
      "", "If", inputs, req.wrt.size(),
      {{"then_branch", then_grad}, {"else_branch", else_grad}, {kCapturesAttr, Attribute::of_strings(names)}});
  for (size_t k = 0; k < wrt_inputs.size(); ++k) g.set_GI(wrt_inputs[k], grads[k]);
}

// The typed name `name` for a new subgraph input.
ValueInfo input_info(const std::string& name, const GradContext& g, const std::string& like) {
  ValueInfo v = typed(name, g, like);
  v.has_type = true;  // ONNX requires typed subgraph inputs; float when unknown
  return v;
}

std::string zeros_like(GradContext& g, const std::string& x) {
  const DType dt = g.dtype(x).value_or(DType::Float32);
  return g.emit("ConstantOfShape", {g.emit("Shape", {x})}, {{"value", Attribute::of_tensor(Tensor::zeros(dt, {1}))}});
}

// GO(i), or zeros shaped like output i when no gradient reaches it.
std::string go_or_zeros(GradContext& g, size_t i) { return g.GO(i).empty() ? zeros_like(g, g.O(i)) : g.GO(i); }

std::vector<int64_t> ints_or(const Node& n, const char* key, size_t count) {
  return n.attr_ints(key, std::vector<int64_t>(count, 0));
}

Attribute graph_attr(Graph g) {
  Attribute a;
  a.kind = Attribute::Kind::Graph;
  a.g = std::make_shared<Graph>(std::move(g));
  return a;
}

Node simple(const std::string& op, const std::string& name, std::vector<std::string> in, std::string out,
            std::map<std::string, Attribute> attrs = {}) {
  Node nd;
  nd.op_type = op;
  nd.name = name;
  nd.inputs = std::move(in);
  nd.outputs = {std::move(out)};
  nd.attrs = std::move(attrs);
  return nd;
}

// What the Scan and Loop rules read of the forward node: the body, the outer values it reads
// (captures: inner names, and where the node's inputs start holding them), which of those need
// gradients, and where the carried values sit among the node's and the body's inputs.
struct Frame {
  const Graph* body = nullptr;
  std::vector<std::string> inner;
  size_t first_cap = 0, states = 0, outs = 0;
  size_t node_state = 0, body_state = 0;  // index of the first carried value: Scan 0 and 0, Loop 2 and 2
  std::vector<size_t> cap_inputs;         // captures (by index into inner) that need gradients
  std::string base;                       // name prefix for everything the rule creates
};

Frame read_frame(GradContext& g, size_t skip, size_t scan_inputs) {
  const Node& n = g.node;
  Frame f;
  f.body = &branch(n, "body");
  if (n.attrs.count(kCapturesAttr)) f.inner = n.attrs.at(kCapturesAttr).strings;
  if (n.inputs.size() < f.inner.size() + skip + scan_inputs)
    throw InvalidModel(fmt::format(
        "{}: {} inputs besides its {} captured values cannot hold {} leading inputs and {} "
        "scan inputs",
        n.label(), n.inputs.size() - std::min(n.inputs.size(), f.inner.size()), f.inner.size(), skip, scan_inputs));
  f.first_cap = n.inputs.size() - f.inner.size();
  f.node_state = f.body_state = skip;
  f.states = f.first_cap - skip - scan_inputs;
  if (n.outputs.size() < f.states)
    throw InvalidModel(
        fmt::format("{}: {} outputs cannot hold its {} carried values", n.label(), n.outputs.size(), f.states));
  f.outs = n.outputs.size() - f.states;
  for (size_t k = 0; k < f.inner.size(); ++k)
    if (g.needs(f.first_cap + k)) f.cap_inputs.push_back(k);
  f.base = (n.name.empty() ? n.op_type : n.name) + "/grad/";
  return f;
}

// A copy of the forward node whose body also outputs the carried values entering each step, as
// extra scan outputs (stacked on axis 0 in step order); returns its outputs.
std::vector<std::string> emit_recording(GradContext& g, const Frame& f) {
  Graph rec = *f.body;
  for (size_t k = 0; k < f.states; ++k) {
    ValueInfo v = f.body->inputs[f.body_state + k];
    const std::string name = f.base + "entering" + std::to_string(k);
    rec.nodes.push_back(simple("Identity", f.base + "record" + std::to_string(k), {v.name}, name));
    v.name = name;
    v.has_shape = false;
    rec.outputs.push_back(v);
  }
  std::map<std::string, Attribute> attrs = g.node.attrs;
  attrs["body"] = graph_attr(rec);
  if (g.node.op_type == "Scan") {
    std::vector<int64_t> axes = ints_or(g.node, "scan_output_axes", f.outs);
    std::vector<int64_t> dirs = ints_or(g.node, "scan_output_directions", f.outs);
    axes.resize(f.outs + f.states, 0);
    dirs.resize(f.outs + f.states, 0);
    attrs["scan_output_axes"] = Attribute::of_ints(axes);
    attrs["scan_output_directions"] = Attribute::of_ints(dirs);
  }
  std::vector<std::string> in;
  for (size_t i = 0; i < g.node.inputs.size(); ++i) in.push_back(g.has_input(i) ? g.I(i) : std::string());
  return g.emit_multi("", g.node.op_type, in, f.states + f.outs + f.states, attrs);
}

// The body's gradient (autodiff/subgraph_gradient.h) with respect to `wrt` then the captures that
// need one, seeded by one named value per body output from `first_seed` on; `seeds` gets those
// values' typed names (the carried values' first).
Graph body_gradient(GradContext& g, const Frame& f, std::vector<std::string> wrt, size_t first_seed,
                    std::vector<ValueInfo>& seeds) {
  SubgraphGradientRequest req;
  req.graph = f.body;
  req.opset = g.opset();
  req.prefix = f.base + "body/";
  for (size_t k = 0; k < f.inner.size(); ++k) req.outer.push_back(typed(f.inner[k], g, g.I(f.first_cap + k)));
  req.wrt = std::move(wrt);
  for (size_t k : f.cap_inputs) req.wrt.push_back(f.inner[k]);
  req.seeds.assign(first_seed, "");
  req.seed_info.assign(first_seed, ValueInfo{});
  for (size_t j = 0; j < f.states + f.outs; ++j) {
    ValueInfo v = f.body->outputs[first_seed + j];
    v.name = f.base + (j < f.states ? "dstate" : "dy") + std::to_string(j);
    v.has_type = true;
    v.has_shape = false;
    req.seeds.push_back(v.name);
    req.seed_info.push_back(v);
    seeds.push_back(v);
  }
  return build_subgraph_gradient(req);
}

// Adds to the backward body one running sum per differentiated capture: an input, plus that
// step's gradient (grads[first + c]), as an output.
void add_capture_sums(GradContext& g, const Frame& f, Graph& gb, const std::vector<ValueInfo>& grads, size_t first) {
  for (size_t c = 0; c < f.cap_inputs.size(); ++c) {
    ValueInfo acc = input_info(f.base + "dsum_in" + std::to_string(c), g, g.I(f.first_cap + f.cap_inputs[c]));
    gb.inputs.push_back(acc);
    const std::string out = f.base + "dsum_out" + std::to_string(c);
    gb.nodes.push_back(
        simple("Add", f.base + "accumulate" + std::to_string(c), {acc.name, grads[first + c].name}, out));
    acc.name = out;
    gb.outputs.push_back(acc);
  }
}

// The backward node's reads of outer values, made explicit: appends their outer names to `in` and
// returns the names the body uses (`extra` maps names the rule made up to outer values).
std::vector<std::string> lift_reads(GradContext& g, const Frame& f, const Graph& gb, std::vector<std::string>& in,
                                    const std::map<std::string, std::string>& extra = {}) {
  std::vector<std::string> names;
  for (const std::string& name : free_values(gb)) {
    std::string outer = extra.count(name) ? extra.at(name) : name;
    for (size_t k = 0; k < f.inner.size(); ++k)
      if (f.inner[k] == name) outer = g.I(f.first_cap + k);
    in.push_back(outer);
    names.push_back(name);
  }
  return names;
}

// Hands the backward node's first outputs (carried values, then capture sums) to their inputs.
void set_grads(GradContext& g, const Frame& f, const std::vector<std::string>& d) {
  for (size_t k = 0; k < f.states; ++k)
    if (g.needs(f.node_state + k)) g.set_GI(f.node_state + k, d[k]);
  for (size_t c = 0; c < f.cap_inputs.size(); ++c) g.set_GI(f.first_cap + f.cap_inputs[c], d[f.states + c]);
}

void scan_grad(GradContext& g) {
  const Node& n = g.node;
  const auto m = static_cast<size_t>(n.attr_int("num_scan_inputs"));
  const Frame f = read_frame(g, 0, m);
  if (f.body->inputs.size() != f.states + m || f.body->outputs.size() != f.states + f.outs)
    throw InvalidModel(
        fmt::format("Scan: the body's {} inputs and {} outputs do not fit {} states, {} scan inputs "
                    "and {} scan outputs",
                    f.body->inputs.size(), f.body->outputs.size(), f.states, m, f.outs));
  const std::vector<int64_t> in_axes = ints_or(n, "scan_input_axes", m),
                             in_dirs = ints_or(n, "scan_input_directions", m);
  const std::vector<int64_t> out_axes = ints_or(n, "scan_output_axes", f.outs);
  const std::vector<int64_t> out_dirs = ints_or(n, "scan_output_directions", f.outs);
  const std::vector<std::string> rec = emit_recording(g, f);

  // The backward body: (dstate, capture sums, state_t, x_t, dy_t) -> (dstate_prev, sums, dx_t).
  std::vector<std::string> wrt;
  for (size_t i = 0; i < f.states + m; ++i) wrt.push_back(f.body->inputs[i].name);
  std::vector<ValueInfo> seeds;
  Graph gb = body_gradient(g, f, wrt, 0, seeds);
  const std::vector<ValueInfo> grads = gb.outputs;  // states, scan inputs, captures
  std::vector<ValueInfo> own = gb.inputs;           // state_t, x_t
  gb.inputs.assign(seeds.begin(), seeds.begin() + std::ptrdiff_t(f.states));
  gb.outputs.assign(grads.begin(), grads.begin() + std::ptrdiff_t(f.states));
  add_capture_sums(g, f, gb, grads, f.states + m);
  for (ValueInfo& v : own) v.has_shape = false;
  gb.inputs.insert(gb.inputs.end(), own.begin(), own.end());
  gb.inputs.insert(gb.inputs.end(), seeds.begin() + std::ptrdiff_t(f.states), seeds.end());
  gb.outputs.insert(gb.outputs.end(), grads.begin() + std::ptrdiff_t(f.states),
                    grads.begin() + std::ptrdiff_t(f.states + m));

  // The backward Scan, in reverse step order over the recorded states, the scan inputs and dY.
  std::vector<std::string> in;
  for (size_t k = 0; k < f.states; ++k) in.push_back(go_or_zeros(g, k));
  for (size_t k : f.cap_inputs) in.push_back(zeros_like(g, g.I(f.first_cap + k)));
  for (size_t k = 0; k < f.states; ++k) in.push_back(rec[f.states + f.outs + k]);
  for (size_t j = 0; j < m; ++j) in.push_back(g.I(f.states + j));
  for (size_t k = 0; k < f.outs; ++k) in.push_back(go_or_zeros(g, f.states + k));
  std::vector<int64_t> axes(f.states, 0), dirs(f.states, 1), dx_dirs;
  for (size_t j = 0; j < m; ++j) {
    axes.push_back(in_axes[j]);
    dirs.push_back(1 - in_dirs[j]);
    dx_dirs.push_back(1 - in_dirs[j]);
  }
  for (size_t k = 0; k < f.outs; ++k) {
    axes.push_back(out_axes[k]);
    dirs.push_back(1 - out_dirs[k]);
  }
  const std::vector<std::string> names = lift_reads(g, f, gb, in);
  const std::vector<std::string> d =
      g.emit_multi("", "Scan", in, f.states + f.cap_inputs.size() + m,
                   {{"body", graph_attr(std::move(gb))},
                    {"num_scan_inputs", Attribute::of_int(int64_t(f.states + m + f.outs))},
                    {"scan_input_axes", Attribute::of_ints(axes)},
                    {"scan_input_directions", Attribute::of_ints(dirs)},
                    {"scan_output_axes", Attribute::of_ints(in_axes)},
                    {"scan_output_directions", Attribute::of_ints(dx_dirs)},
                    {kCapturesAttr, Attribute::of_strings(names)}});
  set_grads(g, f, d);
  for (size_t j = 0; j < m; ++j)
    if (g.needs(f.states + j)) g.set_GI(f.states + j, d[f.states + f.cap_inputs.size() + j]);
}

// Whether the Loop body's cond output is its cond input passed through, the node's own cond input
// read from outside (`outer_cond`: the name the body uses for it, "" when none; torch.onnx writes
// this), or a constant true: then M alone fixes the trip count.
bool static_trip_count(const Graph& body, const std::string& outer_cond) {
  if (body.inputs.size() < 2 || body.outputs.empty()) return false;
  std::string out = body.outputs[0].name;
  for (int hops = 0; hops < 8; ++hops) {
    if (out == body.inputs[1].name || (!outer_cond.empty() && out == outer_cond)) return true;
    const Node* producer = nullptr;
    for (const Node& nd : body.nodes)
      for (const std::string& o : nd.outputs)
        if (o == out) producer = &nd;
    if (!producer) return false;
    if (producer->op_type == "Identity" && !producer->inputs.empty()) {
      out = producer->inputs[0];
      continue;
    }
    if (producer->op_type == "Constant" && producer->has_attr("value")) {
      const Tensor& v = producer->attr_tensor("value");
      return v.numel() == 1 && v.item_as_double() != 0;
    }
    return false;
  }
  return false;
}

// The backward Loop body's first nodes: step t = last - j feeds the forward body's own inputs (i =
// t, cond, the carried values recorded at t) and the scan outputs' gradients at t.
std::vector<Node> loop_step_inputs(GradContext& g, const Frame& f, const std::vector<ValueInfo>& own,
                                   const std::vector<std::string>& rec) {
  std::vector<Node> pre;
  pre.push_back(simple("Sub", f.base + "t", {f.base + "last", f.base + "j"}, own[0].name));
  pre.push_back(simple("Identity", f.base + "cond_pass", {f.base + "cond"}, own[1].name));
  for (size_t k = 0; k < f.states; ++k)
    pre.push_back(simple("Gather", f.base + "state_at" + std::to_string(k), {rec[f.states + f.outs + k], own[0].name},
                         own[2 + k].name, {{"axis", Attribute::of_int(0)}}));
  for (size_t k = 0; k < f.outs; ++k)
    pre.push_back(simple("Gather", f.base + "dy_at" + std::to_string(k), {go_or_zeros(g, f.states + k), own[0].name},
                         f.base + "dy" + std::to_string(f.states + k), {{"axis", Attribute::of_int(0)}}));
  return pre;
}

void loop_grad(GradContext& g) {
  const Node& n = g.node;
  const Frame f = read_frame(g, 2, 0);
  std::string outer_cond;  // the body's name for the node's cond input, if it reads it
  for (size_t k = 0; k < f.inner.size(); ++k)
    if (g.has_input(1) && g.I(f.first_cap + k) == g.I(1)) outer_cond = f.inner[k];
  if (!g.has_input(0) || !static_trip_count(*f.body, outer_cond))
    throw Unsupported(
        fmt::format("{}: Kiln differentiates a Loop whose trip count M fixes the iterations (the "
                    "body's cond output its cond input passed through); this loop's condition can "
                    "stop it early",
                    n.label()));
  if (f.body->inputs.size() != f.states + 2 || f.body->outputs.size() != 1 + f.states + f.outs)
    throw InvalidModel(
        fmt::format("Loop: the body's {} inputs and {} outputs do not fit {} carried values and {} "
                    "scan outputs",
                    f.body->inputs.size(), f.body->outputs.size(), f.states, f.outs));
  const std::vector<std::string> rec = emit_recording(g, f);

  // The backward body: (j, cond, dv, capture sums) -> (cond, dv_prev, sums) at step t = M - 1 - j.
  std::vector<std::string> wrt;
  for (size_t k = 0; k < f.states; ++k) wrt.push_back(f.body->inputs[2 + k].name);
  std::vector<ValueInfo> seeds;
  Graph gb = body_gradient(g, f, wrt, 1, seeds);
  const std::vector<ValueInfo> grads = gb.outputs;  // carried values, captures
  const std::vector<ValueInfo> own = gb.inputs;     // i, cond, v...
  ValueInfo j = own[0], cond = own[1];
  j.name = f.base + "j";
  cond.name = f.base + "cond";
  gb.inputs = {j, cond};
  gb.inputs.insert(gb.inputs.end(), seeds.begin(), seeds.begin() + std::ptrdiff_t(f.states));
  const std::vector<Node> pre = loop_step_inputs(g, f, own, rec);
  gb.nodes.insert(gb.nodes.begin(), pre.begin(), pre.end());
  ValueInfo cond_out = cond;
  cond_out.name = f.base + "cond_out";
  gb.nodes.push_back(simple("Identity", f.base + "cond_keep", {cond.name}, cond_out.name));
  gb.outputs = {cond_out};
  gb.outputs.insert(gb.outputs.end(), grads.begin(), grads.begin() + std::ptrdiff_t(f.states));
  add_capture_sums(g, f, gb, grads, f.states);

  // The backward Loop: the same M and cond (a loop whose cond input is false ran no step, and
  // neither does this one), from the final values' gradients.
  const std::string m = g.I(0);
  const std::string one = g.constant(g.dtype(m).value_or(DType::Int64) == DType::Int32 ? Tensor::scalar<int32_t>(1)
                                                                                       : Tensor::scalar<int64_t>(1));
  const std::string last =
      g.emit("Cast", {g.emit("Sub", {m, one})}, {{"to", Attribute::of_int(dtype_to_onnx(DType::Int64))}});
  std::vector<std::string> in{m, g.has_input(1) ? g.I(1) : std::string()};
  for (size_t k = 0; k < f.states; ++k) in.push_back(go_or_zeros(g, k));
  for (size_t k : f.cap_inputs) in.push_back(zeros_like(g, g.I(f.first_cap + k)));
  const std::vector<std::string> names = lift_reads(g, f, gb, in, {{f.base + "last", last}});
  set_grads(g, f,
            g.emit_multi("", "Loop", in, f.states + f.cap_inputs.size(),
                         {{"body", graph_attr(std::move(gb))}, {kCapturesAttr, Attribute::of_strings(names)}}));
}

const GradientRegistrar r_if({"", "If", 1, kMaxOpset}, if_grad);
const GradientRegistrar r_loop({"", "Loop", 1, kMaxOpset}, loop_grad);
const GradientRegistrar r_scan({"", "Scan", 9, kMaxOpset}, scan_grad);

}  // namespace
}  // namespace kiln
