// N-gram counting for the text metrics (text/ngrams.h).
#include "text/ngrams.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::text {

NgramCounts count_ngrams(const std::vector<std::string>& items, size_t n) {
  NgramCounts counts;
  if (n == 0 || items.size() < n) return counts;
  std::string key;
  for (size_t i = 0; i + n <= items.size(); ++i) {
    key.clear();
    for (size_t k = 0; k < n; ++k) {
      if (k) key += '\x1f';
      key += items[i + k];
    }
    ++counts[key];
  }
  return counts;
}

int64_t clipped_matches(const NgramCounts& counts, const NgramCounts& other) {
  int64_t matches = 0;
  for (const auto& [ngram, count] : counts) {
    auto it = other.find(ngram);
    if (it != other.end()) matches += std::min(count, it->second);
  }
  return matches;
}

int64_t total_count(const NgramCounts& counts) {
  int64_t total = 0;
  for (const auto& [ngram, count] : counts) total += count;
  return total;
}

void check_corpus(const char* metric, size_t hypotheses, const std::vector<std::vector<std::string>>& references) {
  if (hypotheses != references.size())
    throw InvalidArgument(
        fmt::format("{}: {} hypotheses but {} reference lists (one list of references per hypothesis)", metric,
                    hypotheses, references.size()));
  for (size_t i = 0; i < references.size(); ++i)
    if (references[i].empty()) throw InvalidArgument(fmt::format("{}: hypothesis {} has no reference", metric, i));
}

}  // namespace kiln::text
