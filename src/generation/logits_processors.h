// Hugging Face's logits processors and sampling warpers over one row of scores, in the order
// GenerationMixin applies them (generation/utils.py, _get_logits_processor / _get_logits_warper).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "kiln/generation.h"

namespace kiln::generation::detail {

// The sequence limits of one generate call, in tokens including the (padded) prompt.
struct Limits {
  int64_t prompt = 0, max_length = 0, min_length = 0;
};
Limits limits_of(const GenerationConfig& c, int64_t prompt_length);

// repetition_penalty, no_repeat_ngram_size, min_length / min_new_tokens, forced_bos_token_id,
// forced_eos_token_id, over `scores` (logits, or log-probabilities in beam search) for the row
// `sequence` (its whole length so far, the prompt's padding included, as HF's input_ids).
void process(std::span<float> scores, const std::vector<int64_t>& sequence, const GenerationConfig& c, const Limits& l);
// temperature, top_k, top_p (sampling only).
void warp(std::span<float> scores, const GenerationConfig& c);
// A draw from softmax(scores).
int64_t sample(std::span<const float> scores, std::mt19937_64& rng);
// The first index of the largest score (torch.argmax).
int64_t argmax(std::span<const float> scores);
// log_softmax in place.
void log_softmax(std::span<float> scores);

}  // namespace kiln::generation::detail
