// N-gram counts over tokens or characters, shared by the text metrics. An n-gram's key is its
// items joined by '\x1f' (a separator no token holds: tokens are split on it as whitespace).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"

namespace kiln::text {

using NgramCounts = std::unordered_map<std::string, int64_t>;

// The n-grams of order n of `items`, counted.
NgramCounts count_ngrams(const std::vector<std::string>& items, size_t n);
// Sum of min(count, other[ngram]) over `counts`.
int64_t clipped_matches(const NgramCounts& counts, const NgramCounts& other);
int64_t total_count(const NgramCounts& counts);

// The checks every corpus metric makes of its lists.
void check_corpus(const char* metric, size_t hypotheses, const std::vector<std::vector<std::string>>& references);

}  // namespace kiln::text
