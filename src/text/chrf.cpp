// chrF and chrF++ with sacreBLEU's definition (kiln/text_metrics.h).
#include <fmt/format.h>

#include <string_view>

#include "kiln/text_metrics.h"
#include "text/ngrams.h"
#include "text/utf8.h"

namespace kiln::text {

namespace {

constexpr std::string_view kPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

bool is_punct(char32_t cp) { return cp < 0x80 && kPunctuation.find(static_cast<char>(cp)) != std::string_view::npos; }

// sacreBLEU's chrF++ word split: a word of two or more characters loses one trailing, else one
// leading, punctuation mark as a token of its own.
std::vector<std::string> words_of(const std::string& sentence) {
  std::vector<std::string> out;
  for (const std::string& w : split_whitespace(sentence)) {
    const std::vector<char32_t> cps = decode_utf8(w);
    if (cps.size() > 1 && is_punct(cps.back())) {
      out.push_back(encode_utf8({cps.begin(), cps.end() - 1}));
      out.push_back(encode_utf8({cps.back()}));
    } else if (cps.size() > 1 && is_punct(cps.front())) {
      out.push_back(encode_utf8({cps.front()}));
      out.push_back(encode_utf8({cps.begin() + 1, cps.end()}));
    } else {
      out.push_back(w);
    }
  }
  return out;
}

// Per order (characters 1..char_order, then words 1..word_order): the n-gram counts of a sentence.
std::vector<NgramCounts> ngrams_of(const std::string& raw, const ChrfOptions& o) {
  const std::string sentence = o.lowercase ? to_lower(raw) : raw;
  std::vector<std::string> chars;
  for (char32_t cp : decode_utf8(sentence))
    if (o.whitespace || !is_space(cp)) chars.push_back(encode_utf8({cp}));
  std::vector<NgramCounts> out;
  for (int n = 1; n <= o.char_order; ++n) out.push_back(count_ngrams(chars, static_cast<size_t>(n)));
  if (o.word_order > 0) {
    const std::vector<std::string> words = words_of(sentence);
    for (int n = 1; n <= o.word_order; ++n) out.push_back(count_ngrams(words, static_cast<size_t>(n)));
  }
  return out;
}

// [hyp n-grams, ref n-grams, matches] per order, flattened.
std::vector<double> match_statistics(const std::vector<NgramCounts>& hyp, const std::vector<NgramCounts>& ref) {
  std::vector<double> stats;
  for (size_t i = 0; i < hyp.size(); ++i) {
    stats.push_back(ref[i].empty() ? 0.0 : static_cast<double>(total_count(hyp[i])));
    stats.push_back(static_cast<double>(total_count(ref[i])));
    stats.push_back(static_cast<double>(clipped_matches(hyp[i], ref[i])));
  }
  return stats;
}

double f_score(const std::vector<double>& stats, const ChrfOptions& o) {
  constexpr double eps = 1e-16;
  const double factor = o.beta * o.beta;
  const size_t orders = stats.size() / 3;
  double score = 0, avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (size_t i = 0; i < orders; ++i) {
    const double n_hyp = stats[3 * i], n_ref = stats[3 * i + 1], n_match = stats[3 * i + 2];
    const double prec = n_hyp > 0 ? n_match / n_hyp : eps, rec = n_ref > 0 ? n_match / n_ref : eps;
    const double denom = factor * prec + rec;
    score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
    if (n_hyp > 0 && n_ref > 0) ++effective;
    avg_prec += prec;
    avg_rec += rec;
  }
  if (o.eps_smoothing) return 100 * score / static_cast<double>(orders);
  if (effective == 0) return 0.0;
  avg_prec /= effective;
  avg_rec /= effective;
  if (avg_prec + avg_rec == 0) return 0.0;
  return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
}

}  // namespace

ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const ChrfOptions& o) {
  if (o.char_order < 1 || o.word_order < 0 || !(o.beta > 0))
    throw InvalidArgument(fmt::format("chrf: char_order {} must be >= 1, word_order {} >= 0 and beta {} > 0",
                                      o.char_order, o.word_order, o.beta));
  check_corpus("chrf", hypotheses.size(), references);
  std::vector<double> totals(3 * static_cast<size_t>(o.char_order + o.word_order), 0.0);
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const std::vector<NgramCounts> hyp = ngrams_of(hypotheses[i], o);
    std::vector<double> best;
    double best_f = -1;
    for (const std::string& ref : references[i]) {
      std::vector<double> stats = match_statistics(hyp, ngrams_of(ref, o));
      const double f = f_score(stats, o);
      if (f > best_f) {
        best_f = f;
        best = std::move(stats);
      }
    }
    for (size_t k = 0; k < totals.size(); ++k) totals[k] += best[k];
  }
  return {f_score(totals, o), o.char_order, o.word_order, o.beta};
}

}  // namespace kiln::text
