// generate() (kiln/generation.h): greedy search and sampling (HF's _sample), beam search (HF's
// _beam_search with BeamSearchScorer and BeamHypotheses, transformers 4.36's length accounting:
// a hypothesis's length counts its new tokens, the eos included).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "generation/logits_processors.h"
#include "kiln/error.h"
#include "kiln/random.h"

namespace kiln::generation {

namespace {

using detail::Limits;

struct Batch {
  std::vector<std::vector<int64_t>> ids, mask;
  int64_t prompt = 0;
};

// Left-pads the prompts to the longest, each row repeated `copies` times (HF's expansion for beams
// and num_return_sequences).
Batch left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad, int64_t copies) {
  Batch b;
  for (const auto& p : prompts) b.prompt = std::max<int64_t>(b.prompt, static_cast<int64_t>(p.size()));
  for (size_t r = 0; r < prompts.size(); ++r) {
    if (prompts[r].empty()) throw InvalidArgument(fmt::format("generate: prompt {} is empty", r));
    const size_t fill = static_cast<size_t>(b.prompt) - prompts[r].size();
    std::vector<int64_t> ids(fill, pad), mask(fill, 0);
    ids.insert(ids.end(), prompts[r].begin(), prompts[r].end());
    mask.insert(mask.end(), prompts[r].size(), 1);
    for (int64_t c = 0; c < copies; ++c) {
      b.ids.push_back(ids);
      b.mask.push_back(mask);
    }
  }
  return b;
}

bool is_eos(int64_t token, const GenerationConfig& c) {
  return std::find(c.eos_token_id.begin(), c.eos_token_id.end(), token) != c.eos_token_id.end();
}

std::span<float> row_of(Tensor& logits, int64_t r) {
  const int64_t v = logits.shape()[1];
  return {logits.data<float>() + r * v, static_cast<size_t>(v)};
}

void check_vocab(const Tensor& logits, const std::vector<std::vector<int64_t>>& prompts) {
  const int64_t v = logits.shape()[1];
  for (size_t r = 0; r < prompts.size(); ++r)
    for (int64_t id : prompts[r])
      if (id < 0 || id >= v)
        throw InvalidArgument(
            fmt::format("generate: prompt {} holds token {}, outside the vocabulary of {}", r, id, v));
}

GenerateOutput sample_or_greedy(LanguageModel& lm, const std::vector<std::vector<int64_t>>& prompts,
                                const GenerationConfig& c, int64_t pad) {
  Batch b = left_pad(prompts, pad, c.num_return_sequences);
  const Limits limits = detail::limits_of(c, b.prompt);
  std::mt19937_64 rng(c.seed);
  std::vector<std::vector<int64_t>> seqs = b.ids;
  std::vector<bool> unfinished(seqs.size(), true);
  Tensor logits = lm.start(b.ids, b.mask, c.use_cache);
  check_vocab(logits, prompts);
  while (static_cast<int64_t>(seqs[0].size()) < limits.max_length) {
    std::vector<int64_t> next(seqs.size());
    for (size_t r = 0; r < seqs.size(); ++r) {
      std::span<float> scores = row_of(logits, static_cast<int64_t>(r));
      detail::process(scores, seqs[r], c, limits);
      if (c.do_sample) {
        detail::warp(scores, c);
        next[r] = detail::sample(scores, rng);
      } else {
        next[r] = detail::argmax(scores);
      }
      if (!c.eos_token_id.empty() && !unfinished[r]) next[r] = pad;
    }
    bool any = false;
    for (size_t r = 0; r < seqs.size(); ++r) {
      seqs[r].push_back(next[r]);
      if (is_eos(next[r], c)) unfinished[r] = false;
      any = any || unfinished[r];
    }
    if (!any || static_cast<int64_t>(seqs[0].size()) >= limits.max_length) break;
    logits = lm.step(next);
  }
  return {seqs, {}, b.prompt, lm.calls()};
}

// HF's BeamHypotheses: the num_beams best finished hypotheses of one prompt.
struct Hypotheses {
  int64_t num_beams;
  double length_penalty;
  EarlyStopping early_stopping;
  int64_t max_length;
  std::vector<std::pair<double, std::vector<int64_t>>> beams;
  double worst = 1e9;

  void add(std::vector<int64_t> hyp, double sum_logprobs, int64_t generated_len) {
    const double score = sum_logprobs / std::pow(static_cast<double>(generated_len), length_penalty);
    if (static_cast<int64_t>(beams.size()) < num_beams || score > worst) {
      beams.emplace_back(score, std::move(hyp));
      if (static_cast<int64_t>(beams.size()) > num_beams) {
        std::vector<std::pair<double, size_t>> sorted;
        for (size_t i = 0; i < beams.size(); ++i) sorted.emplace_back(beams[i].first, i);
        std::sort(sorted.begin(), sorted.end());
        beams.erase(beams.begin() + static_cast<std::ptrdiff_t>(sorted[0].second));
        worst = sorted[1].first;
      } else {
        worst = std::min(score, worst);
      }
    }
  }

  bool is_done(double best_sum_logprobs, int64_t cur_len, int64_t prompt) const {
    if (static_cast<int64_t>(beams.size()) < num_beams) return false;
    if (early_stopping == EarlyStopping::True) return true;
    int64_t len = cur_len - prompt;
    if (early_stopping == EarlyStopping::Never && length_penalty > 0) len = max_length - prompt;
    return worst >= best_sum_logprobs / std::pow(static_cast<double>(len), length_penalty);
  }
};

struct Candidate {
  float score;
  int64_t index;  // beam * vocab + token
};

// The best `n` of one prompt's beams * vocab scores, by score then index (torch.topk, sorted).
std::vector<Candidate> top_candidates(const Tensor& scores, int64_t batch, int64_t beams, size_t n) {
  const int64_t v = scores.shape()[1];
  std::vector<Candidate> all(static_cast<size_t>(beams * v));
  for (int64_t k = 0; k < beams; ++k)
    for (int64_t t = 0; t < v; ++t)
      all[static_cast<size_t>(k * v + t)] = {scores.data<float>()[(batch * beams + k) * v + t], k * v + t};
  n = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return a.score > b.score || (a.score == b.score && a.index < b.index);
                    });
  all.resize(n);
  return all;
}

// BeamSearchScorer.finalize: the open beams join their prompt's hypotheses, then each prompt's best
// num_return_sequences are returned, padded to one length with the eos then the pad token.
GenerateOutput finalize(std::vector<Hypotheses>& hyps, const std::vector<bool>& done,
                        const std::vector<std::vector<int64_t>>& seqs, const std::vector<double>& beam_scores,
                        const GenerationConfig& c, const Limits& limits, int64_t pad) {
  const int64_t nb = c.num_beams, batch = static_cast<int64_t>(hyps.size());
  for (int64_t i = 0; i < batch; ++i) {
    if (done[static_cast<size_t>(i)]) continue;
    for (int64_t k = 0; k < nb; ++k) {
      const auto& s = seqs[static_cast<size_t>(i * nb + k)];
      hyps[static_cast<size_t>(i)].add(s, beam_scores[static_cast<size_t>(i * nb + k)],
                                       static_cast<int64_t>(s.size()) - limits.prompt);
    }
  }
  GenerateOutput out;
  out.prompt_length = limits.prompt;
  for (auto& h : hyps) {
    std::stable_sort(h.beams.begin(), h.beams.end(), [](const auto& a, const auto& x) { return a.first < x.first; });
    for (int64_t j = 0; j < c.num_return_sequences; ++j) {
      out.sequences.push_back(h.beams.back().second);
      out.sequences_scores.push_back(h.beams.back().first);
      h.beams.pop_back();
    }
  }
  size_t longest = 0;
  for (const auto& s : out.sequences) longest = std::max(longest, s.size());
  const size_t width = std::min<size_t>(longest + 1, static_cast<size_t>(limits.max_length));
  for (auto& s : out.sequences)
    if (s.size() < width) {
      s.push_back(c.eos_token_id.empty() ? pad : c.eos_token_id[0]);
      s.resize(width, pad);
    }
  return out;
}

GenerateOutput beam_search(LanguageModel& lm, const std::vector<std::vector<int64_t>>& prompts,
                           const GenerationConfig& c, int64_t pad) {
  const int64_t nb = c.num_beams, batch = static_cast<int64_t>(prompts.size());
  Batch b = left_pad(prompts, pad, nb);
  const Limits limits = detail::limits_of(c, b.prompt);
  std::vector<Hypotheses> hyps(static_cast<size_t>(batch),
                               Hypotheses{nb, c.length_penalty, c.early_stopping, limits.max_length, {}, 1e9});
  std::vector<bool> done(static_cast<size_t>(batch), false);
  std::vector<double> beam_scores(static_cast<size_t>(batch * nb), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t k = 1; k < nb; ++k) beam_scores[static_cast<size_t>(i * nb + k)] = -1e9;
  std::vector<std::vector<int64_t>> seqs = b.ids;
  Tensor scores = lm.start(b.ids, b.mask, c.use_cache);
  check_vocab(scores, prompts);
  const size_t keep = static_cast<size_t>(std::max<int64_t>(2, 1 + static_cast<int64_t>(c.eos_token_id.size())) * nb);
  while (true) {
    const int64_t cur_len = static_cast<int64_t>(seqs[0].size()) + 1;
    for (int64_t r = 0; r < batch * nb; ++r) {
      std::span<float> row = row_of(scores, r);
      detail::log_softmax(row);
      detail::process(row, seqs[static_cast<size_t>(r)], c, limits);
      for (float& s : row) s = static_cast<float>(s + beam_scores[static_cast<size_t>(r)]);
    }
    std::vector<double> next_scores(static_cast<size_t>(batch * nb), 0.0);
    std::vector<int64_t> next_tokens(static_cast<size_t>(batch * nb), pad), source(static_cast<size_t>(batch * nb), 0);
    const int64_t v = scores.shape()[1];
    for (int64_t i = 0; i < batch; ++i) {
      if (done[static_cast<size_t>(i)]) continue;  // padding: score 0, pad token, beam 0
      const std::vector<Candidate> top = top_candidates(scores, i, nb, keep);
      int64_t filled = 0;
      for (size_t rank = 0; rank < top.size() && filled < nb; ++rank) {
        const int64_t from = i * nb + top[rank].index / v, token = top[rank].index % v;
        if (is_eos(token, c)) {
          if (static_cast<int64_t>(rank) >= nb) continue;
          hyps[static_cast<size_t>(i)].add(seqs[static_cast<size_t>(from)], top[rank].score, cur_len - b.prompt);
        } else {
          const size_t slot = static_cast<size_t>(i * nb + filled++);
          next_scores[slot] = top[rank].score;
          next_tokens[slot] = token;
          source[slot] = from;
        }
      }
      if (filled < nb) throw Error(fmt::format("beam search: only {} of {} beams continue", filled, nb));
      done[static_cast<size_t>(i)] = hyps[static_cast<size_t>(i)].is_done(top[0].score, cur_len, b.prompt);
    }
    std::vector<std::vector<int64_t>> reordered;
    for (size_t r = 0; r < seqs.size(); ++r) {
      reordered.push_back(seqs[static_cast<size_t>(source[r])]);
      reordered.back().push_back(next_tokens[r]);
    }
    seqs = std::move(reordered);
    beam_scores = next_scores;
    const bool all_done = std::all_of(done.begin(), done.end(), [](bool d) { return d; });
    if (all_done || static_cast<int64_t>(seqs[0].size()) >= limits.max_length) break;
    lm.reorder(source);
    scores = lm.step(next_tokens);
  }
  GenerateOutput out = finalize(hyps, done, seqs, beam_scores, c, limits, pad);
  out.model_calls = lm.calls();
  return out;
}

// HF: with an eos token and no pad token, the eos pads.
int64_t pad_of(const GenerationConfig& c) {
  return c.pad_token_id.value_or(c.eos_token_id.empty() ? 0 : c.eos_token_id[0]);
}

GenerateOutput search(LanguageModel& lm, const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& c) {
  return c.num_beams > 1 ? beam_search(lm, prompts, c, pad_of(c)) : sample_or_greedy(lm, prompts, c, pad_of(c));
}

void check_length(const GenerationConfig& c, int64_t longest) {
  const Limits limits = detail::limits_of(c, longest);
  if (limits.max_length <= longest)
    throw InvalidArgument(
        fmt::format("generate: the prompt has {} tokens and max_length is {}: nothing to generate "
                    "(set max_new_tokens)",
                    longest, limits.max_length));
}

}  // namespace

GenerateOutput generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& config) {
  config.validate();
  if (prompts.empty()) throw InvalidArgument("generate: no prompts");
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  check_length(config, longest);
  return search(model, prompts, config);
}

GenerateOutput generate(Seq2SeqLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& config) {
  config.validate();
  if (prompts.empty()) throw InvalidArgument("generate: no prompts");
  const std::optional<int64_t> start =
      config.decoder_start_token_id ? config.decoder_start_token_id : config.bos_token_id;
  if (!start)
    throw InvalidArgument(
        "generate: an encoder-decoder model needs decoder_start_token_id (or bos_token_id) to start "
        "the decoder from");
  check_length(config, 1);
  model.encode(prompts, pad_of(config), config.num_beams > 1 ? config.num_beams : config.num_return_sequences);
  return search(model, std::vector<std::vector<int64_t>>(prompts.size(), {*start}), config);
}

}  // namespace kiln::generation
