// Tracer: records the ONNX nodes that modules emit while their forward runs over symbolic values.
// Names follow torch.onnx's scheme: nodes "<module path>/<OpType>_<n>" (the path of the module in
// the tree of the first module called, "" at the root), their outputs "<node>_output_<k>", and
// parameters are initializers named by their state_dict keys, so a weight file keyed like torch's
// state_dict maps straight onto the ONNX file.
#include <fmt/format.h>

#include <set>

#include "ir/graph_editor.h"
#include "kiln/error.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

int64_t Var::dim(int64_t i) const {
  const int64_t r = rank();
  const int64_t k = i < 0 ? i + r : i;
  if (k < 0 || k >= r) throw ShapeError(fmt::format("Var '{}': dim {} out of range for rank {}", name, i, r));
  return shape[static_cast<size_t>(k)];
}

struct Tracer::State {
  int64_t opset = 17;
  Model model;
  GraphEditor edit{model};                  // every value and node name in use
  std::map<std::string, DType> dtypes;      // value -> dtype (validates op inputs)
  std::map<std::string, int64_t> counters;  // "<scope>/<OpType>" -> next n
  // Module trees the trace walks: the first module called and any module called outside it.
  std::vector<const Module*> roots;
  std::map<const Module*, std::string> paths;  // module -> path from its root
  struct Frame {
    const Module* module;
    std::string path;
    int64_t begin;
  };
  std::vector<Frame> stack;
  int64_t sequence = 0;
  std::vector<Call> calls;
  std::map<std::pair<const Module*, std::string>, Var> parameters;
  std::map<std::string, ParameterRef> refs;
  std::vector<BufferUpdate> updates;

  std::string unique(const std::string& base) { return edit.fresh(base); }

  // Adds `root`'s tree to the known paths (first path wins for a module reachable twice, like
  // torch's named_modules).
  void add_root(const Module* root) {
    roots.push_back(root);
    std::vector<std::pair<std::string, const Module*>> todo{{"", root}};
    while (!todo.empty()) {
      auto [path, m] = todo.back();
      todo.pop_back();
      if (!paths.emplace(m, path).second) continue;
      const auto& children = static_cast<const Module*>(m)->named_children();
      for (auto it = children.rbegin(); it != children.rend(); ++it)
        if (it->second) todo.emplace_back(path.empty() ? it->first : path + "." + it->first, it->second.get());
    }
  }

  const std::string& path_of(const Module& m) {
    auto it = paths.find(&m);
    if (it == paths.end()) {
      add_root(&m);
      it = paths.find(&m);
    }
    return it->second;
  }

  void check_inputs(const std::vector<Var>& inputs, const std::string& what) const {
    for (const auto& v : inputs)
      if (!v.name.empty() && !dtypes.count(v.name))
        throw InvalidArgument(
            fmt::format("{}: input '{}' is not a value of this trace (a Var from another "
                        "Tracer, or a name made up by hand?)",
                        what, v.name));
  }
};

Tracer::Tracer(int64_t opset) : s_(std::make_unique<State>()) {
  if (opset < 13 || opset > 17)
    throw Unsupported(fmt::format("Tracer: opset {} is not supported (Kiln runs ai.onnx opsets 13 to 17)", opset));
  s_->opset = opset;
  s_->model.opsets[""] = opset;
  s_->model.ir_version = 8;
  s_->model.producer_name = "kiln";
  s_->model.graph.name = "main_graph";
}

Tracer::~Tracer() = default;

namespace {
ValueInfo value_info(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                     const std::map<int64_t, std::string>& dim_names) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_type = v.has_shape = true;
  const int64_t rank = static_cast<int64_t>(shape.size());
  for (const auto& [axis, dim_name] : dim_names)
    if (axis < -rank || axis >= rank)
      throw InvalidArgument(fmt::format("dynamic axis {} of '{}' is out of range for its rank {}", axis, name, rank));
  for (int64_t i = 0; i < rank; ++i) {
    auto it = dim_names.find(i);
    if (it == dim_names.end()) it = dim_names.find(i - rank);
    if (it != dim_names.end()) v.dims.push_back(Dim{-1, it->second});
    else if (shape[size_t(i)] < 0) v.dims.push_back(Dim{-1, fmt::format("{}_dim{}", name, i)});
    else v.dims.push_back(Dim{shape[size_t(i)], ""});
  }
  return v;
}
}  // namespace

Var Tracer::input(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                  const std::map<int64_t, std::string>& dim_names) {
  if (name.empty()) throw InvalidArgument("Tracer::input: an input needs a name");
  if (s_->edit.has_value(name))
    throw InvalidArgument(fmt::format("Tracer::input: the name '{}' is already taken", name));
  ValueInfo info = value_info(name, dtype, shape, dim_names);
  s_->edit.reserve(name);
  s_->dtypes[name] = dtype;
  s_->model.graph.inputs.push_back(info);
  std::vector<int64_t> dims;
  for (const Dim& d : info.dims) dims.push_back(d.value);
  return Var{name, dtype, dims};
}

void Tracer::output(const Var& v, const std::string& name, const std::map<int64_t, std::string>& dim_names) {
  s_->check_inputs({v}, fmt::format("Tracer::output '{}'", name));
  if (v.name.empty())
    throw InvalidArgument(fmt::format("Tracer::output '{}': the value is empty (Tracer::none())", name));
  for (const auto& o : s_->model.graph.outputs)
    if (o.name == name) throw InvalidArgument(fmt::format("Tracer::output: '{}' is already an output", name));
  if (v.name != name) {
    // Graph outputs get the caller's names through an Identity, as torch.onnx does when an output
    // is also an input or another output; intermediate names stay valid for hooks.
    if (s_->edit.has_value(name))
      throw InvalidArgument(fmt::format("Tracer::output: the name '{}' is already a value of the graph", name));
    Node n;
    n.op_type = "Identity";
    n.name = s_->unique(fmt::format("{}/Identity_{}", s_->stack.empty() ? "" : s_->stack.back().path, name));
    n.inputs = {v.name};
    n.outputs = {name};
    s_->edit.reserve(name);
    s_->dtypes[name] = v.dtype;
    s_->edit.add_node(std::move(n));
  }
  s_->model.graph.outputs.push_back(value_info(name, v.dtype, v.shape, dim_names));
}

Var Tracer::op(const std::string& op_type, const std::vector<Var>& inputs, std::map<std::string, Attribute> attrs,
               DType dtype, std::vector<int64_t> shape) {
  return op_multi(op_type, inputs, std::move(attrs), {{dtype, std::move(shape)}})[0];
}

std::vector<Var> Tracer::op_multi(const std::string& op_type, const std::vector<Var>& inputs,
                                  std::map<std::string, Attribute> attrs,
                                  std::vector<std::pair<DType, std::vector<int64_t>>> outputs,
                                  const std::string& domain) {
  const std::string& path = scope();
  const std::string base = fmt::format("{}/{}", path, op_type);
  s_->check_inputs(inputs, base);
  if (outputs.empty()) throw InvalidArgument(fmt::format("{}: a node needs at least one output", base));
  Node n;
  n.domain = domain;
  n.op_type = op_type;
  if (!domain.empty() && !s_->model.opsets.count(domain)) s_->model.opsets[domain] = 1;
  n.name = s_->unique(fmt::format("{}_{}", base, s_->counters[base]++));
  for (const auto& v : inputs) n.inputs.push_back(v.name);
  while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();  // trailing optionals
  n.attrs = std::move(attrs);
  std::vector<Var> result;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::string out = s_->unique(fmt::format("{}_output_{}", n.name, k));
    n.outputs.push_back(out);
    s_->dtypes[out] = outputs[k].first;
    result.push_back(Var{out, outputs[k].first, std::move(outputs[k].second)});
  }
  s_->edit.add_node(std::move(n));
  return result;
}

Var Tracer::stop_gradient(const Var& x) {
  return op_multi("StopGradient", {x}, {}, {{x.dtype, x.shape}}, kKilnDomain)[0];
}

Var Tracer::none() { return Var{"", DType::Float32, {}}; }

Var Tracer::constant(const Tensor& value, const std::string& hint) {
  if (!value.defined()) throw InvalidArgument(fmt::format("Tracer::constant '{}': the tensor is undefined", hint));
  const std::string path = scope();
  Node n;
  n.op_type = "Constant";
  n.name = s_->unique(fmt::format("{}/Constant_{}", path, s_->counters[path + "/Constant"]++));
  const std::string out = s_->unique(fmt::format("{}/{}", path, hint));
  n.outputs = {out};
  n.attrs["value"] = Attribute::of_tensor(value.clone());
  s_->dtypes[out] = value.dtype();
  s_->edit.add_node(std::move(n));
  return Var{out, value.dtype(), value.shape()};
}

Var Tracer::constant_ints(const std::vector<int64_t>& values, const std::string& hint) {
  return constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values), hint);
}

Var Tracer::constant_scalar(double value, DType dtype, const std::string& hint) {
  Tensor t = Tensor::empty(dtype, {});
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    t.data<T>()[0] = from_double<T>(value);
  });
  return constant(t, hint);
}

Var Tracer::parameter(const Module& m, const std::string& name) {
  auto cached = s_->parameters.find({&m, name});
  if (cached != s_->parameters.end()) return cached->second;
  const Module::Slot* slot = m.find_slot(name);
  if (slot == nullptr)
    throw KeyError(fmt::format("{} has no parameter or buffer '{}' (register it first)", m.type_name(), name));
  if (!slot->value.defined())
    throw InvalidArgument(fmt::format("{}: parameter or buffer '{}' holds no tensor", m.type_name(), name));
  const std::string& path = s_->path_of(m);
  const std::string key = path.empty() ? name : path + "." + name;
  const std::string init = s_->unique(key);          // differs from key only for modules of separate trees
  s_->model.graph.initializers[init] = slot->value;  // shares the module's storage until finish()
  s_->dtypes[init] = slot->value.dtype();
  s_->refs[init] = ParameterRef{&m, name};
  Var v{init, slot->value.dtype(), slot->value.shape()};
  s_->parameters.emplace(std::make_pair(&m, name), v);
  return v;
}

void Tracer::update_buffer(const Module& m, const std::string& name, const Var& new_value) {
  s_->check_inputs({new_value}, fmt::format("Tracer::update_buffer '{}'", name));
  bool is_buffer = false;
  for (const auto& b : m.buffers_) is_buffer = is_buffer || b.name == name;
  if (!is_buffer) throw KeyError(fmt::format("{} has no buffer '{}' to update", m.type_name(), name));
  s_->updates.push_back(BufferUpdate{&m, name, new_value.name, false});
}

std::vector<Tracer::BufferUpdate> Tracer::buffer_updates() const {
  std::vector<BufferUpdate> all = s_->updates;
  for (const Node& n : s_->model.graph.nodes) {
    if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.attr_int("training_mode", 0) == 0) continue;
    bool counted = false;
    for (size_t out = 1; out < 3 && out < n.outputs.size(); ++out) {
      const size_t in = out + 2;  // running_mean, running_var: inputs 3, 4 -> outputs 1, 2
      if (in >= n.inputs.size()) continue;
      auto ref = s_->refs.find(n.inputs[in]);
      if (ref == s_->refs.end() || ref->second.module->find_slot(ref->second.name) == nullptr) continue;
      all.push_back(BufferUpdate{ref->second.module, ref->second.name, n.outputs[out], !counted});
      counted = true;
    }
  }
  return all;
}

const std::map<std::string, Tracer::ParameterRef>& Tracer::parameter_refs() const { return s_->refs; }

void Tracer::push_scope(const Module& m) {
  if (s_->stack.size() > 1000)
    throw InvalidModel(fmt::format("{}: modules nested over 1000 deep (a module calling itself?)", m.type_name()));
  s_->stack.push_back(State::Frame{&m, s_->path_of(m), s_->sequence++});
}

void Tracer::pop_scope() {
  if (s_->stack.empty()) throw InvalidArgument("Tracer::pop_scope: no scope is open");
  s_->stack.pop_back();
}

const std::string& Tracer::scope() const {
  static const std::string root;
  return s_->stack.empty() ? root : s_->stack.back().path;
}

const std::vector<Tracer::Call>& Tracer::calls() const { return s_->calls; }

void Tracer::record_call(Call call) {
  if (s_->stack.empty() || s_->stack.back().module != call.module)
    throw InvalidArgument("Tracer::record_call: the call's module is not the module in scope");
  call.begin = s_->stack.back().begin;
  call.end = s_->sequence++;
  s_->calls.push_back(std::move(call));
}

Model Tracer::finish() const {
  Model m = s_->model;
  // Own copies: later changes to the module's tensors must not change a finished model.
  for (auto& [name, t] : m.graph.initializers) t = t.clone();
  return m;
}

}  // namespace kiln::nn
