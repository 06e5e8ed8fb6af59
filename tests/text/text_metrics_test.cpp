// BLEU, chrF and ROUGE against hand-computed cases from sacreBLEU's and rouge-score's definitions
// (tests/python/test_text_metrics.py checks them against reference implementations on real text).
#include "kiln/text_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kiln/error.h"

namespace kiln::text {
namespace {

TEST(Tokenize13a, SplitsPunctuationAndKeepsNumbers) {
  EXPECT_EQ(tokenize_13a("Hello, world."), "Hello , world .");
  EXPECT_EQ(tokenize_13a("3.14 and 1,000 cost $5."), "3.14 and 1,000 cost $ 5 .");
  EXPECT_EQ(tokenize_13a("a-b 5-3"), "a-b 5 - 3");
  EXPECT_EQ(tokenize_13a("&quot;hi&quot; (x) &amp; y&lt;z"), "\" hi \" ( x ) & y < z");
  EXPECT_EQ(tokenize_13a("don't <skipped>stop-\nnow\n"), "don't stopnow");
  EXPECT_EQ(tokenize_13a("  many   spaces\there "), "many spaces here");
  EXPECT_EQ(tokenize_13a("caf\xc3\xa9."), "caf\xc3\xa9 .");
}

// hyp "the cat sat on the mat", ref "the cat is on the mat": matches 5/6, 3/5, 1/4, 0/3.
TEST(Bleu, CountsClippedNgramsAndSmooths) {
  const std::vector<std::string> hyp = {"the cat sat on the mat"};
  const std::vector<std::vector<std::string>> refs = {{"the cat is on the mat"}};
  BleuScore s = corpus_bleu(hyp, refs);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{5, 3, 1, 0}));
  EXPECT_EQ(s.totals, (std::vector<int64_t>{6, 5, 4, 3}));
  EXPECT_EQ(s.sys_len, 6);
  EXPECT_EQ(s.ref_len, 6);
  EXPECT_DOUBLE_EQ(s.bp, 1.0);
  EXPECT_LT(s.score, 1e-300);  // no smoothing: a zero 4-gram precision makes BLEU 0

  BleuOptions exp;
  exp.smooth_method = "exp";
  s = corpus_bleu(hyp, refs, exp);
  const double p4 = 100.0 / (2 * 3);  // the first order without a match: 1 / (2 * total)
  EXPECT_NEAR(s.precisions[3], p4, 1e-12);
  EXPECT_NEAR(s.score, std::pow(100.0 * 5 / 6 * 100.0 * 3 / 5 * 100.0 / 4 * p4, 0.25), 1e-10);

  BleuOptions floor;
  floor.smooth_method = "floor";
  EXPECT_NEAR(corpus_bleu(hyp, refs, floor).precisions[3], 100.0 * 0.1 / 3, 1e-12);
  BleuOptions addk;
  addk.smooth_method = "add-k";
  s = corpus_bleu(hyp, refs, addk);
  EXPECT_NEAR(s.precisions[1], 100.0 * 4 / 6, 1e-12);
  EXPECT_NEAR(s.precisions[3], 100.0 * 1 / 4, 1e-12);
  EXPECT_NEAR(s.precisions[0], 100.0 * 5 / 6, 1e-12);  // order 1 is not smoothed
}

TEST(Bleu, BrevityPenaltyUsesTheClosestReferenceTiesToTheShorter) {
  // hyp of 2 tokens; references of 3 and 1 tokens are equally close: the shorter (1) counts.
  BleuScore s = corpus_bleu({"a b"}, {{"a b c", "a"}}, {.max_ngram_order = 1});
  EXPECT_EQ(s.ref_len, 1);
  EXPECT_DOUBLE_EQ(s.bp, 1.0);
  EXPECT_NEAR(s.score, 100.0, 1e-12);
  // hyp of 2 against 4: bp = exp(1 - 4/2).
  s = corpus_bleu({"a b"}, {{"a b c d"}}, {.max_ngram_order = 2});
  EXPECT_NEAR(s.bp, std::exp(1.0 - 2.0), 1e-15);
  EXPECT_NEAR(s.score, std::exp(1.0 - 2.0) * 100.0, 1e-10);
  // Matches are clipped by the largest count in any one reference.
  s = corpus_bleu({"the the the"}, {{"the cat", "the the mat"}}, {.max_ngram_order = 1});
  EXPECT_EQ(s.counts[0], 2);
}

TEST(Bleu, SumsStatisticsOverTheCorpusAndLowercases) {
  BleuOptions o;
  o.max_ngram_order = 2;
  o.lowercase = true;
  const BleuScore s = corpus_bleu({"The Cat", "a dog barks"}, {{"the cat"}, {"a dog sleeps"}}, o);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(s.totals, (std::vector<int64_t>{5, 3}));
  EXPECT_NEAR(s.score, 100.0 * std::sqrt(4.0 / 5 * 2.0 / 3), 1e-10);
}

TEST(Bleu, RefusesBadInput) {
  EXPECT_THROW(corpus_bleu({"a"}, {}), InvalidArgument);
  EXPECT_THROW(corpus_bleu({"a"}, {{}}), InvalidArgument);
  EXPECT_THROW(corpus_bleu({"a"}, {{"a"}}, {.tokenize = "intl"}), InvalidArgument);
  EXPECT_THROW(corpus_bleu({"a"}, {{"a"}}, {.smooth_method = "linear"}), InvalidArgument);
  EXPECT_THROW(corpus_bleu({"\xff"}, {{"a"}}), InvalidArgument);
}

// chrF with char_order 1 and beta 1: unigram character F1 over non-space characters.
TEST(Chrf, CharacterNgramFScore) {
  ChrfOptions o;
  o.char_order = 1;
  o.beta = 1;
  // "ab c" -> a b c; "abd" -> a b d: 2 matches of 3 and 3.
  EXPECT_NEAR(corpus_chrf({"ab c"}, {{"abd"}}, o).score, 100.0 * 2.0 / 3.0, 1e-12);
  o.whitespace = true;  // the space counts as a character of the hypothesis
  EXPECT_NEAR(corpus_chrf({"ab c"}, {{"abd"}}, o).score, 100.0 * 2 * (2.0 / 4) * (2.0 / 3) / (2.0 / 4 + 2.0 / 3),
              1e-12);
}

TEST(Chrf, DefaultOrdersAndBestReference) {
  // Identical text scores 100; a sentence takes its best reference.
  EXPECT_NEAR(corpus_chrf({"hello there"}, {{"hello there"}}).score, 100.0, 1e-12);
  EXPECT_NEAR(corpus_chrf({"hello there"}, {{"xyz", "hello there"}}).score, 100.0, 1e-12);
  // "abc" vs "abd", orders 1..2, beta 2: order 1 P = R = 2/3, order 2 P = R = 1/2.
  ChrfOptions o;
  o.char_order = 2;
  const double p = (2.0 / 3 + 0.5) / 2;
  EXPECT_NEAR(corpus_chrf({"abc"}, {{"abd"}}, o).score, 100.0 * p, 1e-12);
  // Orders the hypothesis is too short for leave the average (effective order 1 here).
  o.char_order = 3;
  EXPECT_NEAR(corpus_chrf({"a"}, {{"a"}}, o).score, 100.0, 1e-12);
}

TEST(Chrf, WordNgramsForChrfPlusPlus) {
  ChrfOptions o;
  o.char_order = 1;
  o.word_order = 1;
  o.beta = 1;
  // Characters: "hi," vs "hi": h i , / h i: P 2/3, R 1. Words: "hi" "," vs "hi": P 1/2, R 1.
  const double p = (2.0 / 3 + 0.5) / 2, r = 1.0;
  EXPECT_NEAR(corpus_chrf({"hi,"}, {{"hi"}}, o).score, 100.0 * 2 * p * r / (p + r), 1e-12);
  EXPECT_THROW(corpus_chrf({"a"}, {{"a"}}, {.char_order = 0}), InvalidArgument);
}

TEST(Rouge, TokenizesAsRougeScore) {
  EXPECT_EQ(rouge_tokenize("The CAT's hat-trick, 2x!"),
            (std::vector<std::string>{"the", "cat", "s", "hat", "trick", "2x"}));
  EXPECT_TRUE(rouge_tokenize("... !!").empty());
}

TEST(Rouge, NgramsLcsAndSummaryLevel) {
  // target "the cat sat on the mat", prediction "the cat on the mat": unigrams 5 of 5 / 6.
  const auto s = rouge_scores("the cat on the mat", "the cat sat on the mat", {"rouge1", "rouge2", "rougeL"});
  EXPECT_NEAR(s.at("rouge1").precision, 1.0, 1e-15);
  EXPECT_NEAR(s.at("rouge1").recall, 5.0 / 6, 1e-15);
  EXPECT_NEAR(s.at("rouge2").precision, 3.0 / 4, 1e-15);  // the cat, on the, the mat of 4
  EXPECT_NEAR(s.at("rouge2").recall, 3.0 / 5, 1e-15);
  EXPECT_NEAR(s.at("rougeL").recall, 5.0 / 6, 1e-15);  // LCS "the cat on the mat"
  const double f = 2 * 1.0 * (5.0 / 6) / (1.0 + 5.0 / 6);
  EXPECT_NEAR(s.at("rougeL").fmeasure, f, 1e-15);
  // Summary level: reference sentences "a b c" / "d e", candidate "a c" / "b d e": the union LCS
  // of "a b c" against each candidate sentence is {a, c} and {b}: 3 hits; "d e": 2 hits.
  const auto sum = rouge_scores("a c\nb d e", "a b c\nd e", {"rougeLsum", "rougeL"});
  EXPECT_NEAR(sum.at("rougeLsum").recall, 5.0 / 5, 1e-15);
  EXPECT_NEAR(sum.at("rougeLsum").precision, 5.0 / 5, 1e-15);
  EXPECT_NEAR(sum.at("rougeL").recall, 4.0 / 5, 1e-15);  // "a c d e" over the joined text
  EXPECT_NEAR(rouge_scores("", "a", {"rougeL"}).at("rougeL").fmeasure, 0.0, 0.0);
}

TEST(Rouge, CorpusMeanOfBestReferences) {
  const auto m = corpus_rouge({"a b", "c"}, {{"x", "a b"}, {"d"}}, {"rouge1"});
  EXPECT_NEAR(m.at("rouge1"), 0.5, 1e-15);  // 1 (the second reference) and 0
  EXPECT_THROW(corpus_rouge({"a"}, {{"a"}}, {"rougeW"}), InvalidArgument);
  EXPECT_THROW(corpus_rouge({"a"}, {{"a"}}, {"rouge1"}, true), Unsupported);
  EXPECT_THROW(corpus_rouge({"a", "b"}, {{"a"}}), InvalidArgument);
}

}  // namespace
}  // namespace kiln::text
