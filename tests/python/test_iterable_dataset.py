"""IterableDatasets in kiln.Trainer (HF's rules): a stream without a length trains for max_steps
(required), read in order and started again (set_epoch(pass) first) when it ends; its batches are
exactly those of the same items in a list read sequentially (the per-step losses match bit for
bit), with loader threads too; a resumed run replays the stream and logs what an uninterrupted one
does; an iterable evaluation set is read once; text columns are removed as for lists."""
import json

import numpy as np
import pytest
import torch
from kiln_package import import_kiln

import_kiln()
import kiln  # noqa: E402

N, BATCH, STEPS = 52, 8, 20


def item(i):
    g = np.random.default_rng(i)
    x = g.normal(size=6).astype(np.float32)
    return {"input": x, "labels": int(x[:3].sum() > x[3:].sum()), "text": f"row {i}"}


class Stream(torch.utils.data.IterableDataset):
    """A shuffled pass over N items per epoch (seeded by the epoch), as datasets' IterableDataset."""

    def __init__(self):
        self.epochs = []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def __iter__(self):
        epoch = self.epochs[-1] if self.epochs else 0
        for i in np.random.default_rng(epoch).permutation(N):
            yield item(int(i))


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(6, 2)

    def forward(self, input):  # noqa: A002 (the column's name)
        return self.fc(input)


def arguments(path, **more):
    values = dict(per_device_train_batch_size=BATCH, max_steps=STEPS, learning_rate=0.1, logging_steps=1,
                  save_strategy="no", report_to=[], disable_tqdm=True)
    values.update(more)
    return kiln.TrainingArguments(str(path), **values)


def losses(trainer):
    return [e["loss"] for e in trainer.state.log_history if "loss" in e]


def stream_items(passes):
    out = []
    for epoch in range(passes):
        out += [item(int(i)) for i in np.random.default_rng(epoch).permutation(N)]
    return out


def test_a_stream_trains_as_the_same_items_in_order(tmp_path):
    stream = Stream()
    trainer = kiln.Trainer(model=Linear(), args=arguments(tmp_path / "s"), train_dataset=stream)
    trainer.train()
    assert trainer.state.global_step == STEPS
    assert stream.epochs[-4:] == [0, 1, 2, 3], stream.epochs  # 160 items: 52 a pass, a fourth begun
    listed = stream_items(4)[:STEPS * BATCH]
    reference = kiln.Trainer(model=Linear(), args=arguments(tmp_path / "l", train_sampling_strategy="sequential"),
                             train_dataset=listed)
    reference.train()
    assert losses(trainer) == losses(reference)
    threads = kiln.Trainer(model=Linear(), args=arguments(tmp_path / "w", dataloader_num_workers=2),
                           train_dataset=Stream())
    threads.train()
    assert losses(threads) == losses(reference)


def test_a_resumed_stream_logs_what_an_uninterrupted_one_does(tmp_path):
    full = kiln.Trainer(model=Linear(), args=arguments(tmp_path / "a", save_strategy="steps", save_steps=7),
                        train_dataset=Stream())
    full.train()
    resumed = kiln.Trainer(model=Linear(), args=arguments(tmp_path / "a"), train_dataset=Stream())
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-14"))
    assert losses(resumed) == losses(full)
    state = json.loads((tmp_path / "a" / "checkpoint-14" / "trainer_state.json").read_text())
    assert state["global_step"] == 14


def test_stream_rules(tmp_path):
    with pytest.raises(ValueError, match="max_steps must be set to a positive value"):
        kiln.Trainer(model=Linear(), args=arguments(tmp_path, max_steps=-1), train_dataset=Stream())
    seen = {}

    def metrics(p):
        seen["n"] = len(p.label_ids)
        return {}

    trainer = kiln.Trainer(model=Linear(), args=arguments(tmp_path), train_dataset=Stream(), eval_dataset=Stream(),
                           compute_metrics=metrics)
    assert "eval_loss" in trainer.evaluate() and seen["n"] == N

    class Empty(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(())

    with pytest.raises(ValueError, match="yielded no items"):
        kiln.Trainer(model=Linear(), args=arguments(tmp_path), train_dataset=Empty())



def test_json_lines_in_python_train_with_a_padding_collator(tmp_path):
    """kiln.data.load_jsonl's items (token lists of different lengths, a text column left out)
    batched by DataCollatorWithPadding."""
    from kiln.data_collator import DataCollatorWithPadding

    class Tokenizer:
        pad_token_id = 0

    rows = [{"text": "x", "input_ids": list(range(1, 2 + i % 5)), "label": i % 2} for i in range(24)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = kiln.data.load_jsonl(tmp_path / "d.jsonl", skip_text=True)
    assert len(data) == 24 and sorted(data[3]) == ["input_ids", "labels"]
    np.testing.assert_array_equal(data[3]["input_ids"], [1, 2, 3, 4])

    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(8, 2)

        def forward(self, input_ids, attention_mask):
            m = attention_mask.unsqueeze(-1).float()
            return (self.embed(input_ids) * m).sum(1) / m.sum(1)

    widths = []

    class Recording(DataCollatorWithPadding):
        def __call__(self, features):
            batch = super().__call__(features)
            widths.append(batch["input_ids"].shape[1])
            return batch

    trainer = kiln.Trainer(model=Bag(), args=arguments(tmp_path / "j", max_steps=6, per_device_train_batch_size=3),
                           train_dataset=data, data_collator=Recording(Tokenizer()))
    widths.clear()
    trainer.train()
    assert trainer.state.global_step == 6 and len(set(widths)) > 1, widths
