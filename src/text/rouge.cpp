// ROUGE-N, ROUGE-L and ROUGE-Lsum with the rouge-score package's definitions (kiln/text_metrics.h).
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiln/text_metrics.h"
#include "text/ngrams.h"
#include "text/utf8.h"

namespace kiln::text {

namespace {

using Tokens = std::vector<std::string>;
using Table = std::vector<std::vector<int>>;

RougeScore from_counts(double hits, double predicted, double target) {
  RougeScore s;
  s.precision = hits / std::max(predicted, 1.0);
  s.recall = hits / std::max(target, 1.0);
  s.fmeasure = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

RougeScore rouge_n(const Tokens& target, const Tokens& prediction, size_t n) {
  const NgramCounts t = count_ngrams(target, n), p = count_ngrams(prediction, n);
  return from_counts(static_cast<double>(clipped_matches(t, p)), static_cast<double>(total_count(p)),
                     static_cast<double>(total_count(t)));
}

Table lcs_table(const Tokens& ref, const Tokens& can) {
  Table t(ref.size() + 1, std::vector<int>(can.size() + 1, 0));
  for (size_t i = 1; i <= ref.size(); ++i)
    for (size_t j = 1; j <= can.size(); ++j)
      t[i][j] = ref[i - 1] == can[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
  return t;
}

RougeScore rouge_l(const Tokens& target, const Tokens& prediction) {
  if (target.empty() || prediction.empty()) return {};
  const double lcs = lcs_table(target, prediction)[target.size()][prediction.size()];
  return from_counts(lcs, static_cast<double>(prediction.size()), static_cast<double>(target.size()));
}

// The reference positions of one LCS of ref and can, backtracked as rouge-score does.
std::vector<size_t> lcs_positions(const Tokens& ref, const Tokens& can) {
  const Table t = lcs_table(ref, can);
  std::vector<size_t> out;
  size_t i = ref.size(), j = can.size();
  while (i > 0 && j > 0) {
    if (ref[i - 1] == can[j - 1]) {
      out.push_back(i - 1);
      --i;
      --j;
    } else if (t[i][j - 1] > t[i - 1][j]) {
      --j;
    } else {
      --i;
    }
  }
  return out;
}

std::vector<Tokens> sentences_of(const std::string& text) {
  std::vector<Tokens> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(rouge_tokenize(text.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

RougeScore rouge_lsum(const std::string& target, const std::string& prediction) {
  const std::vector<Tokens> ref = sentences_of(target), can = sentences_of(prediction);
  std::map<std::string, int64_t> ref_counts, can_counts;
  size_t m = 0, n = 0;
  for (const Tokens& s : ref) {
    m += s.size();
    for (const auto& w : s) ++ref_counts[w];
  }
  for (const Tokens& s : can) {
    n += s.size();
    for (const auto& w : s) ++can_counts[w];
  }
  if (m == 0 || n == 0) return {};
  double hits = 0;
  for (const Tokens& r : ref) {
    std::set<size_t> uni;  // the union of r's LCS positions against every candidate sentence
    for (const Tokens& c : can)
      for (size_t pos : lcs_positions(r, c)) uni.insert(pos);
    for (size_t pos : uni) {
      const std::string& w = r[pos];
      if (can_counts[w] > 0 && ref_counts[w] > 0) {
        ++hits;
        --can_counts[w];
        --ref_counts[w];
      }
    }
  }
  return from_counts(hits, static_cast<double>(n), static_cast<double>(m));
}

size_t rouge_order(const std::string& type) {
  if (type.size() == 6 && type.rfind("rouge", 0) == 0 && type[5] >= '1' && type[5] <= '9')
    return static_cast<size_t>(type[5] - '0');
  if (type == "rougeL" || type == "rougeLsum") return 0;
  throw InvalidArgument(fmt::format("rouge: unknown rouge type '{}' (rouge1 .. rouge9, rougeL, rougeLsum)", type));
}

}  // namespace

std::vector<std::string> rouge_tokenize(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : to_lower(text)) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      cur += c;
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::map<std::string, RougeScore> rouge_scores(const std::string& prediction, const std::string& reference,
                                               const std::vector<std::string>& rouge_types, bool use_stemmer) {
  if (use_stemmer) throw Unsupported("rouge: use_stemmer (the Porter stemmer) is not supported");
  for (const std::string& type : rouge_types) rouge_order(type);
  const Tokens target = rouge_tokenize(reference), pred = rouge_tokenize(prediction);
  std::map<std::string, RougeScore> out;
  for (const std::string& type : rouge_types) {
    const size_t n = rouge_order(type);
    if (n > 0) out[type] = rouge_n(target, pred, n);
    else if (type == "rougeL") out[type] = rouge_l(target, pred);
    else out[type] = rouge_lsum(reference, prediction);
  }
  return out;
}

std::map<std::string, double> corpus_rouge(const std::vector<std::string>& predictions,
                                           const std::vector<std::vector<std::string>>& references,
                                           const std::vector<std::string>& rouge_types, bool use_stemmer) {
  check_corpus("rouge", predictions.size(), references);
  if (rouge_types.empty()) throw InvalidArgument("rouge: no rouge types asked for");
  std::map<std::string, double> sums;
  for (const std::string& type : rouge_types) sums[type] = 0;
  for (size_t i = 0; i < predictions.size(); ++i) {
    std::map<std::string, double> best;
    for (const std::string& ref : references[i])
      for (const auto& [type, s] : rouge_scores(predictions[i], ref, rouge_types, use_stemmer))
        best[type] = std::max(best.count(type) ? best[type] : 0.0, s.fmeasure);
    for (const auto& [type, f] : best) sums[type] += f;
  }
  if (!predictions.empty())
    for (auto& [type, total] : sums) total /= static_cast<double>(predictions.size());
  return sums;
}

}  // namespace kiln::text
