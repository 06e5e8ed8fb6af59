// The zoo's "gpt2": Hugging Face's GPT2LMHeadModel (modeling_gpt2.py, eager attention) with its
// module tree, state_dict keys, GPT2Config names and defaults, and _init_weights.
//
//   transformer.wte, transformer.wpe, transformer.h.N.ln_1, .attn.c_attn, .attn.c_proj, .ln_2,
//   .mlp.c_fc, .mlp.c_proj, transformer.ln_f, lm_head
//
// c_attn, c_proj and c_fc are HF's Conv1D: weight [in, out] (a Linear's transposed), y = x W + b.
//
// Tied weights: lm_head.weight IS transformer.wte.weight, as after HF's tie_weights. Both keys are
// in state_dict() (as torch's state_dict of the HF model has them), holding one storage; loading
// copies both keys into it, the later (lm_head.weight) last, as torch's load_state_dict does. A
// file saved by HF's save_pretrained omits lm_head.weight: load it with strict=false (the missing
// key is then the only one reported). Exported ONNX has one initializer,
// "transformer.wte.weight", read by the embedding's Gather and the head's MatMul, so training
// updates the tied matrix with the sum of both gradients.
//
// Input input_ids int64 [B, S] (S <= n_positions); output logits [B, S, vocab_size]. The causal
// mask is built from S at run time.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/zoo.h"
#include "models/nn/attention_ops.h"
#include "models/zoo/transformer_util.h"

namespace kiln::nn::zoo {

namespace {

using namespace transformers;
const std::string kModel = "gpt2";

struct Gpt2Config {
  int64_t vocab_size, n_positions, n_embd, n_layer, n_head, n_inner;
  std::string activation_function;
  double resid_pdrop, embd_pdrop, attn_pdrop, layer_norm_epsilon, initializer_range;
  bool scale_attn_weights, scale_attn_by_inverse_layer_idx;
  bool with_past;  // Kiln's key: the decoder-with-past graph generation runs with a KV cache

  static Gpt2Config from(const Config& c) {
    Gpt2Config g;
    g.vocab_size = config_int(c, kModel, "vocab_size");
    g.n_positions = config_int(c, kModel, "n_positions");
    g.n_embd = config_int(c, kModel, "n_embd");
    g.n_layer = config_int(c, kModel, "n_layer", 0);
    g.n_head = config_int(c, kModel, "n_head");
    require_divisible(kModel, "n_embd", g.n_embd, "n_head", g.n_head);
    g.n_inner = config_optional_int(c, kModel, "n_inner").value_or(4 * g.n_embd);  // HF: None -> 4 * n_embd
    g.activation_function = config_string(c, kModel, "activation_function");
    make_activation(kModel, "activation_function", g.activation_function);  // fails before any weight is drawn
    g.resid_pdrop = config_prob(c, kModel, "resid_pdrop");
    g.embd_pdrop = config_prob(c, kModel, "embd_pdrop");
    g.attn_pdrop = config_prob(c, kModel, "attn_pdrop");
    g.layer_norm_epsilon = config_double(c, kModel, "layer_norm_epsilon");
    g.initializer_range = config_double(c, kModel, "initializer_range");
    g.scale_attn_weights = config_bool(c, kModel, "scale_attn_weights");
    g.scale_attn_by_inverse_layer_idx = config_bool(c, kModel, "scale_attn_by_inverse_layer_idx");
    g.with_past = config_bool(c, kModel, "with_past");
    return g;
  }
};

// HF's pytorch_utils.Conv1D: weight [nx, nf] ~ N(0, 0.02), bias [nf] zero; y = x @ weight + bias.
class Conv1D : public Module {
 public:
  Conv1D(int64_t nf, int64_t nx, double std) : nf_(nf), nx_(nx) {
    normal_(register_parameter("weight", Tensor::zeros(DType::Float32, {nx, nf})), 0.0, std);
    register_parameter("bias", Tensor::zeros(DType::Float32, {nf}));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    if (inputs.size() != 1)
      throw InvalidArgument(fmt::format("Conv1D: forward takes one input, got {}", inputs.size()));
    const Var& x = inputs[0];
    if (x.rank() < 2 || (x.dim(-1) != -1 && x.dim(-1) != nx_))
      throw ShapeError(fmt::format("Conv1D: input '{}' must end in nx={} features, got rank {} with last dim {}",
                                   x.name, nx_, x.rank(), x.rank() ? x.dim(-1) : 0));
    return {attn::binary(t, "Add", attn::matmul(t, x, t.parameter(*this, "weight")), t.parameter(*this, "bias"))};
  }
  std::string type_name() const override { return "Conv1D"; }
  std::string extra_repr() const override { return fmt::format("nf={}, nx={}", nf_, nx_); }

 private:
  int64_t nf_, nx_;
};

// inputs {hidden [B, S, E]} -> [B, S, E]; with the cache, inputs {hidden, past key [B, H, P, d],
// past value, additive mask [B, 1, 1, P + S]} -> {output, present key [B, H, P + S, d], present
// value}: the keys and values of this call appended to the past ones, as HF's layer_past.
class GPT2Attention : public Module {
 public:
  GPT2Attention(const Gpt2Config& c, int64_t layer_idx) : heads_(c.n_head), embed_(c.n_embd) {
    const double proj_std = c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.n_layer));
    c_attn_ = register_module("c_attn", std::make_shared<Conv1D>(3 * c.n_embd, c.n_embd, c.initializer_range));
    // HF's _init_weights rescales every c_proj.weight by 1/sqrt(2 * n_layer) (GPT-2 paper).
    c_proj_ = register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd, proj_std));
    attn_dropout_ = register_module("attn_dropout", std::make_shared<Dropout>(c.attn_pdrop));
    resid_dropout_ = register_module("resid_dropout", std::make_shared<Dropout>(c.resid_pdrop));
    // HF divides the scores by sqrt(head_dim), then by (layer_idx + 1): two divisions, kept as two.
    const int64_t head_dim = c.n_embd / c.n_head;  // an integer, as HF's n_embd // n_head
    if (c.scale_attn_weights) divisors_.push_back(std::sqrt(static_cast<double>(head_dim)));
    if (c.scale_attn_by_inverse_layer_idx) divisors_.push_back(static_cast<double>(layer_idx + 1));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var qkv = c_attn_->call(t, inputs.at(0));
    const std::vector<int64_t> part{qkv.dim(0), qkv.dim(1), embed_};
    auto parts = t.op_multi("Split", {qkv}, {{"axis", Attribute::of_int(2)}},
                            {{qkv.dtype, part}, {qkv.dtype, part}, {qkv.dtype, part}});
    const Var q = split_heads(t, parts[0], heads_);
    Var k = split_heads(t, parts[1], heads_), v = split_heads(t, parts[2], heads_);
    EagerAttention a{.divisors = divisors_, .causal = true, .dropout = attn_dropout_.get()};
    if (inputs.size() == 4) {
      k = append_past(t, inputs[1], k);
      v = append_past(t, inputs[2], v);
      a.keys_past = true;
      a.additive_mask = inputs[3];
    }
    const Var context = eager_attention(t, q, k, v, a);
    const Var out = resid_dropout_->call(t, c_proj_->call(t, merge_heads(t, context)));
    if (inputs.size() == 4) return {out, k, v};
    return {out};
  }
  std::string type_name() const override { return "GPT2Attention"; }

 private:
  int64_t heads_, embed_;
  std::vector<double> divisors_;
  ModulePtr c_attn_, c_proj_, attn_dropout_, resid_dropout_;
};

class GPT2MLP : public Module {
 public:
  explicit GPT2MLP(const Gpt2Config& c) {
    const double proj_std = c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.n_layer));
    c_fc_ = register_module("c_fc", std::make_shared<Conv1D>(c.n_inner, c.n_embd, c.initializer_range));
    c_proj_ = register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_inner, proj_std));
    act_ = register_module("act", make_activation(kModel, "activation_function", c.activation_function));
    dropout_ = register_module("dropout", std::make_shared<Dropout>(c.resid_pdrop));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    return {dropout_->call(t, c_proj_->call(t, act_->call(t, c_fc_->call(t, inputs.at(0)))))};
  }
  std::string type_name() const override { return "GPT2MLP"; }

 private:
  ModulePtr c_fc_, c_proj_, act_, dropout_;
};

// Pre-LayerNorm block: h = x + attn(ln_1(x)); h + mlp(ln_2(h))
class GPT2Block : public Module {
 public:
  GPT2Block(const Gpt2Config& c, int64_t layer_idx) {
    const std::vector<int64_t> shape{c.n_embd};
    ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(shape, c.layer_norm_epsilon));
    attn_ = register_module("attn", std::make_shared<GPT2Attention>(c, layer_idx));
    ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(shape, c.layer_norm_epsilon));
    mlp_ = register_module("mlp", std::make_shared<GPT2MLP>(c));
  }
  // inputs {x} -> {y}, or with the cache {x, past key, past value, mask} -> {y, present key, present value}
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const Var& x = inputs.at(0);
    std::vector<Var> attn_inputs = inputs;
    attn_inputs[0] = ln_1_->call(t, x);
    std::vector<Var> out = attn_->call(t, attn_inputs);
    const Var h = attn::binary(t, "Add", out[0], x);
    out[0] = attn::binary(t, "Add", h, mlp_->call(t, ln_2_->call(t, h)));
    return out;
  }
  std::string type_name() const override { return "GPT2Block"; }

 private:
  ModulePtr ln_1_, attn_, ln_2_, mlp_;
};

// inputs {input_ids} -> {hidden states after ln_f}; with_past: inputs {input_ids [B, S],
// attention_mask [B, P + S], position_ids [B, S], then each layer's past key and value [B, H, P, d]}
// -> {hidden states, then each layer's present key and value [B, H, P + S, d]}.
class GPT2Model : public Module {
 public:
  explicit GPT2Model(const Gpt2Config& c) : n_positions_(c.n_positions), with_past_(c.with_past) {
    wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
    wpe_ = register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd));
    hf_normal_init(*wte_, c.initializer_range);
    hf_normal_init(*wpe_, c.initializer_range);
    drop_ = register_module("drop", std::make_shared<Dropout>(c.embd_pdrop));
    h_ = register_module("h", std::make_shared<ModuleList>());
    for (int64_t i = 0; i < c.n_layer; ++i) h_->append(std::make_shared<GPT2Block>(c, i));
    ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(std::vector<int64_t>{c.n_embd}, c.layer_norm_epsilon));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    const size_t expected = with_past_ ? 3 + 2 * h_->size() : 1;
    if (inputs.size() != expected)
      throw InvalidArgument(fmt::format("gpt2: forward takes {} inputs ({}), got {}", expected,
                                        with_past_ ? "input_ids, attention_mask, position_ids and each layer's past "
                                                     "key and value"
                                                   : "input_ids",
                                        inputs.size()));
    const Var& ids = inputs[0];
    if (ids.rank() != 2 || (ids.dtype != DType::Int64 && ids.dtype != DType::Int32))
      throw TypeError(fmt::format("gpt2: input '{}' must be int64 [batch, sequence], got {} of rank {}", ids.name,
                                  dtype_name(ids.dtype), ids.rank()));
    if (ids.dim(1) > n_positions_)
      throw ShapeError(fmt::format("gpt2: sequence length {} exceeds n_positions {}", ids.dim(1), n_positions_));
    const Var positions = with_past_ ? inputs[2] : position_ids(t, ids);
    Var h = attn::binary(t, "Add", wte_->call(t, ids), wpe_->call(t, positions));
    h = drop_->call(t, h);
    if (!with_past_) {
      for (size_t i = 0; i < h_->size(); ++i) h = (*h_)[i]->call(t, h);
      return {ln_f_->call(t, h)};
    }
    const Var mask = padding_mask(t, inputs[1]);
    std::vector<Var> out(1);
    for (size_t i = 0; i < h_->size(); ++i) {
      const std::vector<Var> block = (*h_)[i]->call(t, {h, inputs[3 + 2 * i], inputs[4 + 2 * i], mask});
      h = block[0];
      out.push_back(block[1]);
      out.push_back(block[2]);
    }
    out[0] = ln_f_->call(t, h);
    return out;
  }
  std::string type_name() const override { return "GPT2Model"; }
  const std::shared_ptr<Embedding>& wte() const { return wte_; }

 private:
  int64_t n_positions_;
  bool with_past_;
  std::shared_ptr<Embedding> wte_, wpe_;
  ModulePtr drop_, ln_f_;
  std::shared_ptr<ModuleList> h_;
};

class GPT2LMHeadModel : public Module {
 public:
  explicit GPT2LMHeadModel(const Gpt2Config& c) {
    auto transformer = register_module("transformer", std::make_shared<GPT2Model>(c));
    transformer_ = transformer;
    lm_head_ = register_module("lm_head", std::make_shared<TiedLinear>(transformer->wte()));
  }
  std::vector<Var> forward(Tracer& t, const std::vector<Var>& inputs) override {
    std::vector<Var> out = transformer_->call(t, inputs);
    out[0] = lm_head_->call(t, out[0]);
    return out;
  }
  std::string type_name() const override { return "GPT2LMHeadModel"; }

 private:
  ModulePtr transformer_, lm_head_;
};

int64_t example_length(const Config& c) { return std::min<int64_t>(16, config_int(c, kModel, "n_positions")); }

// The decoder-with-past graph's inputs and outputs, in optimum's names.
InputShapes example_inputs(const Config& c) {
  const int64_t s = example_length(c);
  if (!config_bool(c, kModel, "with_past")) return {{"input_ids", {2, s}}};
  const int64_t past = 3, heads = config_int(c, kModel, "n_head"), dim = config_int(c, kModel, "n_embd") / heads;
  InputShapes in = {{"input_ids", {2, s}}, {"attention_mask", {2, past + s}}, {"position_ids", {2, s}}};
  for (int64_t i = 0; i < config_int(c, kModel, "n_layer", 0); ++i)
    for (const char* kind : {"key", "value"})
      in.push_back({fmt::format("past_key_values.{}.{}", i, kind), {2, heads, past, dim}});
  return in;
}

std::vector<std::string> output_names(const Config& c) {
  std::vector<std::string> out = {"logits"};
  if (config_bool(c, kModel, "with_past"))
    for (int64_t i = 0; i < config_int(c, kModel, "n_layer", 0); ++i)
      for (const char* kind : {"key", "value"}) out.push_back(fmt::format("present.{}.{}", i, kind));
  return out;
}

DynamicAxes dynamic_axes(const Config& c) {
  DynamicAxes axes = {{"input_ids", {{0, "batch"}, {1, "sequence"}}}, {"logits", {{0, "batch"}, {1, "sequence"}}}};
  if (!config_bool(c, kModel, "with_past")) return axes;
  axes["attention_mask"] = {{0, "batch"}, {1, "total_sequence"}};
  axes["position_ids"] = {{0, "batch"}, {1, "sequence"}};
  for (int64_t i = 0; i < config_int(c, kModel, "n_layer", 0); ++i)
    for (const char* kind : {"key", "value"}) {
      axes[fmt::format("past_key_values.{}.{}", i, kind)] = {{0, "batch"}, {2, "past_sequence"}};
      axes[fmt::format("present.{}.{}", i, kind)] = {{0, "batch"}, {2, "total_sequence"}};
    }
  return axes;
}

struct Registrar {
  Registrar() {
    ZooEntry e;
    e.name = kModel;
    e.description = "GPT-2 decoder for causal language modelling (HF GPT2LMHeadModel keys, lm_head tied to wte)";
    e.default_config = {{"vocab_size", 50257},
                        {"n_positions", 1024},
                        {"n_embd", 768},
                        {"n_layer", 12},
                        {"n_head", 12},
                        {"n_inner", nullptr},
                        {"activation_function", "gelu_new"},
                        {"resid_pdrop", 0.1},
                        {"embd_pdrop", 0.1},
                        {"attn_pdrop", 0.1},
                        {"layer_norm_epsilon", 1e-5},
                        {"initializer_range", 0.02},
                        {"scale_attn_weights", true},
                        {"scale_attn_by_inverse_layer_idx", false},
                        {"with_past", false}};
    e.create = [](const Config& c) -> ModulePtr { return std::make_shared<GPT2LMHeadModel>(Gpt2Config::from(c)); };
    e.example_inputs = example_inputs;
    e.dynamic_axes = dynamic_axes;
    e.output_names = output_names;
    e.input_dtypes = [](const Config& c) {
      std::vector<DType> d(example_inputs(c).size(), DType::Float32);
      for (size_t i = 0; i < std::min<size_t>(3, d.size()); ++i) d[i] = DType::Int64;
      return d;
    };
    register_model(std::move(e));
  }
} registrar;

}  // namespace

}  // namespace kiln::nn::zoo
