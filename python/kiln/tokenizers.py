"""Tokenizers with Hugging Face's calling conventions, over Kiln's native ones (kiln/tokenizers.h):
byte-level BPE (GPT-2, RoBERTa, BART: tokenizer.json, or vocab.json + merges.txt) and SentencePiece
(T5, Marian, LLaMA), including training a SentencePiece model.

    from kiln.tokenizers import AutoTokenizer, train_sentencepiece
    tok = AutoTokenizer.from_pretrained("gpt2-folder")
    batch = tok(["Hello world", "Hi"], padding=True, truncation=True, max_length=32, return_tensors="np")
    text = tok.batch_decode(batch["input_ids"], skip_special_tokens=True)

    train_sentencepiece("corpus.txt", "tok-folder", vocab_size=8000)   # or `kiln tokenizer train`

Offsets (return_offsets_mapping=True) are in characters of the Python string, as Hugging Face's fast
tokenizers give them. What Kiln's tokenizers do not implement (other tokenizer.json models,
normalizers) raises kiln.Unsupported naming the field.
"""
import os
import tempfile

from kiln._core import core as _native

__all__ = ["AutoTokenizer", "BatchEncoding", "PreTrainedTokenizer", "train_sentencepiece"]

_PADDING = {False: "do_not_pad", None: "do_not_pad", "do_not_pad": "do_not_pad", True: "longest",
            "longest": "longest", "max_length": "max_length"}


class BatchEncoding(dict):
    """A dict of input_ids, attention_mask (and offset_mapping, labels) with attribute access."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device):
        """torch tensors moved to `device` (the CPU is the only device Kiln runs on)."""
        return BatchEncoding({k: (v.to(device) if hasattr(v, "to") else v) for k, v in self.items()})


def _as_tensors(rows, return_tensors, what):
    if return_tensors is None:
        return rows
    lengths = {len(r) for r in rows}
    if len(lengths) > 1:
        raise ValueError(f"Unable to create tensor of {what}: the rows have lengths {sorted(lengths)}; pass "
                         "padding=True or padding='max_length'")
    import numpy as np
    array = np.asarray(rows, dtype=np.int64).reshape(len(rows), lengths.pop() if lengths else 0)
    if return_tensors == "np":
        return array
    if return_tensors == "pt":
        import torch
        return torch.from_numpy(array)
    raise ValueError(f"return_tensors must be None, 'np' or 'pt', not {return_tensors!r}")


def _char_offsets(text, byte_offsets):
    """Byte offsets into `text`'s UTF-8 as character offsets; a token holding part of a character
    (byte-level BPE splits some) spans that whole character, as Hugging Face's fast tokenizers do."""
    char_of_byte = []
    for i, ch in enumerate(text):
        char_of_byte.extend([i] * len(ch.encode("utf-8")))
    out = []
    for b, e in byte_offsets:
        if e <= b:
            out.append((0, 0) if e == 0 else (char_of_byte[b] if b < len(char_of_byte) else len(text),) * 2)
        else:
            out.append((char_of_byte[b], char_of_byte[e - 1] + 1))
    return out


class PreTrainedTokenizer:
    """A tokenizer folder's tokenizer with transformers' PreTrainedTokenizer(Fast) methods."""

    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, native, padding_side="right", truncation_side="right", model_max_length=None):
        self._tok = native
        self.padding_side = padding_side
        self.truncation_side = truncation_side
        self.model_max_length = model_max_length if model_max_length is not None else int(1e30)
        self.name_or_path = ""

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        native = _native.load_tokenizer(os.fspath(path))
        config = {}
        config_path = os.path.join(path, "tokenizer_config.json")
        if os.path.exists(config_path):
            import json
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        options = {k: config[k] for k in ("padding_side", "truncation_side", "model_max_length") if k in config}
        options.update({k: kwargs.pop(k) for k in list(kwargs) if k in ("padding_side", "truncation_side",
                                                                        "model_max_length")})
        tok = cls(native, **options)
        tok.name_or_path = os.fspath(path)
        for role in ("pad_token", "eos_token", "bos_token", "unk_token"):
            if role in kwargs:
                setattr(tok, role, kwargs.pop(role))
        if kwargs:
            raise TypeError(f"from_pretrained: unexpected arguments {sorted(kwargs)}")
        return tok

    # -- vocabulary and special tokens -------------------------------------------------------------
    @property
    def vocab_size(self):
        return self._tok.vocab_size

    def __len__(self):
        return self._tok.vocab_size

    def _special(self, role):
        return self._tok.special_tokens()[role] or None

    def _special_id(self, role):
        token = self._special(role)
        return None if token is None else self._tok.token_to_id(token)

    bos_token = property(lambda self: self._special("bos"))
    eos_token = property(lambda self: self._special("eos"))
    unk_token = property(lambda self: self._special("unk"))
    bos_token_id = property(lambda self: self._special_id("bos"))
    eos_token_id = property(lambda self: self._special_id("eos"))
    unk_token_id = property(lambda self: self._special_id("unk"))
    pad_token_id = property(lambda self: self._special_id("pad"))

    @property
    def pad_token(self):
        return self._special("pad")

    @pad_token.setter
    def pad_token(self, token):
        self._tok.set_pad_token(token)

    @property
    def all_special_ids(self):
        return sorted({i for i in (self.bos_token_id, self.eos_token_id, self.unk_token_id, self.pad_token_id)
                       if i is not None})

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            found = self._tok.token_to_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def convert_ids_to_tokens(self, ids, skip_special_tokens=False):
        if isinstance(ids, int):
            return self._tok.id_to_token(ids)
        return [self._tok.id_to_token(int(i)) for i in ids
                if not (skip_special_tokens and self._tok.is_special(int(i)))]

    def get_vocab(self):
        return {self._tok.id_to_token(i): i for i in range(self.vocab_size)}

    # -- encoding ----------------------------------------------------------------------------------
    def tokenize(self, text, add_special_tokens=False):
        return self._tok.encode(text, add_special_tokens)["tokens"]

    def encode(self, text, add_special_tokens=True, padding=False, truncation=None, max_length=None,
               return_tensors=None):
        out = self(text, add_special_tokens=add_special_tokens, padding=padding, truncation=truncation,
                   max_length=max_length, return_tensors=return_tensors, return_attention_mask=False)
        return out["input_ids"]

    def __call__(self, text=None, text_target=None, padding=False, truncation=None, max_length=None,
                 pad_to_multiple_of=None, return_tensors=None, return_attention_mask=True,
                 add_special_tokens=True, return_offsets_mapping=False, padding_side=None, **kwargs):
        if kwargs.pop("return_token_type_ids", None):
            raise NotImplementedError("return_token_type_ids: Kiln's tokenizers have no token type ids")
        if kwargs:
            raise TypeError(f"unexpected arguments {sorted(kwargs)}")
        if text is None and text_target is None:
            raise ValueError("You need to specify either `text` or `text_target`.")
        options = dict(padding=padding, truncation=truncation, max_length=max_length,
                       pad_to_multiple_of=pad_to_multiple_of, return_tensors=return_tensors,
                       add_special_tokens=add_special_tokens, padding_side=padding_side)
        out = BatchEncoding()
        if text is not None:
            out.update(self._encode(text, return_attention_mask, return_offsets_mapping, **options))
        if text_target is not None:
            target = self._encode(text_target, False, False, **options)
            if text is None:
                return target
            out["labels"] = target["input_ids"]
        return out

    def _encode(self, text, return_attention_mask, return_offsets_mapping, padding, truncation, max_length,
                pad_to_multiple_of, return_tensors, add_special_tokens, padding_side):
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        if padding not in _PADDING:
            raise ValueError(f"padding must be True, False, 'longest', 'max_length' or 'do_not_pad', not {padding!r}")
        if truncation in (True, "longest_first", "only_first"):
            truncation = True
        elif truncation in (None, False, "do_not_truncate"):
            truncation = bool(truncation is None and max_length is not None)
        else:
            raise ValueError(f"truncation {truncation!r} is not supported (True, False, 'longest_first')")
        if (truncation or _PADDING[padding] == "max_length") and max_length is None:
            max_length = self.model_max_length if self.model_max_length < int(1e29) else None
        side = padding_side or self.padding_side
        ids, mask = self._tok.encode_batch(texts, add_special_tokens, _PADDING[padding], truncation, max_length,
                                           pad_to_multiple_of or 0, side == "left",
                                           self.truncation_side == "left")
        out = BatchEncoding(input_ids=ids)
        if return_attention_mask:
            out["attention_mask"] = mask
        if return_offsets_mapping:
            out["offset_mapping"] = [_char_offsets(t, self._tok.encode(t, add_special_tokens)["offsets"])
                                     for t in texts]
        for key in list(out):
            if single and return_tensors is None:
                out[key] = out[key][0]
            elif key != "offset_mapping":
                out[key] = _as_tensors(out[key], return_tensors, key)
        return out

    def pad(self, encoded_inputs, padding=True, max_length=None, pad_to_multiple_of=None, return_tensors=None,
            return_attention_mask=True, padding_side=None):
        """Pads a list of features (dicts with input_ids, as a dataset's rows) or a dict of lists, as
        DataCollatorWithPadding asks; other keys of equal length are stacked as they are."""
        if isinstance(encoded_inputs, (list, tuple)):
            keys = encoded_inputs[0].keys() if encoded_inputs else []
            encoded_inputs = {k: [f[k] for f in encoded_inputs] for k in keys}
        rows = [list(map(int, r)) for r in encoded_inputs["input_ids"]]
        width = max((len(r) for r in rows), default=0)
        if _PADDING.get(padding) == "max_length" and max_length is not None:
            width = max(width, max_length)
        elif _PADDING.get(padding) == "do_not_pad":
            width = 0
        if pad_to_multiple_of and width % pad_to_multiple_of:
            width += pad_to_multiple_of - width % pad_to_multiple_of
        if any(len(r) < width for r in rows) and self.pad_token_id is None:
            raise ValueError("Asking to pad but the tokenizer does not have a padding token. Please select a token "
                             "to use as `pad_token` `(tokenizer.pad_token = tokenizer.eos_token e.g.)`")
        left = (padding_side or self.padding_side) == "left"
        masks = encoded_inputs.get("attention_mask") or [[1] * len(r) for r in rows]
        out = BatchEncoding()
        ids_out, mask_out = [], []
        for r, m in zip(rows, masks):
            fill = width - len(r)
            ids_out.append([self.pad_token_id] * fill + r if left else r + [self.pad_token_id] * fill)
            mask_out.append([0] * fill + list(map(int, m)) if left else list(map(int, m)) + [0] * fill)
        out["input_ids"] = _as_tensors(ids_out, return_tensors, "input_ids")
        if return_attention_mask:
            out["attention_mask"] = _as_tensors(mask_out, return_tensors, "attention_mask")
        for k, v in encoded_inputs.items():  # other columns (labels, ...) stacked as they are
            if k in ("input_ids", "attention_mask"):
                continue
            if return_tensors is None:
                out[k] = v
                continue
            import numpy as np
            array = np.asarray(v)
            if return_tensors == "pt":
                import torch
                array = torch.from_numpy(array)
            out[k] = array
        return out

    # -- decoding ----------------------------------------------------------------------------------
    def decode(self, token_ids, skip_special_tokens=False, **kwargs):
        if hasattr(token_ids, "tolist"):
            token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self._tok.decode([int(i) for i in token_ids], skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens=False, **kwargs):
        if hasattr(sequences, "tolist"):
            sequences = sequences.tolist()
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def save_pretrained(self, save_directory):
        os.makedirs(save_directory, exist_ok=True)
        self._tok.save_pretrained(os.fspath(save_directory))
        import json
        path = os.path.join(save_directory, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config.update(padding_side=self.padding_side, truncation_side=self.truncation_side)
        if self.model_max_length < int(1e29):
            config["model_max_length"] = self.model_max_length
        fd, tmp = tempfile.mkstemp(dir=save_directory, prefix=".tokenizer_config.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return (path,)


class AutoTokenizer:
    """`AutoTokenizer.from_pretrained(folder)`: the folder's byte-level BPE or SentencePiece tokenizer."""

    @staticmethod
    def from_pretrained(path, **kwargs):
        return PreTrainedTokenizer.from_pretrained(path, **kwargs)


def train_sentencepiece(corpus, output_dir, model_type="unigram", vocab_size=8000, character_coverage=1.0,
                        add_bos=False, seed=0):
    """Trains a SentencePiece model on `corpus` (a text file, a sentence a line) and writes a tokenizer
    folder (T5's layout: pad 0, </s> 1, <unk> 2, </s> added when encoding; add_bos: LLaMA's <s> 3
    added first instead). Returns the tokenizer."""
    os.makedirs(output_dir, exist_ok=True)
    model = os.path.join(output_dir, ".kiln-trained.model")
    _native.train_sentencepiece(os.fspath(corpus), model, model_type=model_type, vocab_size=vocab_size,
                                character_coverage=character_coverage, bos_id=3 if add_bos else -1, seed=seed)
    try:
        native = _native.load_sentencepiece(model, add_bos, not add_bos)
        native.save_pretrained(os.fspath(output_dir))
    finally:
        os.remove(model)
    return PreTrainedTokenizer.from_pretrained(output_dir)
