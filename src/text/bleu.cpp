// Corpus BLEU with sacreBLEU's definition and its 13a tokenizer (kiln/text_metrics.h).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kiln/text_metrics.h"
#include "text/ngrams.h"
#include "text/utf8.h"

namespace kiln::text {

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// mteval's symbol class [{-~[-` -&(-+:-@/]: every ASCII punctuation or symbol but ' , - . and
// the space itself counts (the space is in " -&", a no-op).
bool is_13a_symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

// Python's re.sub for a two-character pattern: matches taken left to right without overlap. On
// UTF-8 bytes a pattern's [^0-9] takes one byte of a multi-byte character, which changes nothing:
// no other byte of it can start or end a match.
template <typename Match, typename Emit>
std::string substitute_pairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

std::vector<std::string> tokens_of(const std::string& line, const BleuOptions& o) {
  const std::string text = o.lowercase ? to_lower(line) : line;
  return split_whitespace(o.tokenize == "13a" ? tokenize_13a(text) : text);
}

// Of the references' lengths, the closest to the hypothesis's (ties to the shorter).
int64_t closest_length(int64_t hyp_len, const std::vector<int64_t>& lengths) {
  int64_t best_diff = -1, best = -1;
  for (int64_t len : lengths) {
    const int64_t diff = std::llabs(hyp_len - len);
    if (best_diff == -1 || diff < best_diff || (diff == best_diff && len < best)) {
      best_diff = diff;
      best = len;
    }
  }
  return best;
}

void check_options(const BleuOptions& o) {
  if (o.tokenize != "13a" && o.tokenize != "none")
    throw InvalidArgument(fmt::format("bleu: tokenize '{}' is not supported (13a, none)", o.tokenize));
  if (o.smooth_method != "none" && o.smooth_method != "exp" && o.smooth_method != "floor" && o.smooth_method != "add-k")
    throw InvalidArgument(
        fmt::format("bleu: smooth_method '{}' is unknown (none, exp, floor, add-k)", o.smooth_method));
  if (o.max_ngram_order < 1) throw InvalidArgument(fmt::format("bleu: max_ngram_order {} < 1", o.max_ngram_order));
}

// sacreBLEU's compute_bleu over the corpus statistics.
void score(BleuScore& s, const BleuOptions& o) {
  const size_t orders = static_cast<size_t>(o.max_ngram_order);
  const double smooth = o.smooth_value >= 0 ? o.smooth_value : (o.smooth_method == "floor" ? 0.1 : 1.0);
  s.precisions.assign(orders, 0.0);
  s.bp =
      s.sys_len < s.ref_len ? (s.sys_len > 0 ? std::exp(1.0 - static_cast<double>(s.ref_len) / s.sys_len) : 0.0) : 1.0;
  std::vector<double> correct(s.counts.begin(), s.counts.end()), total(s.totals.begin(), s.totals.end());
  double exp_smooth = 1.0;
  size_t effective = orders;
  for (size_t n = 0; n < orders; ++n) {
    if (o.smooth_method == "add-k" && n > 0) {
      correct[n] += smooth;
      total[n] += smooth;
    }
    if (total[n] == 0) break;
    if (o.effective_order) effective = n + 1;
    if (correct[n] == 0) {
      if (o.smooth_method == "exp") {
        exp_smooth *= 2;
        s.precisions[n] = 100.0 / (exp_smooth * total[n]);
      } else if (o.smooth_method == "floor") {
        s.precisions[n] = 100.0 * smooth / total[n];
      }
    } else {
      s.precisions[n] = 100.0 * correct[n] / total[n];
    }
  }
  double log_sum = 0;
  for (size_t n = 0; n < effective; ++n) log_sum += s.precisions[n] > 0 ? std::log(s.precisions[n]) : -9999999999.0;
  s.score = s.bp * std::exp(log_sum / static_cast<double>(effective));
}

}  // namespace

std::string tokenize_13a(const std::string& input) {
  std::string line = input;
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  std::string spaced = " ";
  for (char c : line) {
    if (is_13a_symbol(c) && c != ' ') {
      spaced += ' ';
      spaced += c;
      spaced += ' ';
    } else {
      spaced += c;
    }
  }
  spaced += ' ';
  auto emit_split = [](std::string& out, char a, char b) { out.append({a, ' ', b, ' '}); };
  spaced = substitute_pairs(
      spaced, [](char a, char b) { return !is_digit(a) && (b == '.' || b == ','); }, emit_split);
  spaced = substitute_pairs(
      spaced, [](char a, char b) { return (a == '.' || a == ',') && !is_digit(b); },
      [](std::string& out, char a, char b) {
        out.append({' ', a, ' ', b});
      });
  spaced = substitute_pairs(
      spaced, [](char a, char b) { return is_digit(a) && b == '-'; }, emit_split);
  return join_words(split_whitespace(spaced));
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const BleuOptions& o) {
  check_options(o);
  check_corpus("bleu", hypotheses.size(), references);
  const size_t orders = static_cast<size_t>(o.max_ngram_order);
  BleuScore s;
  s.counts.assign(orders, 0);
  s.totals.assign(orders, 0);
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const std::vector<std::string> hyp = tokens_of(hypotheses[i], o);
    std::vector<int64_t> ref_lengths;
    std::vector<NgramCounts> ref_max(orders);  // each n-gram's largest count in any reference
    for (const std::string& ref_text : references[i]) {
      const std::vector<std::string> ref = tokens_of(ref_text, o);
      ref_lengths.push_back(static_cast<int64_t>(ref.size()));
      for (size_t n = 0; n < orders; ++n)
        for (const auto& [ngram, count] : count_ngrams(ref, n + 1)) {
          int64_t& best = ref_max[n][ngram];
          best = std::max(best, count);
        }
    }
    s.sys_len += static_cast<int64_t>(hyp.size());
    s.ref_len += closest_length(static_cast<int64_t>(hyp.size()), ref_lengths);
    for (size_t n = 0; n < orders; ++n) {
      const NgramCounts counts = count_ngrams(hyp, n + 1);
      s.totals[n] += total_count(counts);
      s.counts[n] += clipped_matches(counts, ref_max[n]);
    }
  }
  score(s, o);
  return s;
}

}  // namespace kiln::text
