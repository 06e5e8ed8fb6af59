// MultiheadAttention as torch.nn.functional.multi_head_attention_forward computes it, emitted as
// plain ONNX. Internally the batch comes first ([N, L, E]); sequence-first inputs are transposed
// in and out. Scores are (q / sqrt(head_dim)) @ k^T per head, masked, softmaxed over the keys.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "attention_ops.h"
#include "kiln/error.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/transformer.h"

namespace kiln::nn {

using attn::binary;
using attn::matmul;
using attn::reshape;
using attn::squeeze;
using attn::transpose;
using attn::unsqueeze;
using attn::where;

namespace {

bool present(const std::vector<Var>& inputs, size_t i) { return i < inputs.size() && !inputs[i].name.empty(); }

std::string describe(const Var& v) { return fmt::format("{}[{}]", dtype_name(v.dtype), fmt::join(v.shape, ", ")); }

bool is_float(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::Float16 || d == DType::BFloat16;
}

// Applies a torch-style mask to scores [N, H, L, S]: a bool mask sets the True places to -inf (as
// torch's masked_fill; Where keeps the other scores bit for bit), a float mask is added.
Var apply_mask(Tracer& t, const Var& scores, const Var& mask, const std::string& what) {
  if (mask.dtype == DType::Bool) {
    const Var neg_inf = t.constant_scalar(-std::numeric_limits<double>::infinity(), scores.dtype, "neg_inf");
    return where(t, mask, neg_inf, scores);
  }
  if (mask.dtype != scores.dtype)
    throw TypeError(fmt::format("MultiheadAttention: {} must be bool or {} like the query, got {}", what,
                                dtype_name(scores.dtype), dtype_name(mask.dtype)));
  return binary(t, "Add", scores, mask);
}

// The first-dim size of `x` as an int64 scalar computed at run time.
Var dim_scalar(Tracer& t, const Var& x, int64_t axis) {
  const Var s =
      t.op("Shape", {x}, {{"start", Attribute::of_int(axis)}, {"end", Attribute::of_int(axis + 1)}}, DType::Int64, {1});
  return squeeze(t, s, {0});
}

// bool [L, S], True where key position j > query position i: torch's
// generate_square_subsequent_mask as a condition, for any L and S and sizes known only at run time.
Var causal_mask(Tracer& t, const Var& q, const Var& k) {
  const Var zero = t.constant(Tensor::scalar<int64_t>(0), "zero");
  const Var one = t.constant(Tensor::scalar<int64_t>(1), "one");
  const Var rows = t.op("Range", {zero, dim_scalar(t, q, 1), one}, {}, DType::Int64, {q.dim(1)});
  const Var cols = t.op("Range", {zero, dim_scalar(t, k, 1), one}, {}, DType::Int64, {k.dim(1)});
  return t.op("Less", {unsqueeze(t, rows, {1}), unsqueeze(t, cols, {0})}, {}, DType::Bool, {q.dim(1), k.dim(1)});
}

const char* const kWhere = "MultiheadAttention";  // Module::call prefixes the module's path

// query, key and value: 3-D (batched) or 2-D (unbatched) alike, of one float dtype, embed_dim wide;
// key and value of one shape.
void check_inputs(const std::vector<Var>& inputs, int64_t e) {
  if (inputs.size() < 3 || inputs.size() > 5 || !present(inputs, 0) || !present(inputs, 1) || !present(inputs, 2))
    throw InvalidArgument(
        fmt::format("{}: forward takes (query, key, value[, key_padding_mask][, attn_mask]), got {} "
                    "inputs",
                    kWhere, inputs.size()));
  const Var &q = inputs[0], &k = inputs[1], &v = inputs[2];
  for (const auto& [name, x] : {std::pair{"query", &q}, std::pair{"key", &k}, std::pair{"value", &v}}) {
    if (x->rank() != q.rank() || (x->rank() != 3 && x->rank() != 2))
      throw ShapeError(
          fmt::format("{}: query, key and value must all be 3-D (batched) or 2-D (unbatched), got "
                      "query {}, key {}, value {}",
                      kWhere, describe(q), describe(k), describe(v)));
    if (!is_float(x->dtype) || x->dtype != q.dtype)
      throw TypeError(fmt::format("{}: {} is {}; query, key and value must share one floating-point dtype", kWhere,
                                  name, describe(*x)));
    if (x->dim(-1) != -1 && x->dim(-1) != e)
      throw ShapeError(fmt::format("{}: {} is {} but embed_dim is {}", kWhere, name, describe(*x), e));
  }
  for (int64_t i = 0; i < k.rank(); ++i)
    if (k.dim(i) != -1 && v.dim(i) != -1 && k.dim(i) != v.dim(i))
      throw ShapeError(
          fmt::format("{}: key {} and value {} must have the same shape", kWhere, describe(k), describe(v)));
}

// Query, key and value as one step leaves them; `self_attention` (all three the same value) and
// `kv_same` (key is value) pick the packed projection and avoid duplicate work.
struct Qkv {
  Var q, k, v;
  bool self_attention = false, kv_same = false;
};

// To [N, L, E]: sequence-first inputs are transposed, unbatched ones get a batch of one.
Qkv to_batch_first(Tracer& t, const std::vector<Var>& inputs, bool unbatched, bool batch_first) {
  auto convert = [&](const Var& x) {
    if (unbatched) return unsqueeze(t, x, {0});
    return batch_first ? x : transpose(t, x, {1, 0, 2});
  };
  Qkv r;
  r.self_attention = inputs[0].name == inputs[1].name && inputs[1].name == inputs[2].name;
  r.kv_same = inputs[1].name == inputs[2].name;
  r.q = convert(inputs[0]);
  r.k = r.self_attention ? r.q : convert(inputs[1]);
  r.v = r.kv_same ? r.k : convert(inputs[2]);
  return r;
}

// The input projections: one MatMul over the packed weight w [3E, E] for self-attention (torch's
// _in_projection_packed), else w (and the bias b) split into its q, k, v rows.
Qkv project(Tracer& t, const Qkv& x, const Var& w, const std::optional<Var>& b, int64_t e) {
  auto linear = [&](const Var& in, const Var& weight, const std::optional<Var>& bias) {
    Var y = matmul(t, in, transpose(t, weight, {1, 0}));
    return bias ? binary(t, "Add", y, *bias) : y;
  };
  Qkv r = x;
  if (x.self_attention) {
    const std::vector<int64_t> shape{x.q.dim(0), x.q.dim(1), e};
    auto parts = t.op_multi("Split", {linear(x.q, w, b)}, {{"axis", Attribute::of_int(2)}},
                            {{x.q.dtype, shape}, {x.q.dtype, shape}, {x.q.dtype, shape}});
    r.q = parts[0], r.k = parts[1], r.v = parts[2];
    return r;
  }
  auto ws = t.op_multi("Split", {w}, {{"axis", Attribute::of_int(0)}},
                       {{w.dtype, {e, e}}, {w.dtype, {e, e}}, {w.dtype, {e, e}}});
  std::vector<std::optional<Var>> bs(3);
  if (b) {
    auto parts = t.op_multi("Split", {*b}, {{"axis", Attribute::of_int(0)}},
                            {{b->dtype, {e}}, {b->dtype, {e}}, {b->dtype, {e}}});
    for (size_t i = 0; i < 3; ++i) bs[i] = parts[i];
  }
  r.q = linear(x.q, ws[0], bs[0]);
  r.k = linear(x.k, ws[1], bs[1]);
  r.v = x.kv_same ? linear(x.k, ws[2], bs[2]) : linear(x.v, ws[2], bs[2]);
  return r;
}

// The heads: q [N, H, L, D] scaled by 1/sqrt(D) (torch divides q before the product), k as
// [N, H, D, S], v as [N, H, S, D]; scaled_q is the scaled q before the split, [N, L, E].
struct Heads {
  Var scaled_q, q, k, v;
};

Heads split_heads(Tracer& t, const Qkv& p, int64_t h, int64_t d) {
  Heads r;
  r.scaled_q = binary(t, "Div", p.q, t.constant_scalar(std::sqrt(static_cast<double>(d)), p.q.dtype, "sqrt_head_dim"));
  r.q = transpose(t, reshape(t, r.scaled_q, {0, 0, h, d}), {0, 2, 1, 3});
  r.k = transpose(t, reshape(t, p.k, {0, 0, h, d}), {0, 2, 3, 1});
  r.v = transpose(t, reshape(t, p.v, {0, 0, h, d}), {0, 2, 1, 3});
  return r;
}

// attn_mask as [L, S], or torch's [N * H, L, S] reshaped to [N, H, L, S]; checked against the
// target length l and source length s.
Var attn_mask_4d(Tracer& t, Var mask, int64_t h, int64_t l, int64_t s) {
  if (mask.rank() == 3) {
    const Var tail = t.op("Shape", {mask}, {{"start", Attribute::of_int(1)}}, DType::Int64, {2});
    const Var target =
        t.op("Concat", {t.constant_ints({-1, h}), tail}, {{"axis", Attribute::of_int(0)}}, DType::Int64, {4});
    const int64_t nh = mask.dim(0);
    mask = t.op("Reshape", {mask, target}, {}, mask.dtype, {nh == -1 ? -1 : nh / h, h, mask.dim(1), mask.dim(2)});
  } else if (mask.rank() != 2) {
    throw ShapeError(
        fmt::format("{}: attn_mask must be [L, S] or [N * num_heads, L, S], got {}", kWhere, describe(mask)));
  }
  if ((mask.dim(-2) != -1 && l != -1 && mask.dim(-2) != l) || (mask.dim(-1) != -1 && s != -1 && mask.dim(-1) != s))
    throw ShapeError(fmt::format("{}: attn_mask {} does not fit target length {} and source length {}", kWhere,
                                 describe(mask), l, s));
  return mask;
}

// scores [N, H, L, S] with attn_mask (or, without one, the causal mask when asked for) and
// key_padding_mask applied; q is the scaled query [N, L, E] and k the projected key [N, S, E].
Var mask_scores(Tracer& t, Var scores, const std::vector<Var>& inputs, const Var& q, const Var& k, int64_t h,
                bool is_causal) {
  const bool unbatched = inputs[0].rank() == 2;
  const int64_t l = q.dim(1), s = k.dim(1);
  if (present(inputs, 4)) scores = apply_mask(t, scores, attn_mask_4d(t, inputs[4], h, l, s), "attn_mask");
  else if (is_causal) scores = apply_mask(t, scores, causal_mask(t, q, k), "causal mask");
  if (present(inputs, 3)) {
    const Var& kpm = inputs[3];
    if (kpm.rank() != (unbatched ? 1 : 2) || (kpm.dim(-1) != -1 && s != -1 && kpm.dim(-1) != s))
      throw ShapeError(fmt::format("{}: key_padding_mask must be {} (source length {}), got {}", kWhere,
                                   unbatched ? "[S]" : "[N, S]", s, describe(kpm)));
    // [N, S] -> [N, 1, 1, S]
    const std::vector<int64_t> axes = unbatched ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{1, 2};
    scores = apply_mask(t, scores, unsqueeze(t, kpm, axes), "key_padding_mask");
  }
  return scores;
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                       bool add_bias_kv, bool add_zero_attn, std::optional<int64_t> kdim,
                                       std::optional<int64_t> vdim, bool batch_first)
    : MultiheadAttention(MultiheadAttentionOptions{.embed_dim = embed_dim,
                                                   .num_heads = num_heads,
                                                   .dropout = dropout,
                                                   .bias = bias,
                                                   .add_bias_kv = add_bias_kv,
                                                   .add_zero_attn = add_zero_attn,
                                                   .kdim = kdim,
                                                   .vdim = vdim,
                                                   .batch_first = batch_first}) {}

MultiheadAttention::MultiheadAttention(MultiheadAttentionOptions options) : options_(options) {
  const int64_t e = options_.embed_dim, h = options_.num_heads;
  if (e <= 0 || h <= 0)
    throw InvalidArgument(fmt::format("MultiheadAttention: embed_dim ({}) and num_heads ({}) must be positive", e, h));
  if (e % h != 0)
    throw InvalidArgument(fmt::format("MultiheadAttention: embed_dim ({}) must be divisible by num_heads ({})", e, h));
  if (options_.dropout < 0.0 || options_.dropout > 1.0)
    throw InvalidArgument(fmt::format("MultiheadAttention: dropout {} is not in [0, 1]", options_.dropout));
  if (options_.add_bias_kv)
    throw Unsupported("MultiheadAttention: add_bias_kv=true (bias_k / bias_v) is not implemented in Kiln");
  if (options_.add_zero_attn) throw Unsupported("MultiheadAttention: add_zero_attn=true is not implemented in Kiln");
  for (const auto& [name, d] : {std::pair{"kdim", options_.kdim}, std::pair{"vdim", options_.vdim}})
    if (d && *d != e)
      throw Unsupported(
          fmt::format("MultiheadAttention: {}={} differs from embed_dim={} (separate q/k/v "
                      "projection weights) and is not implemented in Kiln",
                      name, *d, e));

  // torch's order: in_proj_weight, in_proj_bias, out_proj (whose Linear init draws first), then
  // _reset_parameters: xavier_uniform_(in_proj_weight), zero biases.
  Tensor& w = register_parameter("in_proj_weight", Tensor::zeros(DType::Float32, {3 * e, e}));
  if (options_.bias) register_parameter("in_proj_bias", Tensor::zeros(DType::Float32, {3 * e}));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(e, e, options_.bias));
  xavier_uniform_(w);
  if (options_.bias) constant_(out_proj_->get_parameter("bias"), 0.0);
}

std::vector<Var> MultiheadAttention::attend(Tracer& t, const Var& query, const Var& key, const Var& value,
                                            const MultiheadAttentionCall& call_args) {
  pending_ = call_args;
  std::vector<Var> inputs{query, key, value, call_args.key_padding_mask.value_or(Tracer::none()),
                          call_args.attn_mask.value_or(Tracer::none())};
  while (!inputs.empty() && inputs.back().name.empty()) inputs.pop_back();  // hooks see only the inputs given
  try {
    auto out = call(t, inputs);
    pending_.reset();
    return out;
  } catch (...) {
    pending_.reset();
    throw;
  }
}

std::vector<Var> MultiheadAttention::forward(Tracer& t, const std::vector<Var>& inputs) {
  const MultiheadAttentionCall flags = pending_.value_or(MultiheadAttentionCall{});
  pending_.reset();
  const int64_t e = options_.embed_dim;
  check_inputs(inputs, e);
  const bool unbatched = inputs[0].rank() == 2;
  const Qkv x = to_batch_first(t, inputs, unbatched, options_.batch_first);
  const Var w = t.parameter(*this, "in_proj_weight");
  const std::optional<Var> b = options_.bias ? std::optional<Var>(t.parameter(*this, "in_proj_bias")) : std::nullopt;
  const Qkv p = project(t, x, w, b, e);
  const int64_t n = p.q.dim(0), l = p.q.dim(1), s = p.k.dim(1);
  if (p.k.dim(0) != -1 && n != -1 && p.k.dim(0) != n)
    throw ShapeError(fmt::format("{}: query batch {} differs from key batch {} (query {}, key {})", kWhere, n,
                                 p.k.dim(0), describe(inputs[0]), describe(inputs[1])));

  const Heads heads = split_heads(t, p, options_.num_heads, head_dim());
  Var scores = matmul(t, heads.q, heads.k);  // [N, H, L, S]
  scores = mask_scores(t, scores, inputs, heads.scaled_q, p.k, options_.num_heads,
                       flags.is_causal.value_or(options_.is_causal));
  Var attn = t.op("Softmax", {scores}, {{"axis", Attribute::of_int(-1)}}, scores.dtype, scores.shape);
  if (training() && options_.dropout > 0.0) {
    const Var ratio = t.constant_scalar(options_.dropout, attn.dtype, "dropout_p");
    const Var mode = t.constant(Tensor::scalar<bool>(true), "training_mode");
    attn = t.op("Dropout", {attn, ratio, mode}, {}, attn.dtype, attn.shape);
  }
  const Var per_head = matmul(t, attn, heads.v);                          // [N, H, L, D]
  Var out = reshape(t, transpose(t, per_head, {0, 2, 1, 3}), {0, 0, e});  // [N, L, E]
  out = out_proj_->call(t, out);
  if (unbatched) out = squeeze(t, out, {0});
  else if (!options_.batch_first) out = transpose(t, out, {1, 0, 2});
  if (!flags.need_weights.value_or(options_.need_weights)) return {out};

  Var weights = attn;  // [N, H, L, S]
  if (flags.average_attn_weights.value_or(options_.average_attn_weights))
    weights = t.op("ReduceMean", {attn}, {{"axes", Attribute::of_ints({1})}, {"keepdims", Attribute::of_int(0)}},
                   attn.dtype, {n, l, s});
  if (unbatched) weights = squeeze(t, weights, {0});
  return {out, weights};
}

}  // namespace kiln::nn
