// Logits processors and warpers (generation/logits_processors.h), each as its Hugging Face class.
#include "generation/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "kiln/random.h"

namespace kiln::generation::detail {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool in_vocab(int64_t id, std::span<float> scores) { return id >= 0 && id < static_cast<int64_t>(scores.size()); }

// RepetitionPenaltyLogitsProcessor: every token already in the row, once.
void repetition_penalty(std::span<float> scores, const std::vector<int64_t>& seq, double penalty) {
  std::set<int64_t> seen(seq.begin(), seq.end());
  for (int64_t id : seen) {
    if (!in_vocab(id, scores)) continue;
    float& s = scores[static_cast<size_t>(id)];
    s = s < 0 ? static_cast<float>(s * penalty) : static_cast<float>(s / penalty);
  }
}

// NoRepeatNGramLogitsProcessor: tokens that would repeat an n-gram of the row.
void no_repeat_ngram(std::span<float> scores, const std::vector<int64_t>& seq, size_t n) {
  const size_t len = seq.size();
  if (len + 1 < n) return;
  const std::vector<int64_t> prefix(seq.end() - static_cast<std::ptrdiff_t>(n - 1), seq.end());
  for (size_t i = 0; i + n <= len; ++i)
    if (std::equal(prefix.begin(), prefix.end(), seq.begin() + static_cast<std::ptrdiff_t>(i))) {
      const int64_t banned = seq[i + n - 1];
      if (in_vocab(banned, scores)) scores[static_cast<size_t>(banned)] = kNegInf;
    }
}

void force(std::span<float> scores, int64_t id) {
  std::fill(scores.begin(), scores.end(), kNegInf);
  if (in_vocab(id, scores)) scores[static_cast<size_t>(id)] = 0;
}

}  // namespace

Limits limits_of(const GenerationConfig& c, int64_t prompt_length) {
  Limits l;
  l.prompt = prompt_length;
  l.max_length = c.max_new_tokens ? prompt_length + *c.max_new_tokens : c.max_length;
  l.min_length = c.min_new_tokens ? prompt_length + *c.min_new_tokens : c.min_length;
  return l;
}

void process(std::span<float> scores, const std::vector<int64_t>& seq, const GenerationConfig& c, const Limits& l) {
  const int64_t cur_len = static_cast<int64_t>(seq.size());
  if (c.repetition_penalty != 1.0) repetition_penalty(scores, seq, c.repetition_penalty);
  if (c.no_repeat_ngram_size > 0) no_repeat_ngram(scores, seq, static_cast<size_t>(c.no_repeat_ngram_size));
  if (cur_len < l.min_length)
    for (int64_t eos : c.eos_token_id)
      if (in_vocab(eos, scores)) scores[static_cast<size_t>(eos)] = kNegInf;
  if (c.forced_bos_token_id && cur_len == 1) force(scores, *c.forced_bos_token_id);
  if (c.forced_eos_token_id && cur_len == l.max_length - 1) force(scores, *c.forced_eos_token_id);
}

void warp(std::span<float> scores, const GenerationConfig& c) {
  if (c.temperature != 1.0)
    for (float& s : scores) s = static_cast<float>(s / c.temperature);
  if (c.top_k > 0) {  // TopKLogitsWarper: below the k-th largest score goes
    const size_t k = std::min(static_cast<size_t>(c.top_k), scores.size());
    std::vector<float> sorted(scores.begin(), scores.end());
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1), sorted.end(),
                     std::greater<>());
    const float kth = sorted[k - 1];
    for (float& s : scores)
      if (s < kth) s = kNegInf;
  }
  if (c.top_p < 1.0) {  // TopPLogitsWarper: ascending; drop while the cumulative mass <= 1 - top_p, keep the last
    std::vector<size_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
    const float top = scores[order.back()];
    double total = 0;
    for (float s : scores) total += std::exp(static_cast<double>(s) - top);
    double cumulative = 0;
    for (size_t i = 0; i + 1 < order.size(); ++i) {
      cumulative += std::exp(static_cast<double>(scores[order[i]]) - top) / total;
      if (cumulative <= 1.0 - c.top_p) scores[order[i]] = kNegInf;
    }
  }
}

void log_softmax(std::span<float> scores) {
  const float top = *std::max_element(scores.begin(), scores.end());
  double total = 0;
  for (float s : scores) total += std::exp(static_cast<double>(s) - top);
  const double log_total = std::log(total) + top;
  for (float& s : scores) s = static_cast<float>(s - log_total);
}

int64_t argmax(std::span<const float> scores) {
  return static_cast<int64_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
}

int64_t sample(std::span<const float> scores, std::mt19937_64& rng) {
  const float top = *std::max_element(scores.begin(), scores.end());
  std::vector<double> cumulative(scores.size());
  double total = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    total += std::exp(static_cast<double>(scores[i]) - top);
    cumulative[i] = total;
  }
  const double u = uniform01(rng) * total;
  const auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
  size_t pick = static_cast<size_t>(
      std::min<std::ptrdiff_t>(it - cumulative.begin(), static_cast<std::ptrdiff_t>(scores.size()) - 1));
  while (pick > 0 && scores[pick] == kNegInf) --pick;  // never a filtered token (u at the very end)
  return static_cast<int64_t>(pick);
}

}  // namespace kiln::generation::detail
