#!/usr/bin/python3
"""One rank of the data-parallel tests (test_distributed.py), started by mpirun (or alone, as the
one-process reference): trains a zoo model with kiln.Trainer on deterministic data the same on
every rank, and writes what the test compares.

    mpirun -np 2 /usr/bin/python3 ddp_train.py --model lenet --batch 8 --steps 6 --out DIR [--accum 2]
        [--sync-bn] [--nan-example K] [--eval-examples N] [--kill-rank R --kill-step S] [--resume]
        [--stream] [--arg name=value ...]

--stream hands the training items to the Trainer as an IterableDataset (no length).

Every rank writes DIR/rank{r}.json (its place in the run, as TrainingArguments and
kiln.distributed report it, and its final weights' checksum); rank 0 also writes DIR/losses.json
(the per-step logged losses) and DIR/weights.npz (the trained weights).
"""
import argparse
import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kiln_package import import_kiln  # noqa: E402

kiln = import_kiln()
from kiln import nn  # noqa: E402

GPT = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=16, resid_pdrop=0.0, embd_pdrop=0.0,
           attn_pdrop=0.0)


class LanguageModel(nn.Module):
    """The zoo GPT-2 with its logits as [batch, vocab, positions], the layout the Trainer's
    cross-entropy takes against [batch, positions] token labels."""

    def __init__(self):
        super().__init__()
        self.gpt = nn.zoo.create_model("gpt2", **GPT)

    def forward(self, input_ids):
        return self.gpt(input_ids).transpose(1, 2)


def dataset(model, n, nan_example):
    rng = np.random.default_rng(1234)
    items = []
    for i in range(n):
        if model == "lenet":
            image = rng.standard_normal((1, 28, 28)).astype(np.float32)
            if i == nan_example:
                image[0, 0, 0] = np.nan
            items.append({"input": image, "labels": np.int64(rng.integers(0, 10))})
        else:
            items.append({"input_ids": rng.integers(0, GPT["vocab_size"], 16).astype(np.int64),
                          "labels": rng.integers(0, GPT["vocab_size"], 16).astype(np.int64)})
    return items


class Stream:
    """An IterableDataset: the items in order, without a length."""

    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["lenet", "gpt2"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--examples", type=int, default=128)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sync-bn", action="store_true")
    p.add_argument("--nan-example", type=int, default=-1)
    p.add_argument("--arg", action="append", default=[], help="more TrainingArguments, name=json value")
    p.add_argument("--eval-examples", type=int, default=0, help="evaluate on this many examples after training")
    p.add_argument("--kill-rank", type=int, default=-1, help="this rank SIGKILLs itself at the end of --kill-step")
    p.add_argument("--kill-step", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="resume from the last checkpoint in DIR/run")
    p.add_argument("--stream", action="store_true", help="the training items as an IterableDataset")
    o = p.parse_args()
    nn.manual_seed(0)
    net = nn.zoo.create_model("lenet") if o.model == "lenet" else LanguageModel()
    values = dict(output_dir=str(o.out / "run"), per_device_train_batch_size=o.batch,
                  gradient_accumulation_steps=o.accum, max_steps=o.steps, learning_rate=1e-3, logging_steps=1,
                  save_strategy="no", report_to=[], disable_tqdm=True, skip_memory_metrics=True, seed=3,
                  ddp_sync_batchnorm=o.sync_bn)
    values.update({k: json.loads(v) for k, v in (a.split("=", 1) for a in o.arg)})
    args = kiln.TrainingArguments(**values)
    import kiln.distributed as dist

    callbacks = []
    if o.kill_rank == dist.rank():
        class Die(kiln.TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == o.kill_step:
                    os.kill(os.getpid(), signal.SIGKILL)
        callbacks.append(Die())

    def order_metric(p):  # depends on every prediction and on their order
        top = np.asarray(p.predictions).reshape(len(p.predictions), -1).argmax(axis=1)
        return {"order": float(np.sum(np.arange(1, len(top) + 1) * (top + 1))),
                "accuracy": float(np.mean(top == np.asarray(p.label_ids).reshape(len(top), -1)[:, 0]))}

    with args.main_process_first(desc="data"):
        train = dataset(o.model, o.examples, o.nan_example)
    if o.stream:
        train = Stream(train)
    evaluation = dataset(o.model, o.eval_examples, -1)[::-1] if o.eval_examples else None
    trainer = kiln.Trainer(model=net, args=args, train_dataset=train, eval_dataset=evaluation,
                           compute_metrics=order_metric if o.model == "lenet" else None, callbacks=callbacks)
    trainer.train(resume_from_checkpoint=True if o.resume else None)
    metrics = trainer.evaluate() if evaluation else {}
    weights = {k: np.asarray(v) for k, v in net.state_dict().items()}
    digest = hashlib.sha256(b"".join(weights[k].tobytes() for k in sorted(weights))).hexdigest()
    o.out.mkdir(parents=True, exist_ok=True)
    place = {"rank": dist.rank(), "world_size": dist.world_size(), "local_rank": dist.local_rank(),
             "backend": dist.backend(), "process_index": args.process_index, "args_world_size": args.world_size,
             "local_process_index": args.local_process_index, "should_log": args.should_log,
             "should_save": args.should_save, "is_world_process_zero": trainer.is_world_process_zero(),
             "weights": digest, "metrics": metrics, "optimizer_state_bytes": trainer.optimizer_state_bytes()}
    (o.out / f"rank{dist.rank()}.json").write_text(json.dumps(place))
    if dist.rank() == 0:
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        (o.out / "losses.json").write_text(json.dumps(losses))
        np.savez(o.out / "weights.npz", **weights)


if __name__ == "__main__":
    main()
