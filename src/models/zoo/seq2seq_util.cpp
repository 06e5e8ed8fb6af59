#include "models/zoo/seq2seq_util.h"

#include <fmt/format.h>

#include "kiln/error.h"
#include "models/nn/attention_ops.h"
#include "models/zoo/transformer_util.h"

namespace kiln::nn::zoo::seq2seq {

namespace {

constexpr int64_t kBatch = 2, kSource = 8, kTarget = 6, kPast = 5;

// past_key_values.N.{decoder,encoder}.{key,value} (or present.N...), per layer in that order.
std::vector<std::string> cache_names(const char* prefix, const Dims& d, bool with_encoder) {
  std::vector<std::string> names;
  for (int64_t l = 0; l < d.decoder_layers; ++l)
    for (const char* part : {"decoder", "encoder"}) {
      if (!with_encoder && std::string(part) == "encoder") continue;
      for (const char* kind : {"key", "value"}) names.push_back(fmt::format("{}.{}.{}.{}", prefix, l, part, kind));
    }
  return names;
}

bool is_int(DType t) { return t == DType::Int64 || t == DType::Int32; }

}  // namespace

Part part_of(const Config& c, const std::string& model) {
  const std::string p = transformers::config_string(c, model, "part");
  if (p == "model") return Part::Model;
  if (p == "encoder") return Part::Encoder;
  if (p == "decoder") return Part::Decoder;
  if (p == "decoder_with_past") return Part::DecoderWithPast;
  throw InvalidArgument(
      fmt::format("{} config: 'part' must be one of model, encoder, decoder, decoder_with_past, got '{}'", model, p));
}

InputShapes example_inputs(Part part, const Dims& d) {
  switch (part) {
    case Part::Model:
      return {{"input_ids", {kBatch, kSource}},
              {"attention_mask", {kBatch, kSource}},
              {"decoder_input_ids", {kBatch, kTarget}}};
    case Part::Encoder:
      return {{"input_ids", {kBatch, kSource}}, {"attention_mask", {kBatch, kSource}}};
    case Part::Decoder:
      return {{"input_ids", {kBatch, kTarget}},
              {"encoder_attention_mask", {kBatch, kSource}},
              {"encoder_hidden_states", {kBatch, kSource, d.d_model}}};
    case Part::DecoderWithPast:
      break;
  }
  InputShapes in = {{"input_ids", {kBatch, 1}},
                    {"encoder_attention_mask", {kBatch, kSource}},
                    {"decoder_attention_mask", {kBatch, kPast + 1}},
                    {"decoder_position_ids", {kBatch, 1}}};
  for (const std::string& n : cache_names("past_key_values", d, true))
    in.push_back({n, {kBatch, d.heads, n.find("decoder") != std::string::npos ? kPast : kSource, d.head_dim}});
  return in;
}

std::vector<DType> input_dtypes(Part part, const Dims& d) {
  std::vector<DType> types(example_inputs(part, d).size(), DType::Float32);
  const size_t ints = part == Part::Model ? 3 : part == Part::DecoderWithPast ? 4 : 2;
  for (size_t i = 0; i < ints; ++i) types[i] = DType::Int64;
  return types;
}

size_t input_count(Part part, const Dims& d) { return example_inputs(part, d).size(); }

std::vector<std::string> output_names(Part part, const Dims& d) {
  if (part == Part::Model) return {"logits"};
  if (part == Part::Encoder) return {"last_hidden_state"};
  std::vector<std::string> out = {"logits"};
  for (std::string& n : cache_names("present", d, part == Part::Decoder)) out.push_back(std::move(n));
  return out;
}

DynamicAxes dynamic_axes(Part part, const Dims& d) {
  const std::pair<int64_t, std::string> batch{0, "batch_size"};
  const std::string source = "encoder_sequence_length", target = "decoder_sequence_length";
  DynamicAxes axes;
  switch (part) {
    case Part::Model:
      axes["input_ids"] = axes["attention_mask"] = {batch, {1, source}};
      axes["decoder_input_ids"] = axes["logits"] = {batch, {1, target}};
      return axes;
    case Part::Encoder:
      axes["input_ids"] = axes["attention_mask"] = axes["last_hidden_state"] = {batch, {1, source}};
      return axes;
    case Part::Decoder:
      axes["input_ids"] = axes["logits"] = {batch, {1, target}};
      axes["encoder_attention_mask"] = axes["encoder_hidden_states"] = {batch, {1, source}};
      for (const std::string& n : cache_names("present", d, true))
        axes[n] = {batch, {2, n.find("decoder") != std::string::npos ? target : source}};
      return axes;
    case Part::DecoderWithPast:
      break;
  }
  axes["input_ids"] = axes["logits"] = axes["decoder_position_ids"] = {batch, {1, target}};
  axes["encoder_attention_mask"] = {batch, {1, source}};
  axes["decoder_attention_mask"] = {batch, {1, "total_decoder_sequence_length"}};
  for (const std::string& n : cache_names("past_key_values", d, true))
    axes[n] = {batch, {2, n.find("decoder") != std::string::npos ? "past_decoder_sequence_length" : source}};
  for (const std::string& n : cache_names("present", d, false)) axes[n] = {batch, {2, "total_decoder_sequence_length"}};
  return axes;
}

void check_inputs(const std::string& model, Part part, const Dims& d, const std::vector<Var>& inputs) {
  const InputShapes want = example_inputs(part, d);
  const bool labels = part == Part::Model && inputs.size() == want.size() + 1;
  if (inputs.size() != want.size() && !labels) {
    std::string names;
    for (const auto& [n, shape] : want) names += (names.empty() ? "" : ", ") + n;
    throw InvalidArgument(fmt::format("{}: forward ({} part) takes {} inputs ({}{}), got {}", model,
                                      part == Part::Model ? "model" : "generation", want.size(), names,
                                      part == Part::Model ? "; labels may follow" : "", inputs.size()));
  }
  const std::vector<DType> types = input_dtypes(part, d);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Var& v = inputs[i];
    const bool integer = i >= types.size() || types[i] == DType::Int64;
    const size_t rank = i < want.size() ? want[i].second.size() : 2;
    const std::string name = i < want.size() ? want[i].first : "labels";
    if (integer ? !is_int(v.dtype) : v.dtype != DType::Float32)
      throw TypeError(fmt::format("{}: input {} ('{}', {}) must be {}, got {}", model, i, v.name, name,
                                  integer ? "int64" : "float32", dtype_name(v.dtype)));
    if (v.rank() != static_cast<int64_t>(rank))
      throw ShapeError(
          fmt::format("{}: input {} ('{}', {}) must have rank {}, got {}", model, i, v.name, name, rank, v.rank()));
  }
}

std::vector<Var> forward_part(Tracer& t, const std::string& model, Part part, const Dims& d,
                              const std::vector<Var>& inputs, Module& encoder, Module& decoder,
                              const std::function<Var(const Var&)>& head) {
  check_inputs(model, part, d, inputs);
  const Var mask = transformers::padding_mask(t, inputs[1]);
  if (part == Part::Encoder) return {encoder.call(t, std::vector<Var>{inputs[0], mask}).at(0)};
  if (part == Part::Decoder || part == Part::DecoderWithPast) {
    std::vector<Var> in = inputs;
    in[1] = mask;
    std::vector<Var> out = decoder.call(t, in);
    out[0] = head(out[0]);
    return out;
  }
  const Var encoded = encoder.call(t, std::vector<Var>{inputs[0], mask}).at(0);
  const Var logits = head(decoder.call(t, std::vector<Var>{inputs[2], mask, encoded}).at(0));
  if (inputs.size() == 4) return {transformers::lm_loss(t, logits, inputs[3]), logits};
  return {logits};
}

CachedSelfAttention cached_self_attention(Tracer& t, const Var& decoder_mask, const Var& positions,
                                          const Var& past_key) {
  const Var zero = t.constant(Tensor::scalar<int64_t>(0), "zero"), one = t.constant(Tensor::scalar<int64_t>(1), "one");
  const Var past = attn::squeeze(t, dim_of(t, past_key, 2), {0});
  const Var slots = t.op("Range", {zero, past, one}, {}, DType::Int64, {past_key.dim(2)});  // [P]
  const Var batch = dim_of(t, positions, 0);
  const Var expanded = t.op("Expand",
                            {attn::unsqueeze(t, slots, {0}), t.op("Concat", {batch, dim_of(t, past_key, 2)},
                                                                  {{"axis", Attribute::of_int(0)}}, DType::Int64, {2})},
                            {}, DType::Int64, {positions.dim(0), past_key.dim(2)});
  CachedSelfAttention c;
  c.key_positions =
      t.op("Concat", {expanded, positions}, {{"axis", Attribute::of_int(1)}}, DType::Int64, {positions.dim(0), -1});
  const std::vector<int64_t> bsk{positions.dim(0), positions.dim(1), -1};
  const Var after = t.op("Greater", {attn::unsqueeze(t, c.key_positions, {1}), attn::unsqueeze(t, positions, {2})}, {},
                         DType::Bool, bsk);
  const Var causal =
      attn::where(t, after, t.constant_scalar(transformers::float32_lowest(), DType::Float32, "mask_value"),
                  t.constant_scalar(0.0, DType::Float32, "zero_f"));
  c.additive_mask =
      attn::binary(t, "Add", attn::unsqueeze(t, causal, {1}), transformers::padding_mask(t, decoder_mask));
  return c;
}

Var dim_of(Tracer& t, const Var& x, int64_t axis) {
  return t.op("Shape", {x}, {{"start", Attribute::of_int(axis)}, {"end", Attribute::of_int(axis + 1)}}, DType::Int64,
              {1});
}

}  // namespace kiln::nn::zoo::seq2seq
