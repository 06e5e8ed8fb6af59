// Text metrics for generated text, with the definitions of the packages Hugging Face's `evaluate`
// wraps, so that a score Kiln reports can be compared with a transformers script's:
//
//   auto bleu = kiln::text::corpus_bleu(hypotheses, references);          // sacreBLEU's BLEU
//   double chrf = kiln::text::corpus_chrf(hypotheses, references).score;  // sacreBLEU's chrF
//   auto rouge = kiln::text::corpus_rouge(hypotheses, references);        // rouge-score's ROUGE
//
// `references[i]` holds every reference of hypothesis i (one or more; evaluate's layout). Text is
// UTF-8 (invalid UTF-8 is an InvalidArgument). Mismatched list lengths, a hypothesis without
// references, and unknown option values are InvalidArgument errors naming what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::text {

// sacreBLEU's "13a" tokenizer (mteval-v13a): <skipped> removed, "-\n" joined, newlines to spaces,
// &quot; &amp; &lt; &gt; unescaped, punctuation and symbols split off, periods and commas split
// unless beside a digit, a dash after a digit split, whitespace runs (Python's str.split) to one
// space.
std::string tokenize_13a(const std::string& line);

struct BleuOptions {
  std::string tokenize = "13a";  // "13a" or "none" (split on whitespace only)
  bool lowercase = false;
  // "none" (a zero n-gram precision makes the score 0), "exp" (sacreBLEU's default: the k-th order
  // with no match counts 1 / (2^k * total)), "floor" (smooth_value / total, default 0.1) or "add-k"
  // (smooth_value added to the matches and totals of orders >= 2, default 1).
  std::string smooth_method = "none";
  double smooth_value = -1;  // < 0: the method's default
  int max_ngram_order = 4;
  bool effective_order = false;  // average over the orders that have n-grams only
};

struct BleuScore {
  double score = 0;                // 0 .. 100
  std::vector<int64_t> counts;     // matched n-grams per order (clipped by the references)
  std::vector<int64_t> totals;     // hypothesis n-grams per order
  std::vector<double> precisions;  // per order, percent
  double bp = 0;                   // brevity penalty
  int64_t sys_len = 0;             // hypothesis tokens
  int64_t ref_len = 0;             // per hypothesis, the length of the reference closest to it
};

// Corpus BLEU as sacreBLEU computes it: clipped n-gram matches over every reference of a sentence,
// summed over the corpus; the brevity penalty from the closest reference lengths (ties to the
// shorter); the geometric mean of the precisions.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const BleuOptions& options = {});

struct ChrfOptions {
  int char_order = 6;
  int word_order = 0;  // 2 is chrF++
  double beta = 2;
  bool lowercase = false;
  bool whitespace = false;     // keep whitespace in the character n-grams
  bool eps_smoothing = false;  // chrF's original averaging of per-order F-scores
};

struct ChrfScore {
  double score = 0;  // 0 .. 100
  int char_order = 0;
  int word_order = 0;
  double beta = 0;
};

// sacreBLEU's chrF: character (and with word_order, word) n-gram precision and recall per order;
// each sentence's statistics from its best-scoring reference, summed over the corpus; the F-beta
// score of the averaged precision and recall.
ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const ChrfOptions& options = {});

// rouge-score's tokenizer: lowercased, every run of characters outside [a-z0-9] a separator.
std::vector<std::string> rouge_tokenize(const std::string& text);

struct RougeScore {
  double precision = 0;
  double recall = 0;
  double fmeasure = 0;
};

// rouge-score's RougeScorer for one prediction against one reference: "rouge1" .. "rouge9"
// (n-gram overlap), "rougeL" (longest common subsequence) and "rougeLsum" (summary-level LCS over
// the newline-separated sentences). use_stemmer (Porter) is not supported: an Unsupported error.
std::map<std::string, RougeScore> rouge_scores(const std::string& prediction, const std::string& reference,
                                               const std::vector<std::string>& rouge_types, bool use_stemmer = false);

// Each type's F-measure averaged over the corpus, a sentence scored against its best reference by
// F-measure (rouge-score's score_multi). evaluate's "rouge" reports the same means (its default
// bootstrap aggregator estimates them by resampling).
std::map<std::string, double> corpus_rouge(const std::vector<std::string>& predictions,
                                           const std::vector<std::vector<std::string>>& references,
                                           const std::vector<std::string>& rouge_types = {"rouge1", "rouge2", "rougeL",
                                                                                          "rougeLsum"},
                                           bool use_stemmer = false);

}  // namespace kiln::text
