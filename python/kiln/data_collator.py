"""Hugging Face's data collators (transformers.data.data_collator), over numpy, for kiln.Trainer:

    DataCollatorWithPadding(tokenizer)                  # pads input_ids / attention_mask per batch
    DataCollatorForLanguageModeling(tokenizer, mlm=...)  # causal labels, or BERT's 80/10/10 masking
    DataCollatorForSeq2Seq(tokenizer, model=None)        # labels padded with -100
    default_data_collator                                # stacks (kiln/trainer_data.py)

A collator gets a list of items (dicts whose values are lists, numbers or arrays, of any length) and
returns a dict of numpy arrays with the batch first; batches differ in length from one to the next
(dynamic padding). return_tensors is accepted for HF's signature; the batches are numpy arrays
whatever it says (Kiln reads numpy, and numpy arrays index like torch tensors).

The tokenizer: one with a `pad` method (a transformers tokenizer) pads as it does itself; any other
object is read for HF's attributes: pad_token_id, padding_side ("right"), model_input_names
(["input_ids", "token_type_ids", "attention_mask"]), and for masking mask_token_id, len(tokenizer)
(the vocabulary for random replacements), and get_special_tokens_mask or all_special_ids (tokens
never masked; the pad token is never masked either). Kiln's own tokenizers are planned (issue 23).
"""
from collections.abc import Mapping

import numpy as np

from kiln.trainer_data import as_array, default_data_collator

__all__ = ["DataCollatorWithPadding", "DataCollatorForLanguageModeling", "DataCollatorForSeq2Seq",
           "default_data_collator", "pad_features"]

_DEFAULT_INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]
_PAD_VALUES = {"attention_mask": 0, "token_type_ids": 0, "special_tokens_mask": 1, "labels": -100}


def _round_up(length, multiple):
    return length if not multiple else (length + multiple - 1) // multiple * multiple


def _pad_rows(rows, length, value, side, what):
    """Rows (1-D or more, first axis the sequence) padded along axis 0 to `length`, stacked."""
    arrays = [as_array(r, what) for r in rows]
    rest = arrays[0].shape[1:]
    for i, a in enumerate(arrays):
        if a.ndim == 0 or a.shape[1:] != rest:
            raise ValueError(f"{what}: item {i} has shape {list(a.shape)}, item 0 has {list(arrays[0].shape)}; only "
                             "the first (sequence) dimension may differ")
        if a.shape[0] > length:
            raise ValueError(f"{what}: item {i} has {a.shape[0]} tokens, more than max_length {length} "
                             "(truncate when tokenizing)")
    dtype = np.result_type(*arrays)
    out = np.full((len(arrays), length) + rest, value, dtype=dtype)
    for i, a in enumerate(arrays):
        if side == "left":
            out[i, length - a.shape[0]:] = a
        else:
            out[i, :a.shape[0]] = a
    return out


def pad_features(features, tokenizer=None, padding=True, max_length=None, pad_to_multiple_of=None):
    """HF's tokenizer.pad over numpy: the model input columns padded to the batch's longest (padding
    True / "longest") or to max_length ("max_length"), rounded up to pad_to_multiple_of, on the
    tokenizer's padding_side, with an attention_mask added; other columns stacked as they are."""
    if tokenizer is not None and callable(getattr(tokenizer, "pad", None)):
        batch = tokenizer.pad(features, padding=padding, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of,
                              return_tensors="np")
        return {k: np.asarray(v) for k, v in dict(batch).items()}
    if padding not in (True, False, "longest", "max_length", "do_not_pad"):
        raise ValueError(f"padding must be True, False, 'longest', 'max_length' or 'do_not_pad', not {padding!r}")
    features = [dict(f) for f in features]
    names = list(getattr(tokenizer, "model_input_names", None) or _DEFAULT_INPUT_NAMES)
    first = names[0]
    if first not in features[0]:
        raise ValueError(f"You should supply an encoding or a list of encodings to this method that includes {first}, "
                         f"but you provided {list(features[0].keys())}")
    side = getattr(tokenizer, "padding_side", "right")
    pad_id = getattr(tokenizer, "pad_token_id", None)
    lengths = [len(f[first]) for f in features]
    if padding in (True, "longest"):
        length = max(lengths)
    elif padding == "max_length":
        if max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        length = max_length
    else:
        length = None
    if length is not None:
        length = _round_up(length, pad_to_multiple_of)
    if length is not None and any(n != length for n in lengths) and pad_id is None:
        raise ValueError("Asking to pad but the tokenizer does not have a padding token (pad_token_id is None)")
    if "attention_mask" in names and "attention_mask" not in features[0]:
        for f in features:
            f["attention_mask"] = np.ones(len(f[first]), dtype=np.int64)
    batch = {}
    for key in features[0]:
        column = [f[key] for f in features]
        if key in names and length is not None:
            batch[key] = _pad_rows(column, length, _PAD_VALUES.get(key, pad_id), side, f"column '{key}'")
        else:
            try:
                batch[key] = np.stack([as_array(v, f"column '{key}'") for v in column])
            except (ValueError, TypeError) as e:  # ShapeError / DTypeError too
                raise ValueError(f"column '{key}' cannot be batched ({e}); pad it too (e.g. with "
                                 "DataCollatorForSeq2Seq for labels), or drop it") from None
    return batch


class DataCollatorWithPadding:
    """HF's: items padded to the batch's longest; "label" / "label_ids" become "labels"."""

    def __init__(self, tokenizer, padding=True, max_length=None, pad_to_multiple_of=None, return_tensors="pt"):
        self.tokenizer = tokenizer
        self.padding = padding
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.return_tensors = return_tensors

    def __call__(self, features):
        batch = pad_features(features, self.tokenizer, self.padding, self.max_length, self.pad_to_multiple_of)
        for old in ("label", "label_ids"):
            if old in batch:
                batch["labels"] = batch.pop(old)
        return batch


class DataCollatorForSeq2Seq:
    """HF's: labels padded with label_pad_token_id (-100, ignored by the loss) to the batch's longest
    label (rounded up to pad_to_multiple_of), the inputs by the tokenizer; with a model that has
    prepare_decoder_input_ids_from_labels, decoder_input_ids made from the padded labels."""

    def __init__(self, tokenizer, model=None, padding=True, max_length=None, pad_to_multiple_of=None,
                 label_pad_token_id=-100, return_tensors="pt"):
        self.tokenizer = tokenizer
        self.model = model
        self.padding = padding
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.label_pad_token_id = label_pad_token_id
        self.return_tensors = return_tensors

    def __call__(self, features):
        label_name = "label" if "label" in features[0] else "labels"
        labels = [f[label_name] for f in features] if label_name in features[0] else None
        if labels is not None and all(lab is None for lab in labels):
            labels = None
        rest = [{k: v for k, v in f.items() if k != label_name} for f in features]
        batch = pad_features(rest, self.tokenizer, self.padding, self.max_length, self.pad_to_multiple_of)
        if labels is not None:
            if np.ndim(labels[0]) == 0:  # one label per item
                batch["labels"] = np.asarray(labels, dtype=np.int64)
            else:
                longest = max(len(lab) for lab in labels)
                if self.padding == "max_length" and self.max_length is not None:
                    longest = self.max_length
                longest = _round_up(longest, self.pad_to_multiple_of)
                side = getattr(self.tokenizer, "padding_side", "right")
                batch["labels"] = _pad_rows(labels, longest, self.label_pad_token_id, side, "column 'labels'")
                batch["labels"] = batch["labels"].astype(np.int64)
        prepare = getattr(self.model, "prepare_decoder_input_ids_from_labels", None)
        if labels is not None and prepare is not None:
            batch["decoder_input_ids"] = np.asarray(prepare(labels=batch["labels"]))
        return batch


class DataCollatorForLanguageModeling:
    """HF's: with mlm=False, causal language modelling (labels = input_ids, padding -100; the model
    shifts them); with mlm=True, BERT's masking: mlm_probability of the tokens (never special or
    padding ones) are chosen, their labels kept (others -100), and of them mask_replace_prob become
    the mask token, random_replace_prob a random token, the rest stay. `seed`: a generator of its own
    (HF's seed argument); without it numpy's global generator, which set_seed seeds."""

    def __init__(self, tokenizer, mlm=True, mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1,
                 pad_to_multiple_of=None, tf_experimental_compile=False, return_tensors="pt", seed=None):
        del tf_experimental_compile
        if mlm and getattr(tokenizer, "mask_token_id", None) is None:
            raise ValueError("This tokenizer does not have a mask token which is necessary for masked language "
                             "modeling. You should pass `mlm=False` to train on causal language modeling instead.")
        if not 0 <= mlm_probability <= 1:
            raise ValueError("mlm_probability should be between 0 and 1.")
        if mask_replace_prob + random_replace_prob > 1:
            raise ValueError("The sum of mask_replace_prob and random_replace_prob should not exceed 1")
        if mask_replace_prob < 0 or mask_replace_prob > 1 or random_replace_prob < 0 or random_replace_prob > 1:
            raise ValueError("mask_replace_prob and random_replace_prob should be between 0 and 1.")
        self.tokenizer = tokenizer
        self.mlm = mlm
        self.mlm_probability = mlm_probability
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        self.pad_to_multiple_of = pad_to_multiple_of
        self.return_tensors = return_tensors
        self.seed = seed
        self.generator = np.random.default_rng(seed) if seed is not None else None

    def _uniform(self, shape):
        return self.generator.random(shape) if self.generator is not None else np.random.random_sample(shape)

    def _integers(self, high, shape):
        return (self.generator.integers(0, high, size=shape) if self.generator is not None
                else np.random.randint(0, high, size=shape))

    def __call__(self, examples):
        if isinstance(examples[0], Mapping):
            batch = pad_features(examples, self.tokenizer, True, None, self.pad_to_multiple_of)
        else:  # lists of token ids
            batch = {"input_ids": self._collate_ids(examples)}
        special = batch.pop("special_tokens_mask", None)
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        if self.mlm:
            batch["input_ids"], batch["labels"] = self.mask_tokens(batch["input_ids"], special)
        else:
            labels = np.array(batch["input_ids"], copy=True)
            if pad_id is not None:
                labels[labels == pad_id] = -100
            batch["labels"] = labels
        return batch

    def _collate_ids(self, examples):
        rows = [as_array(e, "input_ids") for e in examples]
        if all(r.shape == rows[0].shape for r in rows) and not self.pad_to_multiple_of:
            return np.stack(rows)
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        if pad_id is None:
            raise ValueError("You are attempting to pad samples but the tokenizer you are using does not have a pad "
                             "token.")
        length = _round_up(max(len(r) for r in rows), self.pad_to_multiple_of)
        return _pad_rows(rows, length, pad_id, getattr(self.tokenizer, "padding_side", "right"), "input_ids")

    def _special_tokens_mask(self, ids):
        get = getattr(self.tokenizer, "get_special_tokens_mask", None)
        if callable(get):
            return np.array([get(row, already_has_special_tokens=True) for row in ids.tolist()], dtype=bool)
        special = set(getattr(self.tokenizer, "all_special_ids", None) or [])
        return np.isin(ids, sorted(special)) if special else np.zeros(ids.shape, dtype=bool)

    def mask_tokens(self, inputs, special_tokens_mask=None):
        """HF's torch_mask_tokens over numpy: (masked inputs, labels)."""
        inputs = np.array(inputs, copy=True)
        labels = np.array(inputs, copy=True)
        special = (np.asarray(special_tokens_mask, dtype=bool) if special_tokens_mask is not None
                   else self._special_tokens_mask(inputs))
        probability = np.full(labels.shape, self.mlm_probability)
        probability[special] = 0.0
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        if pad_id is not None:
            probability[labels == pad_id] = 0.0
        masked = self._uniform(labels.shape) < probability
        labels[~masked] = -100
        replaced = (self._uniform(labels.shape) < self.mask_replace_prob) & masked
        inputs[replaced] = self.tokenizer.mask_token_id
        if self.mask_replace_prob < 1 and self.random_replace_prob > 0:
            scaled = self.random_replace_prob / (1 - self.mask_replace_prob)
            randomized = (self._uniform(labels.shape) < scaled) & masked & ~replaced
            words = self._integers(len(self.tokenizer), labels.shape)
            inputs[randomized] = words[randomized]
        return inputs, labels
