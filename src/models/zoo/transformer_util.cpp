#include "models/zoo/transformer_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "kiln/error.h"
#include "kiln/nn/layers.h"
#include "models/nn/attention_ops.h"

namespace kiln::nn::zoo::transformers {

namespace {

const Config& value_of(const Config& c, const std::string& model, const std::string& key) {
  if (!c.is_object() || !c.contains(key)) throw InvalidArgument(fmt::format("{} config: '{}' is missing", model, key));
  return c.at(key);
}

[[noreturn]] void bad_value(const std::string& model, const std::string& key, const Config& v, const char* want) {
  throw InvalidArgument(fmt::format("{} config: '{}' must be {}, got {}", model, key, want, v.dump()));
}

}  // namespace

int64_t config_int(const Config& c, const std::string& model, const std::string& key, int64_t min) {
  const Config& v = value_of(c, model, key);
  if (!v.is_number_integer()) bad_value(model, key, v, "an integer");
  const int64_t x = v.get<int64_t>();
  if (x < min) bad_value(model, key, v, fmt::format("an integer >= {}", min).c_str());
  return x;
}

std::optional<int64_t> config_optional_int(const Config& c, const std::string& model, const std::string& key,
                                           int64_t min) {
  if (value_of(c, model, key).is_null()) return std::nullopt;
  return config_int(c, model, key, min);
}

double config_double(const Config& c, const std::string& model, const std::string& key) {
  const Config& v = value_of(c, model, key);
  if (!v.is_number()) bad_value(model, key, v, "a number");
  return v.get<double>();
}

double config_prob(const Config& c, const std::string& model, const std::string& key) {
  const double p = config_double(c, model, key);
  if (!(p >= 0.0 && p < 1.0)) bad_value(model, key, value_of(c, model, key), "a probability in [0, 1)");
  return p;
}

std::string config_string(const Config& c, const std::string& model, const std::string& key) {
  const Config& v = value_of(c, model, key);
  if (!v.is_string()) bad_value(model, key, v, "a string");
  return v.get<std::string>();
}

bool config_bool(const Config& c, const std::string& model, const std::string& key) {
  const Config& v = value_of(c, model, key);
  if (!v.is_boolean()) bad_value(model, key, v, "true or false");
  return v.get<bool>();
}

void require_divisible(const std::string& model, const std::string& numerator_key, int64_t numerator,
                       const std::string& denominator_key, int64_t denominator) {
  if (numerator % denominator != 0)
    throw ShapeError(fmt::format("{} config: {} ({}) is not a multiple of {} ({})", model, numerator_key, numerator,
                                 denominator_key, denominator));
}

ModulePtr make_activation(const std::string& model, const std::string& key, const std::string& name) {
  // A subset of transformers.activations.ACT2CLS, by the names HF's configs use.
  static const std::map<std::string, std::function<ModulePtr()>> table = {
      {"gelu", [] { return std::make_shared<GELU>("none"); }},
      {"gelu_python", [] { return std::make_shared<GELU>("none"); }},
      {"gelu_new", [] { return std::make_shared<GELU>("tanh"); }},
      {"gelu_pytorch_tanh", [] { return std::make_shared<GELU>("tanh"); }},
      {"relu", [] { return std::make_shared<ReLU>(); }},
      {"silu", [] { return std::make_shared<SiLU>(); }},
      {"swish", [] { return std::make_shared<SiLU>(); }},
      {"tanh", [] { return std::make_shared<Tanh>(); }},
      {"sigmoid", [] { return std::make_shared<Sigmoid>(); }},
      {"linear", [] { return std::make_shared<Identity>(); }},
  };
  auto it = table.find(name);
  if (it == table.end()) {
    std::string known;
    for (const auto& [n, f] : table) known += (known.empty() ? "" : ", ") + n;
    throw Unsupported(fmt::format("{} config: {} '{}' is not supported; Kiln knows {}", model, key, name, known));
  }
  return it->second();
}

void hf_normal_init(Module& m, double std) {
  for (auto& [name, tensor] : m.named_parameters(false)) {
    if (name == "weight") normal_(*tensor, 0.0, std);
    else if (name == "bias") constant_(*tensor, 0.0);
  }
}

std::shared_ptr<Linear> hf_linear(int64_t in, int64_t out, double std, bool bias) {
  auto l = std::make_shared<Linear>(in, out, bias);
  hf_normal_init(*l, std);
  return l;
}

std::shared_ptr<Embedding> hf_embedding(int64_t n, int64_t dim, double std, std::optional<int64_t> padding_idx) {
  auto e = std::make_shared<Embedding>(n, dim, padding_idx);
  hf_normal_init(*e, std);
  if (padding_idx) {
    float* row = e->get_parameter("weight").data<float>() + *e->padding_idx() * dim;
    std::fill(row, row + dim, 0.f);
  }
  return e;
}

TiedLinear::TiedLinear(std::shared_ptr<Embedding> embedding, double scale)
    : embedding_(std::move(embedding)), scale_(scale) {
  register_parameter("weight", embedding_->get_parameter("weight"));
}

std::vector<Var> TiedLinear::forward(Tracer& t, const std::vector<Var>& inputs) {
  Var x = inputs.at(0);
  if (scale_ != 1.0) x = attn::binary(t, "Mul", x, t.constant_scalar(scale_, x.dtype, "scale"));
  const Var w = t.parameter(*embedding_, "weight");  // [vocab, dim]
  return {attn::matmul(t, x, attn::transpose(t, w, {1, 0}))};
}

std::string TiedLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias=False", embedding_->embedding_dim(),
                     embedding_->num_embeddings());
}

Var padding_mask(Tracer& t, const Var& mask) {
  const Var m = t.op("Cast", {mask}, {{"to", Attribute::of_int(static_cast<int64_t>(dtype_to_onnx(DType::Float32)))}},
                     DType::Float32, mask.shape);
  const Var inverted =
      attn::binary(t, "Sub", t.constant_scalar(1.0, DType::Float32, "one"), attn::unsqueeze(t, m, {1, 2}));
  return attn::binary(t, "Mul", inverted, t.constant_scalar(float32_lowest(), DType::Float32, "mask_value"));
}

Var lm_loss(Tracer& t, const Var& logits, const Var& labels) {
  const Var flat_logits = attn::reshape(t, logits, {-1, logits.dim(2)});
  const Var flat_labels = attn::reshape(t, labels, {-1});
  return t.op("SoftmaxCrossEntropyLoss", {flat_logits, flat_labels},
              {{"reduction", Attribute::of_string("mean")}, {"ignore_index", Attribute::of_int(-100)}}, logits.dtype,
              {});
}

Var select_token(Tracer& t, const Var& x, int64_t index) {
  return t.op("Gather", {x, t.constant(Tensor::scalar<int64_t>(index), "token_index")},
              {{"axis", Attribute::of_int(1)}}, x.dtype, {x.dim(0), x.dim(2)});
}

Var position_ids(Tracer& t, const Var& ids) {
  const Var len =
      t.op("Shape", {ids}, {{"start", Attribute::of_int(1)}, {"end", Attribute::of_int(2)}}, DType::Int64, {1});
  const Var zero = t.constant(Tensor::scalar<int64_t>(0), "zero");
  const Var one = t.constant(Tensor::scalar<int64_t>(1), "one");
  const Var positions = t.op("Range", {zero, attn::squeeze(t, len, {0}), one}, {}, DType::Int64, {ids.dim(1)});
  return attn::unsqueeze(t, positions, {0});
}

Var split_heads(Tracer& t, const Var& x, int64_t heads) {
  const int64_t width = x.dim(2);
  if (width == -1 || width % heads != 0)
    throw ShapeError(fmt::format("{}: cannot split a last dim of {} into {} heads", t.scope(), width, heads));
  return attn::transpose(t, attn::reshape(t, x, {0, 0, heads, width / heads}), {0, 2, 1, 3});
}

Var merge_heads(Tracer& t, const Var& x) {
  const int64_t width = x.dim(1) == -1 || x.dim(3) == -1 ? -1 : x.dim(1) * x.dim(3);
  if (width == -1) throw ShapeError(fmt::format("{}: merging heads needs static head count and size", t.scope()));
  return attn::reshape(t, attn::transpose(t, x, {0, 2, 1, 3}), {0, 0, width});
}

Var append_past(Tracer& t, const Var& past, const Var& now) {
  return t.op("Concat", {past, now}, {{"axis", Attribute::of_int(2)}}, now.dtype,
              {now.dim(0), now.dim(1), -1, now.dim(3)});
}

double float32_lowest() { return static_cast<double>(std::numeric_limits<float>::lowest()); }

namespace {

// True where key position j comes after query i (HF's causal `bias` buffer, negated), for lengths
// known only at run time: [S, S], or with `keys_past` [S, L] with query i at position L - S + i.
Var causal_after(Tracer& t, const Var& q, const Var& k, bool keys_past) {
  auto length = [&](const Var& x) {
    return t.op("Shape", {x}, {{"start", Attribute::of_int(2)}, {"end", Attribute::of_int(3)}}, DType::Int64, {1});
  };
  const Var zero = t.constant(Tensor::scalar<int64_t>(0), "zero");
  const Var one = t.constant(Tensor::scalar<int64_t>(1), "one");
  auto range = [&](const Var& len, int64_t dim) {
    return t.op("Range", {zero, attn::squeeze(t, len, {0}), one}, {}, DType::Int64, {dim});
  };
  const Var qlen = length(q);
  const Var rq = range(qlen, q.dim(2));
  if (!keys_past)
    return t.op("Less", {attn::unsqueeze(t, rq, {1}), attn::unsqueeze(t, rq, {0})}, {}, DType::Bool,
                {q.dim(2), q.dim(2)});
  const Var klen = length(k);
  const Var shifted = attn::binary(t, "Add", attn::unsqueeze(t, rq, {1}), attn::binary(t, "Sub", klen, qlen));
  return t.op("Less", {shifted, attn::unsqueeze(t, range(klen, k.dim(2)), {0})}, {}, DType::Bool, {q.dim(2), k.dim(2)});
}

}  // namespace

Var eager_attention(Tracer& t, const Var& q, const Var& k, const Var& v, const EagerAttention& a) {
  Var scores = attn::matmul(t, q, attn::transpose(t, k, {0, 1, 3, 2}));  // [B, H, S, S]
  for (double d : a.divisors) scores = attn::binary(t, "Div", scores, t.constant_scalar(d, scores.dtype, "scale"));
  if (a.causal)
    scores = attn::where(t, causal_after(t, q, k, a.keys_past),
                         t.constant_scalar(float32_lowest(), scores.dtype, "mask_value"), scores);
  if (a.additive_mask) scores = attn::binary(t, "Add", scores, *a.additive_mask);
  Var probs = t.op("Softmax", {scores}, {{"axis", Attribute::of_int(-1)}}, scores.dtype, scores.shape);
  if (a.dropout != nullptr) probs = a.dropout->call(t, probs);
  return attn::matmul(t, probs, v);
}

}  // namespace kiln::nn::zoo::transformers
