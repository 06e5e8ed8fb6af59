// What the zoo's encoder-decoder entries (bart, t5) share: the graph a config exports ("part":
// the whole model, or optimum's encoder / decoder / decoder-with-past files that generation runs
// with a KV cache), its inputs, outputs and dynamic axes in optimum's names, and HF's
// shift_tokens_right.
//
//   part "model"             input_ids, attention_mask, decoder_input_ids [, labels]
//                            -> logits [, with labels: loss first]
//   part "encoder"           input_ids, attention_mask -> last_hidden_state
//   part "decoder"           input_ids (the decoder's), encoder_attention_mask, encoder_hidden_states
//                            -> logits, present.N.decoder.key/value, present.N.encoder.key/value
//   part "decoder_with_past" input_ids [B, S], encoder_attention_mask, decoder_attention_mask
//                            [B, P + S], decoder_position_ids [B, S],
//                            past_key_values.N.decoder.key/value, past_key_values.N.encoder.key/value
//                            -> logits, present.N.decoder.key/value
// decoder_attention_mask and decoder_position_ids are Kiln's additions to optimum's layout: the
// cached keys may be a block with unfilled slots (mask 0), the new tokens' keys come after them
// (at P ..), and each new token's true position is given, so generation keeps one shape, and one
// plan, for a whole block of steps (docs/generation.md). Cached slot j holds position j.
// Keys and values are [B, heads, length, head_dim].
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/nn/zoo.h"

namespace kiln::nn::zoo::seq2seq {

enum class Part { Model, Encoder, Decoder, DecoderWithPast };

// The config's "part"; InvalidArgument naming the model and the known parts otherwise.
Part part_of(const Config& c, const std::string& model);

struct Dims {
  int64_t decoder_layers, heads, head_dim, d_model;
};

InputShapes example_inputs(Part part, const Dims& d);
std::vector<DType> input_dtypes(Part part, const Dims& d);
std::vector<std::string> output_names(Part part, const Dims& d);
DynamicAxes dynamic_axes(Part part, const Dims& d);
// How many inputs forward takes in `part` (the model part also takes labels as a fourth).
size_t input_count(Part part, const Dims& d);

// Checks forward's inputs for `part` (count; token ids and masks integer [B, L]; keys, values and
// hidden states float); errors name the model and the input.
void check_inputs(const std::string& model, Part part, const Dims& d, const std::vector<Var>& inputs);

// forward of an encoder-decoder for `part`, its inputs checked: the encoder called with {input_ids,
// additive mask}, the decoder with {decoder ids, additive encoder mask, encoder hidden states} (or
// the cache inputs), `head` turning the decoder's hidden states into logits; with labels, HF's
// loss first.
std::vector<Var> forward_part(Tracer& t, const std::string& model, Part part, const Dims& d,
                              const std::vector<Var>& inputs, Module& encoder, Module& decoder,
                              const std::function<Var(const Var&)>& head);

// The decoder-with-past's self-attention over a block cache: the keys' positions [B, P + S] (slot j
// of the past at j, the new tokens at `positions`) and the additive mask [B, 1, S, P + S] hiding the
// keys after each query's position and the slots decoder_mask marks 0.
struct CachedSelfAttention {
  Var key_positions, additive_mask;
};
CachedSelfAttention cached_self_attention(Tracer& t, const Var& decoder_mask, const Var& positions,
                                          const Var& past_key);

// x.shape[axis] as int64 [1], read at run time.
Var dim_of(Tracer& t, const Var& x, int64_t axis);

// Entry helpers: the part's example inputs, dtypes, outputs and axes read from a config by `dims`.
template <class DimsOf>
void describe_parts(ZooEntry& e, const std::string& model, DimsOf dims) {
  e.example_inputs = [model, dims](const Config& c) { return example_inputs(part_of(c, model), dims(c)); };
  e.input_dtypes = [model, dims](const Config& c) { return input_dtypes(part_of(c, model), dims(c)); };
  e.output_names = [model, dims](const Config& c) { return output_names(part_of(c, model), dims(c)); };
  e.dynamic_axes = [model, dims](const Config& c) { return dynamic_axes(part_of(c, model), dims(c)); };
}

}  // namespace kiln::nn::zoo::seq2seq
