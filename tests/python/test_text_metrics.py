"""Kiln's BLEU, chrF and ROUGE against reference implementations on Debian's fortunes: sacreBLEU's
13a tokenizer, corpus BLEU and chrF and the rouge-score package's ROUGE, written out below from
those packages' definitions (neither is packaged in Debian), and python3-nltk's corpus BLEU where its
definition coincides with sacreBLEU's (whitespace tokens, no smoothing). Hypotheses are the
fortunes' lines with words dropped, swapped and replaced (seeded); several references per line.
Tolerance 1e-9 (all three compute in double precision)."""
import collections
import math
import random
import re

import pytest
from kiln_package import import_kiln
from nltk.translate.bleu_score import corpus_bleu as nltk_corpus_bleu
from text_corpus import lines

import_kiln()
import kiln  # noqa: E402
from kiln import text_metrics  # noqa: E402

# -- sacreBLEU's definitions ------------------------------------------------------------------------
_13A = [(re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
        (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
        (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
        (re.compile(r"([0-9])(-)"), r"\1 \2 ")]


def tokenize_13a(line):
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    line = f" {line} "
    for pattern, repl in _13A:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def ngrams(tokens, n):
    return collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def reference_bleu(hyps, refs, smooth="none", tokenize=tokenize_13a, order=4):
    correct, total = [0] * order, [0] * order
    sys_len = ref_len = 0
    for hyp, rs in zip(hyps, refs):
        h = tokenize(hyp).split()
        ref_tokens = [tokenize(r).split() for r in rs]
        lens = [len(r) for r in ref_tokens]
        sys_len += len(h)
        ref_len += min(lens, key=lambda n: (abs(len(h) - n), n))
        for n in range(1, order + 1):
            best = collections.Counter()
            for r in ref_tokens:
                best |= ngrams(r, n)
            hc = ngrams(h, n)
            total[n - 1] += sum(hc.values())
            correct[n - 1] += sum(min(c, best[g]) for g, c in hc.items())
    bp = 1.0 if sys_len >= ref_len else (math.exp(1 - ref_len / sys_len) if sys_len else 0.0)
    precisions, smooth_mteval = [0.0] * order, 1.0
    for n in range(order):
        if total[n] == 0:
            break
        if correct[n] == 0:
            if smooth == "exp":
                smooth_mteval *= 2
                precisions[n] = 100.0 / (smooth_mteval * total[n])
        else:
            precisions[n] = 100.0 * correct[n] / total[n]
    score = bp * math.exp(sum(math.log(p) if p > 0 else -9999999999 for p in precisions) / order)
    return score, correct, total


def char_ngrams(text, order, whitespace=False):
    if not whitespace:
        text = "".join(text.split())
    return [collections.Counter(text[i:i + n] for i in range(len(text) - n + 1)) for n in range(1, order + 1)]


_PUNCTS = set('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~')


def chrf_words(text):
    out = []
    for w in text.split():
        if len(w) == 1:
            out.append(w)
        elif w[-1] in _PUNCTS:
            out += [w[:-1], w[-1]]
        elif w[0] in _PUNCTS:
            out += [w[0], w[1:]]
        else:
            out.append(w)
    return out


def chrf_f(stats, beta=2):
    eps, factor = 1e-16, beta ** 2
    avg_prec = avg_rec = 0.0
    effective = 0
    for i in range(len(stats) // 3):
        n_hyp, n_ref, n_match = stats[3 * i:3 * i + 3]
        prec = n_match / n_hyp if n_hyp > 0 else eps
        rec = n_match / n_ref if n_ref > 0 else eps
        effective += n_hyp > 0 and n_ref > 0
        avg_prec += prec
        avg_rec += rec
    if effective == 0:
        return 0.0
    avg_prec, avg_rec = avg_prec / effective, avg_rec / effective
    if avg_prec + avg_rec == 0:
        return 0.0
    return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec)


def reference_chrf(hyps, refs, char_order=6, word_order=0):
    def grams(t):
        g = char_ngrams(t, char_order)
        if word_order:
            words = chrf_words(t)
            g += [ngrams(words, n) for n in range(1, word_order + 1)]
        return g

    totals = [0] * (3 * (char_order + word_order))
    for hyp, rs in zip(hyps, refs):
        hg = grams(hyp)
        best, best_f = None, -1.0
        for r in rs:
            stats = []
            for h, rr in zip(hg, grams(r)):
                stats += [sum(h.values()) if rr else 0, sum(rr.values()), sum(min(c, rr[g]) for g, c in h.items())]
            f = chrf_f(stats)
            if f > best_f:
                best, best_f = stats, f
        totals = [a + b for a, b in zip(totals, best)]
    return chrf_f(totals)


# -- rouge-score's definitions ---------------------------------------------------------------------
def rouge_tokenize(text):
    text = re.sub(r"[^a-z0-9]+", " ", text.lower())
    return [t for t in re.split(r"\s+", text) if re.match(r"^[a-z0-9]+$", t)]


def fmeasure(p, r):
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def lcs_table(ref, can):
    t = [[0] * (len(can) + 1) for _ in range(len(ref) + 1)]
    for i in range(1, len(ref) + 1):
        for j in range(1, len(can) + 1):
            t[i][j] = t[i - 1][j - 1] + 1 if ref[i - 1] == can[j - 1] else max(t[i - 1][j], t[i][j - 1])
    return t


def lcs_ind(ref, can):
    t = lcs_table(ref, can)
    i, j, out = len(ref), len(can), []
    while i > 0 and j > 0:
        if ref[i - 1] == can[j - 1]:
            out.insert(0, i - 1)
            i -= 1
            j -= 1
        elif t[i][j - 1] > t[i - 1][j]:
            j -= 1
        else:
            i -= 1
    return out


def reference_rouge(target, prediction, kind):
    if kind.startswith("rouge") and kind[5:].isdigit():
        n = int(kind[5:])
        t, p = ngrams(rouge_tokenize(target), n), ngrams(rouge_tokenize(prediction), n)
        hits = sum(min(c, p[g]) for g, c in t.items())
        return fmeasure(hits / max(sum(p.values()), 1), hits / max(sum(t.values()), 1))
    if kind == "rougeL":
        t, p = rouge_tokenize(target), rouge_tokenize(prediction)
        if not t or not p:
            return 0.0
        lcs = lcs_table(t, p)[-1][-1]
        return fmeasure(lcs / len(p), lcs / len(t))
    ref = [rouge_tokenize(s) for s in target.split("\n") if s]
    can = [rouge_tokenize(s) for s in prediction.split("\n") if s]
    m, n = sum(map(len, ref)), sum(map(len, can))
    if not m or not n:
        return 0.0
    rc, cc = collections.Counter(), collections.Counter()
    for s in ref:
        rc.update(s)
    for s in can:
        cc.update(s)
    hits = 0
    for r in ref:
        for i in sorted(set().union(*[lcs_ind(r, c) for c in can])):
            t = r[i]
            if cc[t] > 0 and rc[t] > 0:
                hits += 1
                cc[t] -= 1
                rc[t] -= 1
    return fmeasure(hits / n, hits / m)


# -- the corpus --------------------------------------------------------------------------------------
def perturb(text, rng):
    words = text.split()
    for _ in range(rng.randint(0, 3)):
        if not words:
            break
        i = rng.randrange(len(words))
        action = rng.random()
        if action < 0.3:
            del words[i]
        elif action < 0.6 and i + 1 < len(words):
            words[i], words[i + 1] = words[i + 1], words[i]
        else:
            words[i] = rng.choice(["the", "a", "computer", "is", "not", "Unix", "42,", "3.5", "(yes)"])
    return " ".join(words)


@pytest.fixture(scope="module")
def corpus():
    rng = random.Random(0)
    refs_text = lines("computers", "science")[:400]
    hyps = [perturb(t, rng) for t in refs_text]
    refs = [[t, perturb(t, rng)] for t in refs_text]
    return hyps, refs


def test_13a_tokenizer_matches_sacrebleus_regexes(corpus):
    hyps, refs = corpus
    extra = ["&quot;a&amp;b&lt;c&gt;", "x-\ny <skipped>", "5-3 a-b", "naïve, ok."]
    texts = hyps + [r for rs in refs for r in rs] + extra
    for t in texts:
        assert kiln._kiln.tokenize_13a(t) == tokenize_13a(t), t


@pytest.mark.parametrize("smooth", ["none", "exp"])
def test_corpus_bleu_matches_sacrebleus_definition(corpus, smooth):
    hyps, refs = corpus
    got = text_metrics.sacrebleu(hyps, refs, smooth_method=smooth)
    score, correct, total = reference_bleu(hyps, refs, smooth)
    assert got["counts"] == correct and got["totals"] == total
    assert got["score"] == pytest.approx(score, rel=1e-9, abs=1e-9)
    # Sentence by sentence, where zero precisions are common.
    for h, r in zip(hyps[:100], refs[:100]):
        assert text_metrics.sacrebleu([h], [r], smooth_method=smooth)["score"] == pytest.approx(
            reference_bleu([h], [r], smooth)[0], rel=1e-9, abs=1e-9)


def test_corpus_bleu_matches_nltk_without_smoothing(corpus):
    # nltk counts a hypothesis without n-grams of some order (under 4 words) as 1 n-gram of that
    # order, sacreBLEU as none: the definitions coincide on hypotheses of 4 words or more.
    pairs = [(h, rs) for h, rs in zip(*corpus) if len(h.split()) >= 4]
    assert len(pairs) > 300
    hyps, refs = [h for h, _ in pairs], [rs for _, rs in pairs]
    got = text_metrics.sacrebleu(hyps, refs, tokenize="none")["score"]
    want = nltk_corpus_bleu([[r.split() for r in rs] for rs in refs], [h.split() for h in hyps])
    assert got == pytest.approx(100 * want, rel=1e-9)


@pytest.mark.parametrize("word_order", [0, 2])
def test_chrf_matches_sacrebleus_definition(corpus, word_order):
    hyps, refs = corpus
    got = text_metrics.chrf(hyps, refs, word_order=word_order)["score"]
    assert got == pytest.approx(reference_chrf(hyps, refs, word_order=word_order), rel=1e-9)
    for h, r in zip(hyps[:50], refs[:50]):
        assert text_metrics.chrf([h], [r], word_order=word_order)["score"] == pytest.approx(
            reference_chrf([h], [r], word_order=word_order), rel=1e-9, abs=1e-12)


def test_rouge_matches_rouge_scores_definitions(corpus):
    hyps, refs = corpus
    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    # Multi-sentence texts for rougeLsum: three lines joined.
    multi_h = ["\n".join(hyps[i:i + 3]) for i in range(0, 60, 3)]
    multi_r = ["\n".join(rs[0] for rs in refs[i:i + 3]) for i in range(0, 60, 3)]
    for h, r in list(zip(hyps[:200], (rs[0] for rs in refs))) + list(zip(multi_h, multi_r)):
        got = kiln._kiln.rouge_scores(h, r, types)
        for kind in types:
            assert got[kind][2] == pytest.approx(reference_rouge(r, h, kind), rel=1e-12, abs=1e-15), (kind, h, r)
    means = text_metrics.rouge(hyps, refs)
    for kind in types:
        want = sum(max(reference_rouge(r, h, kind) for r in rs) for h, rs in zip(hyps, refs)) / len(hyps)
        assert means[kind] == pytest.approx(want, rel=1e-12)
    per = text_metrics.rouge(hyps[:5], refs[:5], use_aggregator=False)
    assert len(per["rouge1"]) == 5


def test_evaluate_style_load_and_errors():
    bleu = text_metrics.load("sacrebleu")
    assert bleu.compute(predictions=["a b c d"], references=["a b c d"])["score"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="unknown metric"):
        text_metrics.load("meteor")
    with pytest.raises(kiln.InvalidArgument, match="2 hypotheses but 1 reference"):
        text_metrics.sacrebleu(["a", "b"], [["a"]])
    with pytest.raises(kiln.Unsupported, match="stemmer"):
        text_metrics.rouge(["a"], ["a"], use_stemmer=True)
