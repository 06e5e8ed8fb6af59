"""examples/translation: verse pairs read from the Bibles Debian ships (sword-text-web and
sword-text-sparv, through diatheke) and the translation script at a small scale: a SentencePiece
tokenizer trained on the pairs, the zoo's BART trained by Seq2SeqTrainer, BLEU and chrF of its
translations of held-out verses. The full-size run and its figures are in docs/text.md."""
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "translation"


def _modules():
    if shutil.which("diatheke") is None:
        return ""
    proc = subprocess.run(["diatheke", "-b", "system", "-k", "modulelist"], capture_output=True, text=True)
    return proc.stdout


pytestmark = pytest.mark.skipif(not all(m in _modules() for m in ("engWEB2015eb", "spaRV1909eb")),
                                reason="diatheke and the sword-text-web / sword-text-sparv modules are not installed "
                                       "(scripts/setup.sh --test installs them)")


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verses_pair_by_reference_as_plain_text():
    bible = load("bible")
    pairs = bible.aligned_pairs("John 3", "engWEB2015eb", "spaRV1909eb")
    refs = {r: (en, es) for r, en, es in pairs}
    assert len(pairs) == 36 and pairs[0][0] == "John 3:1" and pairs[-1][0] == "John 3:36"
    en, es = refs["John 3:16"]
    assert en.startswith("For God so loved the world, that he gave his only born Son, that whoever believes")
    assert es.startswith("Porque de tal manera amó Dios al mundo, que ha dado á su Hijo unigénito")
    for r, en, es in pairs:  # no markup, no Strong's numbers, no doubled or stray spaces
        for text in (en, es):
            assert "<" not in text and ">" not in text and "  " not in text and " ," not in text, (r, text)
    # Markup between words becomes one space; before punctuation none.
    assert bible.clean('<w s="1">Jude</w>,<w>a</w> <q><w>born</w></q><q><w>Son</w></q> .') == "Jude, a born Son."
    with pytest.raises(bible.BibleError, match="expected 'Book C:V: text'"):
        bible.parse("not a verse\n", "engWEB2015eb")
    with pytest.raises(bible.BibleError, match="printed no verses"):
        bible.read("John 3:16", "NoSuchModule")


def test_translation_script_trains_and_scores_held_out_verses(tmp_path, monkeypatch):
    script = load("run_translation")
    results = script.main(["--output_dir", str(tmp_path), "--books", "Mark", "--vocab_size", "500",
                           "--max_length", "48", "--d_model", "32", "--layers", "1", "--max_steps", "150",
                           "--eval_verses", "16", "--batch_size", "16", "--learning_rate", "3e-3",
                           "--warmup_steps", "10"])
    assert results["pairs"] > 600 and results["eval_pairs"] == 16
    assert results["eval_loss"] < results["eval_loss_before"] - 1.0
    assert 0.0 <= results["bleu"] <= 100.0 and results["chrf"] > results["chrf_before"]
    assert json.loads((tmp_path / "results.json").read_text()) == results
    rows = (tmp_path / "predictions.tsv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 16 and all(len(r.split("\t")) == 3 for r in rows)
    assert (tmp_path / "tokenizer" / "spiece.model").exists() and (tmp_path / "model" / "config.json").exists()
