// kiln::nn — define models the way torch.nn does and get trainable ONNX out.
//
//   using namespace kiln::nn;
//   manual_seed(0);
//   auto net = std::make_shared<Sequential>(std::vector<ModulePtr>{
//       std::make_shared<Conv2d>(Conv2dOptions(1, 8, 3).padding(1)), std::make_shared<ReLU>(),
//       std::make_shared<Flatten>(), std::make_shared<Linear>(8 * 28 * 28, 10)});
//   net->export_onnx("net.onnx", {{"input", {1, 1, 28, 28}}}, {{"input", {{0, "batch"}}}});
//   // initializers are named as torch's state_dict keys: "0.weight", "0.bias", "3.weight", ...
//   auto out = (*net)({x});                 // runs the traced graph in Kiln; hooks fire
//   net->load_state_dict(load_weights_file("torch_weights.safetensors"));
//
// A Module's forward works on symbolic values (Var) through a Tracer that emits ONNX nodes (opset
// 17). Parameters and buffers are real Tensors held by the modules, initialised as torch.nn's
// defaults from a seeded generator (manual_seed). Exporting walks forward once with the given
// input shapes; -1 / dynamic_axes dims stay symbolic in the ONNX file.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;

// ---- Random initialisation ---------------------------------------------------------------------
// torch.manual_seed's role: the generator that parameter initialisation draws from.
void manual_seed(uint64_t seed);
std::mt19937_64& default_generator();
// torch.nn.init's functions over the default generator (fan_in/fan_out as torch computes them:
// dim 1 times the receptive field for fan_in, dim 0 times it for fan_out).
void uniform_(Tensor& t, double low, double high);
void normal_(Tensor& t, double mean, double std);
void trunc_normal_(Tensor& t, double mean, double std, double a, double b);
void kaiming_uniform_(Tensor& t, double a);  // fan_in, leaky_relu gain: torch's Linear / Conv weights
void xavier_uniform_(Tensor& t, double gain = 1.0);
void constant_(Tensor& t, double value);
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);

// ---- Symbolic values and the tracer ------------------------------------------------------------
// A value of the graph being built: its name, dtype and shape (-1 for a dimension known only when
// the model runs).
struct Var {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t dim(int64_t i) const;  // negative i counts from the end; -1 when dynamic
};

// Builds the ONNX graph while modules run forward. Node and value names are made unique and
// prefixed with the module path ("layer1.0.conv1/Conv"); parameters become initializers named by
// their state_dict keys.
class Tracer {
 public:
  explicit Tracer(int64_t opset = 17);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A graph input ("input", dims with -1 for dynamic; `dim_names` names the dynamic ones).
  Var input(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
            const std::map<int64_t, std::string>& dim_names = {});
  void output(const Var& v, const std::string& name, const std::map<int64_t, std::string>& dim_names = {});

  // One node with one output of the given dtype and shape (the caller computes the shape: the
  // Tracer does not infer). `outputs` > 1: more outputs, shapes given by `extra_shapes` (else
  // unknown rank-0 placeholders the caller must not rely on).
  Var op(const std::string& op_type, const std::vector<Var>& inputs, std::map<std::string, Attribute> attrs,
         DType dtype, std::vector<int64_t> shape);
  // `domain`: an op of another domain (Kiln's own, "ai.kiln"), whose opset 1 the model then imports.
  std::vector<Var> op_multi(const std::string& op_type, const std::vector<Var>& inputs,
                            std::map<std::string, Attribute> attrs,
                            std::vector<std::pair<DType, std::vector<int64_t>>> outputs,
                            const std::string& domain = "");
  // x's value with no gradient behind it (ai.kiln.StopGradient, torch's detach()): the gradient
  // graph sends nothing back through it.
  Var stop_gradient(const Var& x);
  // An empty optional input (ONNX's "").
  static Var none();
  // A constant (a Constant node: not in the state_dict, and never trained — artifact generation
  // trains every float initializer that reaches the loss, so constants are not initializers).
  Var constant(const Tensor& value, const std::string& hint = "const");
  Var constant_ints(const std::vector<int64_t>& values, const std::string& hint = "shape");  // int64 [n]
  Var constant_scalar(double value, DType dtype, const std::string& hint = "scalar");        // rank 0
  // The initializer of module `m`'s parameter or buffer `name` (registered under its state_dict
  // key the first time; a shared module's parameter is one initializer).
  Var parameter(const Module& m, const std::string& name);

  // "This value is the new content of buffer `name` of `m`": when the model runs in Kiln in
  // training mode (operator()), the value is copied into the buffer after the run. Exported files
  // leave such values dangling, as torch's export of a train()-mode model does. Training-mode
  // BatchNormalization nodes whose running_mean / running_var inputs are buffers need no call:
  // they are detected (outputs 1 and 2), and the owning module's "num_batches_tracked" buffer, if
  // it has one, is incremented once per such node and run, as torch does.
  void update_buffer(const Module& m, const std::string& name, const Var& new_value);
  struct BufferUpdate {
    const Module* module;
    std::string name;          // the buffer's local name
    std::string value;         // the value holding its new content
    bool count_batch = false;  // also add 1 to the module's num_batches_tracked
  };
  std::vector<BufferUpdate> buffer_updates() const;  // explicit ones, then the detected ones

  // Initializer name (state_dict key) -> the module and local name it was read from.
  struct ParameterRef {
    const Module* module;
    std::string name;
  };
  const std::map<std::string, ParameterRef>& parameter_refs() const;

  // Module scope (Module::call pushes and pops it) and the calls recorded for hooks.
  void push_scope(const Module& m);
  void pop_scope();
  const std::string& scope() const;
  struct Call {
    const Module* module;
    std::vector<std::string> inputs, outputs;  // value names
    // Order of the call's start (pre-hooks) and end (hooks) among all starts and ends.
    int64_t begin = 0, end = 0;
  };
  const std::vector<Call>& calls() const;  // in the order the calls ended
  void record_call(Call call);             // a call of the module at the top of the scope

  // The graph built so far, as a Model (opset imports, initializers, inputs, outputs).
  Model finish() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// ---- Modules -----------------------------------------------------------------------------------
// torch's _IncompatibleKeys plus the shape mismatches (which torch and Kiln raise on, strict or
// not: `mismatched` feeds the error's message; a returned value has it empty).
struct IncompatibleKeys {
  std::vector<std::string> missing_keys, unexpected_keys;
  struct Mismatch {
    std::string key;
    Shape expected, got;
  };
  std::vector<Mismatch> mismatched;
  bool ok() const { return missing_keys.empty() && unexpected_keys.empty() && mismatched.empty(); }
  std::string describe() const;  // torch's wording: "Missing key(s) in state_dict: ..."
};

using StateDict = std::vector<std::pair<std::string, Tensor>>;  // torch's order

struct RemovableHandle {
  std::function<void()> remove;
};

// torch.onnx.export's shape arguments: example input shapes by input name, and dynamic axes by
// value name ({"input": {0: "batch"}}, outputs too).
using InputShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;
using DynamicAxes = std::map<std::string, std::map<int64_t, std::string>>;

struct ExportOptions {
  std::vector<DType> input_dtypes;        // default: float32 for every input
  std::vector<std::string> output_names;  // default: "output" (or output0, output1, ...)
  int64_t opset = 17;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module();

  // The computation over symbolic values. Subclasses implement forward; callers use call(), which
  // opens the module's scope and records the call for hooks.
  virtual std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) = 0;
  std::vector<Var> call(Tracer& t, const std::vector<Var>& inputs);
  Var call(Tracer& t, const Var& input);  // one in, one out (InvalidArgument otherwise)

  // torch's registration; names are checked (no '.', not empty, not taken).
  Tensor& register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor value, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_module(name, module);
    return module;
  }
  void add_module(const std::string& name, ModulePtr module);

  // torch's class name ("Conv2d"), used in repr and errors.
  virtual std::string type_name() const = 0;
  // torch's extra_repr ("3, 64, kernel_size=(7, 7), stride=(2, 2)...").
  virtual std::string extra_repr() const { return ""; }
  std::string repr() const;  // the indented tree torch prints

  // ---- torch.nn.Module's conveniences ----
  std::vector<std::pair<std::string, Tensor*>> named_parameters(bool recurse = true);
  std::vector<std::pair<std::string, Tensor*>> named_buffers(bool recurse = true);
  std::vector<std::pair<std::string, ModulePtr>> named_children() const;
  std::vector<std::pair<std::string, ModulePtr>> named_modules();  // "" is this module
  ModulePtr get_submodule(const std::string& target);              // KeyError with torch's message
  Tensor& get_parameter(const std::string& target);
  bool requires_grad(const std::string& parameter_name) const;  // a local name
  Module& requires_grad_(bool requires_grad = true);            // every parameter below
  std::vector<std::string> frozen_parameters();                 // state_dict keys with requires_grad false
  Module& train(bool mode = true);
  Module& eval() { return train(false); }
  bool training() const { return training_; }
  int64_t num_parameters(bool only_trainable = false);

  StateDict state_dict();  // parameters and persistent buffers, torch's order and keys
  // Copies values in (converting dtype as torch's copy_ does). strict: missing or unexpected keys
  // are an InvalidArgument with torch's message; shape mismatches always are. Everything is checked
  // before anything is copied: a failed load leaves the module as it was.
  IncompatibleKeys load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  void save_safetensors(const std::string& path);  // atomic
  IncompatibleKeys load_safetensors(const std::string& path, bool strict = true);

  // Hooks on this module, called when the model runs in Kiln (operator() below) with the actual
  // tensors: a pre-hook sees the inputs, a hook the inputs and outputs, in the order the modules
  // ran. An omitted optional value (Tracer::none(), torch's None) is an undefined Tensor at its
  // position. remove() detaches.
  using ForwardPreHook = std::function<void(Module&, const std::vector<Tensor>& inputs)>;
  using ForwardHook =
      std::function<void(Module&, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs)>;
  RemovableHandle register_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle register_forward_hook(ForwardHook hook);

  // ---- Export and execution ----
  // The model as ONNX: forward traced once over inputs of these shapes (-1 or dynamic_axes:
  // symbolic). Training mode exports BatchNorm with batch statistics (running-stat outputs) and
  // active Dropout; eval mode exports inference. Metadata "kiln.frozen_params" lists the frozen
  // parameters (artifacts generation honours it).
  Model to_onnx(const InputShapes& inputs, const DynamicAxes& dynamic_axes = {}, const ExportOptions& options = {});
  void export_onnx(const std::string& path, const InputShapes& example_input_shapes,
                   const DynamicAxes& dynamic_axes = {}, const ExportOptions& options = {});
  // Runs the model in Kiln on real tensors (traced per input signature and training mode; the
  // plan is cached until the module tree, hooks, train / eval or load_state_dict change anything;
  // parameters are fed each run, so values changed in place are seen). Inputs are named "input"
  // (or input0, input1, ...). Hooks observe (they cannot replace tensors) and fire after the run,
  // in call order. In training mode BatchNorm's running statistics are updated as torch updates
  // them (see Tracer::update_buffer). Dropout draws from the Session's run index, continued across
  // re-traces so that masks never repeat.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

 protected:
  Module();

 private:
  friend class Tracer;
  struct Slot {
    std::string name;
    Tensor value;
    bool requires_grad = true;
    bool persistent = true;
  };
  // deques: register_* return references that later registrations must not invalidate.
  std::deque<Slot> parameters_, buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  bool training_ = true;
  std::vector<std::pair<int, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int, ForwardHook>> hooks_;
  int next_hook_id_ = 0;
  struct RunCache;
  std::shared_ptr<RunCache> run_cache_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // lets a RemovableHandle outlive us
  const Slot* find_slot(const std::string& name) const;    // a parameter or buffer
  Slot* find_slot(const std::string& name);
  void check_new_name(const std::string& name, const char* what) const;
  void visit_state(const std::string& prefix, const std::function<void(const std::string&, Tensor&)>& f);
};

// ---- Containers ----------------------------------------------------------------------------------
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> modules);                               // named "0", "1", ...
  explicit Sequential(const std::vector<std::pair<std::string, ModulePtr>>& named);  // OrderedDict form
  void push_back(ModulePtr m);
  void push_back(const std::string& name, ModulePtr m);
  size_t size() const;
  ModulePtr operator[](size_t i) const;
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "Sequential"; }
};

// Holds modules; has no forward of its own (InvalidArgument if called).
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<ModulePtr> modules);
  void append(ModulePtr m);
  size_t size() const;
  ModulePtr operator[](size_t i) const;
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "ModuleList"; }
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& modules);
  void insert(const std::string& key, ModulePtr m);
  ModulePtr at(const std::string& key) const;  // KeyError
  bool contains(const std::string& key) const;
  std::vector<std::string> keys() const;
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override;
  std::string type_name() const override { return "ModuleDict"; }
};

// Reads a weights file into a name -> tensor map: safetensors, or .npz (numpy's savez).
std::map<std::string, Tensor> load_weights_file(const std::string& path);

}  // namespace kiln::nn
