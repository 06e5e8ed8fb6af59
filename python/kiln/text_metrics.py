"""Text metrics for generated text with the definitions of the packages Hugging Face's `evaluate`
wraps (kiln/text_metrics.h): sacreBLEU's BLEU and chrF, the rouge-score package's ROUGE.

    from kiln import text_metrics
    text_metrics.sacrebleu(predictions, references)   # {"score", "counts", "totals", "precisions", "bp", ...}
    text_metrics.chrf(predictions, references, word_order=2)   # chrF++
    text_metrics.rouge(predictions, references)       # {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    text_metrics.load("sacrebleu").compute(predictions=..., references=...)   # evaluate's calling style

`references` holds a list of references per prediction (or one string each). BLEU's smoothing is
off by default ("none"; sacreBLEU's own default is "exp"); a corpus whose 4-gram precision is not
zero scores the same either way.
"""
from kiln._core import core as _native

__all__ = ["chrf", "load", "rouge", "sacrebleu"]


def _refs(references):
    return [[r] if isinstance(r, str) else list(r) for r in references]


def sacrebleu(predictions, references, tokenize="13a", lowercase=False, smooth_method="none", smooth_value=None,
              max_ngram_order=4, effective_order=False):
    """Corpus BLEU (0-100) with sacreBLEU's definition."""
    return _native.corpus_bleu(list(predictions), _refs(references), tokenize=tokenize, lowercase=lowercase,
                               smooth_method=smooth_method, smooth_value=smooth_value,
                               max_ngram_order=max_ngram_order, effective_order=effective_order)


def chrf(predictions, references, char_order=6, word_order=0, beta=2, lowercase=False, whitespace=False,
         eps_smoothing=False):
    """Corpus chrF (chrF++ with word_order=2), 0-100, with sacreBLEU's definition."""
    return _native.corpus_chrf(list(predictions), _refs(references), char_order=char_order, word_order=word_order,
                               beta=float(beta), lowercase=lowercase, whitespace=whitespace,
                               eps_smoothing=eps_smoothing)


def rouge(predictions, references, rouge_types=("rouge1", "rouge2", "rougeL", "rougeLsum"), use_stemmer=False,
          use_aggregator=True):
    """ROUGE F-measures: the corpus means (use_aggregator), or per prediction lists; each prediction
    scored against its best reference (rouge-score's score_multi)."""
    predictions, references = list(predictions), _refs(references)
    if use_aggregator:
        return dict(_native.corpus_rouge(predictions, references, list(rouge_types), use_stemmer))
    out = {t: [] for t in rouge_types}
    for p, refs in zip(predictions, references, strict=True):
        best = _native.corpus_rouge([p], [refs], list(rouge_types), use_stemmer)
        for t in rouge_types:
            out[t].append(best[t])
    return out


class _Metric:
    def __init__(self, name, fn):
        self.name = name
        self._fn = fn

    def compute(self, predictions, references, **kwargs):
        return self._fn(predictions, references, **kwargs)


def load(name):
    """evaluate.load's names: "sacrebleu" (or "bleu"), "chrf", "rouge"."""
    table = {"sacrebleu": sacrebleu, "bleu": sacrebleu, "chrf": chrf, "rouge": rouge}
    if name not in table:
        raise ValueError(f"unknown metric {name!r}: Kiln has {sorted(table)}")
    return _Metric(name, table[name])
