"""Kiln's tokenizers against reference implementations, on Debian's fortunes:

- byte-level BPE against GPT-2's published encoder (bytes_to_unicode, the pre-tokenizer regex with
  the `regex` module, merges by rank), written out below, over a vocabulary learned here from the
  text (GPT-2's own files are not shipped in Debian); from vocab.json + merges.txt and from a
  Hugging Face tokenizer.json;
- SentencePiece models trained by `kiln tokenizer train` against python3-sentencepiece loading the
  same file (in a process of its own), and a model trained by python3-sentencepiece read by Kiln;
- the Hugging Face calling conventions: padding, truncation, tensors, labels, offsets, pad().
"""
import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import regex
from kiln_package import import_kiln
from text_corpus import fortunes, lines

import_kiln()
import kiln  # noqa: E402
from kiln.tokenizers import AutoTokenizer, train_sentencepiece  # noqa: E402

GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
SPECIAL = "<|endoftext|>"
EXTRA = ["Hello<|endoftext|>world", "naïve café costs 1234 ½ ٣ ✓", "  multiple   spaces\n\ttabs \n\n end  ",
         "it's they're we'll I'd 'quoted' ''", "emoji 😀 ok 😀😀", "", " ", "日本語のテキスト", "x" * 50]


def bytes_to_unicode():
    """GPT-2's encoder.py: printable bytes map to themselves, the rest to 256 + n."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()


class Gpt2Encoder:
    """GPT-2's published Encoder (encoder.py), special tokens split out first as HF does."""

    def __init__(self, vocab, merges):
        self.encoder = vocab
        self.ranks = {tuple(m): i for i, m in enumerate(merges)}

    def bpe(self, token):
        word = tuple(token)
        if len(word) < 2:
            return list(word)
        while True:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new_word, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
        return list(word)

    def encode(self, text):
        ids = []
        for k, piece in enumerate(text.split(SPECIAL)):
            if k:
                ids.append(self.encoder[SPECIAL])
            for token in GPT2_PATTERN.findall(piece):
                token = "".join(BYTE_ENCODER[b] for b in token.encode("utf-8"))
                ids.extend(self.encoder[t] for t in self.bpe(token))
        return ids


def learn_bpe(texts, merges_wanted):
    """A byte-level BPE vocabulary: the most frequent adjacent pair merged, merges_wanted times
    (ties to the smallest pair), over the words of GPT-2's pre-tokenizer."""
    words = collections.Counter()
    for t in texts:
        for token in GPT2_PATTERN.findall(t):
            words[tuple(BYTE_ENCODER[b] for b in token.encode("utf-8"))] += 1
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for w, n in words.items():
            for i in range(len(w) - 1):
                pairs[w[i], w[i + 1]] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = collections.Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    vocab = {BYTE_ENCODER[b]: i for i, b in enumerate(sorted(BYTE_ENCODER))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab[SPECIAL] = len(vocab)
    return vocab, merges


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bpe")
    vocab, merges = learn_bpe(fortunes("wisdom", "science")[:400], 300)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    return folder, vocab, merges


def test_byte_level_bpe_matches_gpt2s_encoder(gpt2_files):
    folder, vocab, merges = gpt2_files
    reference = Gpt2Encoder(vocab, merges)
    tok = AutoTokenizer.from_pretrained(folder)
    texts = fortunes("computers", "linux")[:600] + EXTRA
    for text in texts:
        want = reference.encode(text)
        assert tok.encode(text) == want, text
        assert tok.decode(want) == text
    assert tok.eos_token == SPECIAL and tok.eos_token_id == vocab[SPECIAL]
    assert tok.decode(reference.encode("a<|endoftext|>b"), skip_special_tokens=True) == "ab"
    # A character cut between ids decodes to U+FFFD, as bytes.decode(errors="replace").
    cut = tok.encode("é")[:1]
    assert tok.decode(cut) == bytes([0xC3]).decode("utf-8", errors="replace")


def hf_tokenizer_json(vocab, merges, prefix_space=False):
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": vocab[SPECIAL], "content": SPECIAL, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": prefix_space, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                               "use_regex": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": [f"{a} {b}" for a, b in merges]}}


def test_tokenizer_json_and_save_pretrained(gpt2_files, tmp_path):
    _, vocab, merges = gpt2_files
    reference = Gpt2Encoder(vocab, merges)
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "tokenizer.json").write_text(json.dumps(hf_tokenizer_json(vocab, merges)), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(tmp_path / "json")
    texts = fortunes("work")[:200] + EXTRA
    for text in texts:
        assert tok.encode(text) == reference.encode(text), text
    assert tok.eos_token is None  # a bare tokenizer.json names no roles, as in Hugging Face
    tok.pad_token = SPECIAL
    tok.save_pretrained(tmp_path / "saved")
    back = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert back.pad_token == SPECIAL
    for text in texts:
        assert back.encode(text) == reference.encode(text)
    # add_prefix_space (RoBERTa, BART): the text is encoded as if a space came first.
    prefixed = hf_tokenizer_json(vocab, merges, prefix_space=True)
    (tmp_path / "prefix").mkdir()
    (tmp_path / "prefix" / "tokenizer.json").write_text(json.dumps(prefixed), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(tmp_path / "prefix")
    assert tok.encode("Hello world") == reference.encode(" Hello world")


def test_hugging_face_calling_conventions(gpt2_files):
    folder, vocab, merges = gpt2_files
    tok = AutoTokenizer.from_pretrained(folder)
    texts = ["A short one.", "A rather longer sentence, with more words in it.", "naïve ✓"]
    with pytest.raises(ValueError, match="padding token"):
        tok.pad([{"input_ids": [1]}, {"input_ids": [1, 2]}])
    with pytest.raises(kiln.InvalidArgument, match="pad token"):
        tok(texts, padding=True)
    tok.pad_token = tok.eos_token
    plain = [tok.encode(t) for t in texts]
    batch = tok(texts, padding=True, return_tensors="np")
    width = max(map(len, plain))
    assert batch["input_ids"].shape == (3, width) and batch["input_ids"].dtype == np.int64
    for row, ids, mask in zip(batch["input_ids"], plain, batch["attention_mask"]):
        assert row.tolist() == ids + [tok.pad_token_id] * (width - len(ids))
        assert mask.tolist() == [1] * len(ids) + [0] * (width - len(ids))
    left = tok(texts, padding="max_length", max_length=width + 3, padding_side="left", return_tensors="pt")
    assert left["input_ids"].shape == (3, width + 3)
    assert left["input_ids"][0, -len(plain[0]):].tolist() == plain[0]
    cut = tok(texts, truncation=True, max_length=4)
    assert [len(r) for r in cut["input_ids"]] == [min(4, len(p)) for p in plain]
    assert cut["input_ids"][1] == plain[1][:4]
    one = tok("A short one.")
    assert one["input_ids"] == plain[0] and one["attention_mask"] == [1] * len(plain[0])
    both = tok(texts[:2], text_target=texts[1:], padding=True)
    assert both["labels"][0][:len(plain[1])] == plain[1]
    with pytest.raises(ValueError, match="lengths"):
        tok(texts, return_tensors="np")
    # Offsets in characters of the Python string.
    # Offsets in characters of the Python string; the bytes of one character split between tokens
    # (ï: C3 AF) give each of them that character.
    text = "naïve café ✓ ok"
    enc = tok(text, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    assert sorted(offsets) == offsets
    assert set().union(*(range(b, e) for b, e in offsets)) == set(range(len(text)))
    for token, (b, e) in zip(tok.convert_ids_to_tokens(enc["input_ids"]), offsets):
        if all(ord(c) < 128 for c in text[b:e]):
            assert token.replace("Ġ", " ") == text[b:e]
    # pad() as DataCollatorWithPadding calls it.
    collator = kiln.DataCollatorWithPadding(tok)
    features = [{"input_ids": plain[0], "labels": 1}, {"input_ids": plain[1], "labels": 0}]
    out = collator(features)
    assert out["input_ids"].shape == (2, len(plain[1])) and out["labels"].tolist() == [1, 0]
    assert tok.convert_ids_to_tokens(plain[0])[0] == tok.tokenize("A short one.")[0]
    assert tok.batch_decode(batch["input_ids"], skip_special_tokens=True) == texts


SP_REFERENCE = """
import json, sys
import sentencepiece as spm
model, texts_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
texts = json.load(open(texts_path, encoding="utf-8"))
if mode == "train":
    spm.SentencePieceTrainer.train(input=texts_path + ".corpus", model_prefix=model, vocab_size=600,
                                   model_type="bpe", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=1)
    model = model + ".model"
sp = spm.SentencePieceProcessor(model_file=model)
print(json.dumps({"ids": [sp.encode(t) for t in texts], "pieces": [sp.encode(t, out_type=str) for t in texts],
                  "decoded": [sp.decode(sp.encode(t)) for t in texts]}))
"""


def sentencepiece_reference(model, texts, tmp_path, mode="encode"):
    texts_path = tmp_path / "texts.json"
    texts_path.write_text(json.dumps(texts), encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", SP_REFERENCE, str(model), str(texts_path), mode],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_models_kiln_trains_match_python_sentencepiece(kiln, tmp_path, model_type):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines("computers", "science", "wisdom")) + "\n", encoding="utf-8")
    subprocess.run([str(kiln), "tokenizer", "train", str(corpus), "--model-type", model_type, "--vocab-size", "800",
                    "-o", str(tmp_path / "tok")], check=True, capture_output=True)
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert tok.vocab_size == 800 and tok.pad_token_id == 0 and tok.eos_token_id == 1
    texts = lines("work", "linux")[:500] + ["naïve café ✓", "  spaces  here ", ""]
    ref = sentencepiece_reference(tmp_path / "tok" / "spiece.model", texts, tmp_path)
    for text, ids, pieces, decoded in zip(texts, ref["ids"], ref["pieces"], ref["decoded"]):
        assert tok.encode(text, add_special_tokens=False) == ids, text
        assert tok.tokenize(text) == pieces
        assert tok.encode(text) == ids + [1]  # T5's </s>
        if 2 not in ids:  # sentencepiece writes <unk> as " ⁇ ", Hugging Face (and Kiln) as the token
            assert tok.decode(ids) == decoded
    assert tok.decode(tok.encode("naïve", add_special_tokens=False)).count("<unk>") == 1
    # The same model trained twice (same corpus, seed, one thread) is the same file.
    train_sentencepiece(corpus, tmp_path / "again", model_type=model_type, vocab_size=800)
    assert (tmp_path / "again" / "spiece.model").read_bytes() == (tmp_path / "tok" / "spiece.model").read_bytes()


def test_sentencepiece_model_from_python_sentencepiece(tmp_path):
    texts = lines("linux")[:300]
    (tmp_path / "texts.json.corpus").write_text("\n".join(lines("computers", "science")), encoding="utf-8")
    ref = sentencepiece_reference(tmp_path / "ref", texts, tmp_path, mode="train")
    native = kiln._kiln.load_sentencepiece(str(tmp_path / "ref.model"), False, False)
    for text, ids in zip(texts, ref["ids"]):
        assert native.encode(text, False)["ids"] == ids


def test_clear_errors(tmp_path):
    with pytest.raises(kiln.KilnIOError, match="holds no tokenizer"):
        AutoTokenizer.from_pretrained(tmp_path)
    (tmp_path / "spiece.model").write_bytes(b"\x00garbage")
    with pytest.raises(kiln.CorruptFile, match="not a SentencePiece model"):
        AutoTokenizer.from_pretrained(tmp_path)
    (tmp_path / "spiece.model").unlink()
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    with pytest.raises(kiln.Unsupported, match="model"):
        AutoTokenizer.from_pretrained(tmp_path)
    with pytest.raises(kiln.KilnIOError):
        train_sentencepiece(tmp_path / "missing.txt", tmp_path / "out")


def test_cli_encode_decode_round_trip(kiln, gpt2_files):
    folder, vocab, merges = gpt2_files
    text = "Hello world, it's 2026."
    ids = subprocess.run([str(kiln), "tokenizer", "encode", str(folder), "--text", text], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert [int(i) for i in ids.split(",")] == Gpt2Encoder(vocab, merges).encode(text)
    back = subprocess.run([str(kiln), "tokenizer", "decode", str(folder), "--ids", ids], check=True,
                          capture_output=True, text=True).stdout
    assert back == text + "\n"
    bad = subprocess.run([str(kiln), "tokenizer", "decode", str(folder), "--ids", "1,99999"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "outside the vocabulary" in bad.stderr


def test_corpus_file_reads_real_text():
    assert len(fortunes("computers")) > 500
    assert Path("/usr/share/games/fortunes/computers").stat().st_size > 100000
