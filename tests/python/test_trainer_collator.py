"""kiln.Trainer with a custom data_collator (HF's contract: a list of raw items in, a dict of arrays
or torch tensors out, batch first), here a padding collator over token lists of different lengths:
a torch causal LM (positions from the input's length, a causal mask, its loss inside) is exported
with every input axis dynamic, trains on batches padded to their own longest item, and logs the
per-step losses of a plain PyTorch loop over the same batches (recorded from the collator) within
1e-4 relative, final parameters within 1e-4. Evaluation gathers predictions and labels of different
lengths padded with -100, as HF does. The collator over a kiln Dataset's items, and its errors."""
import copy
import math

import numpy as np
import pytest
import torch
from kiln_package import import_kiln
from training_parity import assert_trainer_matches, hf_trainer_loop

import_kiln()
import kiln  # noqa: E402

VOCAB, D, PAD, N, BATCH, EPOCHS, LR = 17, 12, 0, 20, 8, 2, 1e-2
STEPS = EPOCHS * math.ceil(N / BATCH)


class TinyCausalLM(torch.nn.Module):
    """forward(input_ids, attention_mask, labels=None) -> {"loss", "logits"}: token and position
    embeddings, one masked causal attention, a head tied to the token embedding, the shifted LM loss."""

    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(VOCAB, D)
        self.positions = torch.nn.Embedding(32, D)
        self.qkv = torch.nn.Linear(D, 3 * D, bias=False)  # a key bias has a zero gradient: Adam amplifies noise
        self.norm = torch.nn.LayerNorm(D)

    def forward(self, input_ids, attention_mask, labels=None):
        length = input_ids.shape[1]
        h = self.tokens(input_ids) + self.positions(torch.arange(length))
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(D)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        keep = causal[None] & attention_mask[:, None, :].bool()
        scores = scores.masked_fill(~keep, -1e9)
        h = self.norm(h + scores.softmax(-1) @ v)
        logits = h @ self.tokens.weight.t()
        out = {"logits": logits}
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1),
                                                     ignore_index=-100)
            out = {"loss": loss, **out}
        return out


def items(seed, n=N):
    """Tokenized text as an HF dataset holds it: lists of different lengths, and a string column."""
    g = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = g.integers(1, VOCAB, int(g.integers(3, 13))).tolist()
        out.append({"input_ids": ids, "text": f"example {i}"})
    return out


class PaddingCollator:
    """DataCollatorForLanguageModeling(mlm=False)'s shape: pad to the batch's longest item, labels
    are the ids with padding as -100; returns torch tensors. Records every batch it makes."""

    def __init__(self):
        self.batches = []

    def __call__(self, features):
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), longest), PAD, dtype=torch.long)
        mask = torch.zeros((len(features), longest), dtype=torch.long)
        for row, f in enumerate(features):
            ids[row, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
            mask[row, :len(f["input_ids"])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        self.batches.append({k: v.clone() for k, v in batch.items()})
        return batch


def arguments(tmp_path, **more):
    return kiln.TrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=BATCH,
                                  per_device_eval_batch_size=BATCH, num_train_epochs=EPOCHS, learning_rate=LR,
                                  logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True, **more)


def test_a_padding_collator_trains_a_causal_lm_as_a_pytorch_loop(tmp_path):
    torch.manual_seed(0)
    model = TinyCausalLM()
    reference = copy.deepcopy(model)
    collator = PaddingCollator()
    trainer = kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=items(0), data_collator=collator)
    collator.batches.clear()  # the ones made for export and the column check
    trainer.train()
    assert len(collator.batches) == STEPS
    lengths = {b["input_ids"].shape[1] for b in collator.batches}
    assert len(lengths) > 1, "the batches should differ in length"
    want = hf_trainer_loop(reference, collator.batches, LR, STEPS)
    assert len(want) == STEPS
    assert_trainer_matches(trainer, model, reference, want)


def test_evaluation_gathers_batches_of_different_lengths_padded_with_minus_100(tmp_path):
    torch.manual_seed(1)
    model = TinyCausalLM()
    seen = {}

    def compute_metrics(p):
        seen["predictions"], seen["labels"] = p.predictions, p.label_ids
        return {"tokens": float((p.label_ids != -100).sum())}

    collator = PaddingCollator()
    evaluation = items(5, n=11)
    trainer = kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=items(4), eval_dataset=evaluation,
                           data_collator=collator, compute_metrics=compute_metrics)
    collator.batches.clear()
    metrics = trainer.evaluate()
    batches = collator.batches  # the sequential loader's: items 0-7, then 8-10
    assert [b["input_ids"].shape[0] for b in batches] == [8, 3]
    lengths = [b["input_ids"].shape[1] for b in batches]
    assert lengths[0] != lengths[1], "the test needs ragged batches"
    longest = max(lengths)
    want_labels = np.full((11, longest), -100, dtype=np.int64)
    losses, row = [], 0
    assert seen["predictions"].shape == (11, longest, VOCAB)
    with torch.no_grad():
        for b, length in zip(batches, lengths):
            rows = slice(row, row + len(b["labels"]))
            want_labels[rows, :length] = b["labels"].numpy()
            out = model(**b)
            losses.append(out["loss"].item() * len(b["labels"]))
            np.testing.assert_allclose(seen["predictions"][rows, :length], out["logits"].numpy(), rtol=1e-4,
                                       atol=1e-4)
            assert (seen["predictions"][rows, length:] == -100).all()
            row += len(b["labels"])
    np.testing.assert_array_equal(seen["labels"], want_labels)
    assert metrics["eval_tokens"] == float((want_labels != -100).sum())
    assert metrics["eval_loss"] == pytest.approx(sum(losses) / 11, rel=1e-4)


def test_the_collator_gets_a_kiln_datasets_items_as_dicts_of_arrays(tmp_path):
    g = np.random.default_rng(2)
    columns = {"x": g.standard_normal((12, 4)).astype(np.float32), "labels": g.integers(0, 3, 12)}
    calls = []

    def scale(features):
        calls.append(features)
        return {"x": np.stack([f["x"] * 2 for f in features]), "labels": np.stack([f["labels"] for f in features])}

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    trainer = kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=columns, data_collator=scale)
    trainer.train()
    assert all(isinstance(f["x"], np.ndarray) and f["x"].shape == (4,) for f in calls[-1])
    assert trainer.state.global_step == EPOCHS * 2


def test_collator_errors_are_clear(tmp_path):
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    data = [{"x": np.zeros(4, np.float32), "labels": 1}] * 4
    with pytest.raises(TypeError, match="data_collator must be callable"):
        kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=data, data_collator="pad")
    with pytest.raises(TypeError, match="data_collator returned a list"):
        kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=data, data_collator=lambda f: [1])
    with pytest.raises(ValueError, match="first dimension must be the batch's 1 items"):
        kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=data,
                     data_collator=lambda f: {"x": np.zeros((2, 4), np.float32), "labels": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match="data_collator returned no columns"):
        kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=data, data_collator=lambda f: {})
    with pytest.raises(ValueError, match="train_dataset is empty"):
        kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=[], data_collator=PaddingCollator())
    with pytest.raises(TypeError, match="train_dataset must be a sequence of items or a dict of columns, not int"):
        kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=3, data_collator=PaddingCollator())
    with pytest.raises(ZeroDivisionError):  # the collator's own exception, as itself
        trainer = kiln.Trainer(model=model, args=arguments(tmp_path), train_dataset=data,
                               data_collator=Flaky(kiln.default_data_collator))
        trainer.train()


class Flaky:
    """A collator that works for the Trainer's set-up calls, then fails in training."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __call__(self, features):
        self.calls += 1
        if self.calls > 2:
            raise ZeroDivisionError("collator failed")
        return self.inner(features)
