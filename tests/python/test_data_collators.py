"""kiln's Hugging Face collators (kiln/data_collator.py) against HF's documented behaviour: padding
side, pad_to_multiple_of, attention masks, labels padded with -100, causal labels, and BERT's
80/10/10 masking measured over many tokens (binomial bounds of 5 sigma); and in the Trainer:
group_by_length batches with less padding than random ones (the same seed, the same items),
remove_unused_columns, the tokenizer as the default padding collator and saved with the model and
every checkpoint, and include_for_metrics' inputs and losses."""
import json
import math
import os

import numpy as np
import pytest
import torch
from kiln_package import import_kiln

import_kiln()
import kiln  # noqa: E402
from kiln.data_collator import (  # noqa: E402
    DataCollatorForLanguageModeling,
    DataCollatorForSeq2Seq,
    DataCollatorWithPadding,
)

PAD, CLS, SEP, MASK = 0, 1, 2, 3


class Tokenizer:
    """The attributes a transformers tokenizer has that the collators read (no `pad` method, so
    Kiln pads)."""
    pad_token_id, mask_token_id = PAD, MASK
    all_special_ids = [PAD, CLS, SEP, MASK]
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(self, padding_side="right", vocab=50):
        self.padding_side = padding_side
        self.vocab = vocab
        self.saved = []

    def __len__(self):
        return self.vocab

    def save_pretrained(self, folder):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"pad_token_id": PAD, "padding_side": self.padding_side}, f)
        self.saved.append(folder)


def test_padding_collator_pads_right_and_left_with_masks():
    features = [{"input_ids": [5, 6, 7], "label": 1}, {"input_ids": [8], "label": 0}]
    batch = DataCollatorWithPadding(Tokenizer())(features)
    np.testing.assert_array_equal(batch["input_ids"], [[5, 6, 7], [8, 0, 0]])
    np.testing.assert_array_equal(batch["attention_mask"], [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(batch["labels"], [1, 0])
    left = DataCollatorWithPadding(Tokenizer("left"), pad_to_multiple_of=4)(features)
    np.testing.assert_array_equal(left["input_ids"], [[0, 5, 6, 7], [0, 0, 0, 8]])
    np.testing.assert_array_equal(left["attention_mask"], [[0, 1, 1, 1], [0, 0, 0, 1]])
    fixed = DataCollatorWithPadding(Tokenizer(), padding="max_length", max_length=5)(features)
    assert fixed["input_ids"].shape == (2, 5)
    with pytest.raises(ValueError, match="more than max_length 2"):
        DataCollatorWithPadding(Tokenizer(), padding="max_length", max_length=2)(features)
    with pytest.raises(ValueError, match="does not have a padding token"):
        DataCollatorWithPadding(type("NoPad", (), {"pad_token_id": None})())(features)
    with pytest.raises(ValueError, match="includes input_ids"):
        DataCollatorWithPadding(Tokenizer())([{"ids": [1]}])


def test_seq2seq_collator_pads_labels_with_minus_100():
    features = [{"input_ids": [5, 6], "labels": [9, 9, 9]}, {"input_ids": [7, 8, 9, 10], "labels": [4]}]
    batch = DataCollatorForSeq2Seq(Tokenizer(), pad_to_multiple_of=2)(features)
    np.testing.assert_array_equal(batch["input_ids"], [[5, 6, 0, 0], [7, 8, 9, 10]])
    np.testing.assert_array_equal(batch["labels"], [[9, 9, 9, -100], [4, -100, -100, -100]])

    class Model:
        @staticmethod
        def prepare_decoder_input_ids_from_labels(labels):
            shifted = np.roll(np.where(labels == -100, PAD, labels), 1, axis=1)
            shifted[:, 0] = CLS
            return shifted

    batch = DataCollatorForSeq2Seq(Tokenizer(), model=Model())(features)
    np.testing.assert_array_equal(batch["decoder_input_ids"], [[CLS, 9, 9], [CLS, 4, PAD]])


def test_causal_lm_labels_are_the_ids_with_padding_ignored():
    batch = DataCollatorForLanguageModeling(Tokenizer(), mlm=False)([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}])
    np.testing.assert_array_equal(batch["labels"], [[5, 6, 7], [8, -100, -100]])
    ids_only = DataCollatorForLanguageModeling(Tokenizer(), mlm=False)([[5, 6], [7]])
    np.testing.assert_array_equal(ids_only["input_ids"], [[5, 6], [7, 0]])
    with pytest.raises(ValueError, match="mask token"):
        DataCollatorForLanguageModeling(type("NoMask", (), {"pad_token_id": 0})())


def test_masking_follows_bert_80_10_10():
    g = np.random.default_rng(0)
    rows = [[CLS] + g.integers(4, 50, int(g.integers(20, 60))).tolist() + [SEP] for _ in range(400)]
    collator = DataCollatorForLanguageModeling(Tokenizer(), mlm_probability=0.15, seed=7)
    batch = collator([{"input_ids": r} for r in rows])
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    original = DataCollatorWithPadding(Tokenizer())([{"input_ids": r} for r in rows])["input_ids"]
    ordinary = (mask == 1) & ~np.isin(original, [CLS, SEP])
    chosen = labels != -100
    assert not (chosen & ~ordinary).any(), "special and padding tokens are never chosen"
    np.testing.assert_array_equal(labels[chosen], original[chosen])
    np.testing.assert_array_equal(ids[~chosen], original[~chosen])

    def within(count, n, p):
        assert abs(count - n * p) < 5 * math.sqrt(n * p * (1 - p)), (count, n, p)

    n = int(ordinary.sum())
    within(int(chosen.sum()), n, 0.15)
    c = int(chosen.sum())
    as_mask = int((ids[chosen] == MASK).sum())
    within(as_mask, c, 0.8)
    changed = int(((ids[chosen] != MASK) & (ids[chosen] != original[chosen])).sum())
    # 10% random tokens, of which 1/50 draw the original token back
    within(changed, c, 0.1 * (1 - 1 / 50))
    again = DataCollatorForLanguageModeling(Tokenizer(), seed=7)([{"input_ids": r} for r in rows])
    np.testing.assert_array_equal(again["input_ids"], ids)  # seeded
    kiln.set_seed(3)
    first = DataCollatorForLanguageModeling(Tokenizer())([{"input_ids": r} for r in rows])["labels"]
    kiln.set_seed(3)
    np.testing.assert_array_equal(DataCollatorForLanguageModeling(Tokenizer())([{"input_ids": r} for r in rows])
                                  ["labels"], first)


class Bag(torch.nn.Module):
    """forward(input_ids, attention_mask, labels=None): masked mean of embeddings, a linear head."""

    def __init__(self, vocab=50):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, input_ids, attention_mask, labels=None):
        m = attention_mask.unsqueeze(-1).float()
        logits = self.head((self.embed(input_ids) * m).sum(1) / m.sum(1))
        if labels is None:
            return {"logits": logits}
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def sentences(n, seed):
    """Token lists of 2..30 tokens with a text column: label 1 when most tokens are above 25."""
    g = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = g.integers(4, 50, int(g.integers(2, 31))).tolist()
        out.append({"sentence": " ".join(map(str, ids)), "idx": i, "input_ids": ids,
                    "label": int(sum(t > 25 for t in ids) * 2 > len(ids))})
    return out


class Recording(DataCollatorWithPadding):
    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.batches = []

    def __call__(self, features):
        assert all(set(f) == {"input_ids", "label"} for f in features), [list(f) for f in features]
        batch = super().__call__(features)
        self.batches.append(batch["attention_mask"])
        return batch


def padding_fraction(batches):
    return 1 - sum(int(m.sum()) for m in batches) / sum(m.size for m in batches)


def test_group_by_length_pads_less_and_unused_columns_are_removed(tmp_path):
    fractions = {}
    for grouped in (False, True):
        collator = Recording(Tokenizer())
        args = kiln.TrainingArguments(str(tmp_path / f"g{grouped}"), per_device_train_batch_size=8, num_train_epochs=2,
                                      group_by_length=grouped, save_strategy="no", report_to=[], disable_tqdm=True)
        trainer = kiln.Trainer(model=Bag(), args=args, train_dataset=sentences(256, 0), data_collator=collator)
        collator.batches.clear()
        trainer.train()
        assert len(collator.batches) == 64
        fractions[grouped] = padding_fraction(collator.batches)
    assert fractions[True] < 0.5 * fractions[False], fractions
    with pytest.raises(ValueError, match="No columns in the train_dataset match"):
        kiln.Trainer(model=Bag(), args=kiln.TrainingArguments(str(tmp_path / "x"), report_to=[]),
                     train_dataset=[{"text": "a", "other": 1}], data_collator=DataCollatorWithPadding(Tokenizer()))
    # remove_unused_columns=False hands the text to the collator, which cannot batch it
    args = kiln.TrainingArguments(str(tmp_path / "keep"), remove_unused_columns=False, report_to=[])
    with pytest.raises(ValueError, match="column 'sentence' cannot be batched"):
        kiln.Trainer(model=Bag(), args=args, train_dataset=sentences(8, 0), tokenizer=Tokenizer())


def test_tokenizer_pads_by_default_is_saved_and_metrics_get_inputs_and_losses(tmp_path):
    tokenizer = Tokenizer()
    seen = {}

    def compute_metrics(p):
        predictions, labels, inputs, losses = p  # HF unpacks the extras too
        seen.update(inputs=inputs, losses=losses, labels=labels)
        return {"accuracy": float((predictions.argmax(-1) == labels).mean())}

    args = kiln.TrainingArguments(str(tmp_path / "run"), per_device_train_batch_size=16, per_device_eval_batch_size=16,
                                  num_train_epochs=6, learning_rate=3e-2, save_steps=48, report_to=[],
                                  disable_tqdm=True, include_for_metrics=["inputs", "loss"])
    evaluation = sentences(40, 1)
    trainer = kiln.Trainer(model=Bag(), args=args, train_dataset=sentences(256, 0), eval_dataset=evaluation,
                           tokenizer=tokenizer, compute_metrics=compute_metrics)
    assert isinstance(trainer.data_collator, DataCollatorWithPadding)
    trainer.train()
    metrics = trainer.evaluate()
    assert metrics["eval_accuracy"] > 0.75, metrics
    longest = max(len(e["input_ids"]) for e in evaluation)
    assert seen["inputs"].shape == (40, longest)
    for row, e in zip(seen["inputs"], evaluation):  # each item's ids, then -100 where its batch ended
        n = len(e["input_ids"])
        np.testing.assert_array_equal(row[:n], e["input_ids"])
    assert seen["losses"].shape == (40,)
    # each batch's loss per example: their mean is the eval loss
    assert abs(float(seen["losses"].mean()) - metrics["eval_loss"]) < 1e-5
    assert len(set(seen["losses"][:16].tolist())) == 1
    trainer.save_model()
    run = tmp_path / "run"
    assert (run / "tokenizer_config.json").is_file()
    checkpoints = sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint-"))
    assert checkpoints and all((run / c / "tokenizer_config.json").is_file() for c in checkpoints), checkpoints
    with pytest.raises(ValueError, match="include_for_metrics"):
        kiln.TrainingArguments(str(tmp_path / "y"), include_for_metrics=["logits"])
