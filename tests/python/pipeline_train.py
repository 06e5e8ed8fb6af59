#!/usr/bin/python3
"""One rank of the pipeline tests (test_pipeline.py) and bench/pipeline.py, started by mpirun (or
alone, as the one-process reference): trains a zoo GPT-2 or BERT with kiln.graphcore.IPUTrainer
under an IPUConfig, on deterministic data the same on every rank, and writes what the test compares.

    mpirun -np 4 /usr/bin/python3 pipeline_train.py --model gpt2 --layers 2 2 --replicas 2 --batch 4 \\
        --accum 4 --steps 4 --out DIR [--schedule gpipe] [--arg name=json ...] [--size small|bench]

Every rank writes DIR/rank{r}.npz (the parameters its stage holds) and DIR/rank{r}.json (its train
metrics, the stage's timings and peak arena among them); rank 0 also writes DIR/losses.json.
"""
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kiln_package import import_kiln  # noqa: E402

kiln = import_kiln()
from kiln import nn  # noqa: E402
from kiln.graphcore import IPUConfig, IPUTrainer, IPUTrainingArguments  # noqa: E402

SIZES = {
    "small": dict(layers=4, width=32, heads=4, ffn=64, vocab=50, seq=16),
    "bench": dict(layers=4, width=256, heads=4, ffn=1024, vocab=2000, seq=128),
}


class LanguageModel(nn.Module):
    """The zoo GPT-2 (tied LM head) with its logits as [batch, vocab, positions] for the Trainer's
    cross-entropy against [batch, positions] labels."""

    def __init__(self, size):
        super().__init__()
        self.gpt = nn.zoo.create_model("gpt2", n_layer=size["layers"], n_embd=size["width"], n_head=size["heads"],
                                       vocab_size=size["vocab"], n_positions=size["seq"], resid_pdrop=0.0,
                                       embd_pdrop=0.0, attn_pdrop=0.0)

    def forward(self, input_ids):
        return self.gpt(input_ids).transpose(1, 2)


class Classifier(nn.Module):
    """The zoo BERT (BertForSequenceClassification, 3 labels)."""

    def __init__(self, size):
        super().__init__()
        self.bert = nn.zoo.create_model("bert", num_hidden_layers=size["layers"], hidden_size=size["width"],
                                        num_attention_heads=size["heads"], intermediate_size=size["ffn"],
                                        vocab_size=size["vocab"], max_position_embeddings=size["seq"],
                                        type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                        num_labels=3)

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids, attention_mask, token_type_ids)


def dataset(model, size, n):
    rng = np.random.default_rng(1234)
    seq, vocab = size["seq"], size["vocab"]
    items = []
    for _ in range(n):
        ids = rng.integers(0, vocab, seq).astype(np.int64)
        if model == "gpt2":
            items.append({"input_ids": ids, "labels": rng.integers(0, vocab, seq).astype(np.int64)})
        else:
            mask = np.ones(seq, np.int64)
            mask[rng.integers(seq // 2, seq):] = 0
            items.append({"input_ids": ids, "attention_mask": mask,
                          "token_type_ids": (np.arange(seq) >= seq // 2).astype(np.int64),
                          "labels": np.int64(rng.integers(0, 3))})
    return items


class LossLog(kiln.TrainerCallback):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt2", "bert"], required=True)
    p.add_argument("--layers", type=int, nargs="+", required=True, help="layers_per_ipu ([4]: one process)")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--arg", action="append", default=[], help="more TrainingArguments, name=json value")
    p.add_argument("--resume", default=None, help="a checkpoint folder to resume from")
    p.add_argument("--eval-examples", type=int, default=0,
                   help="then evaluate and predict on this many examples, and save_model")
    o = p.parse_args()
    size = SIZES[o.size]
    nn.manual_seed(0)
    net = LanguageModel(size) if o.model == "gpt2" else Classifier(size)
    ipu_config = IPUConfig(layers_per_ipu=o.layers, replication_factor=o.replicas,
                           gradient_accumulation_steps=o.accum, pipeline_schedule=o.schedule)
    values = dict(output_dir=str(o.out / "run"), save_strategy="no", fp32=True, per_device_train_batch_size=o.batch,
                  max_steps=o.steps, learning_rate=1e-3, logging_steps=1, report_to="none", disable_tqdm=True, seed=0)
    for a in o.arg:
        name, value = a.split("=", 1)
        values[name] = json.loads(value)
    log = LossLog()
    trainer = IPUTrainer(model=net, ipu_config=ipu_config, args=IPUTrainingArguments(**values),
                         train_dataset=dataset(o.model, size, o.batch * o.accum * o.replicas * o.steps),
                         callbacks=[log])
    out = trainer.train(resume_from_checkpoint=o.resume)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    o.out.mkdir(parents=True, exist_ok=True)
    np.savez(o.out / f"rank{rank}.npz", **{k: np.asarray(v) for k, v in trainer._core.parameter_values().items()})
    (o.out / f"rank{rank}.json").write_text(json.dumps(out.metrics))
    if rank == 0:
        (o.out / "losses.json").write_text(json.dumps(log.losses))
    if o.eval_examples:
        held_out = dataset(o.model, size, o.eval_examples + 7)[7:]  # not the training order's first items
        metrics = trainer.evaluate(held_out)
        predictions = trainer.predict(held_out)
        trainer.save_model()
        if rank == 0:
            (o.out / "eval.json").write_text(json.dumps(metrics))
            np.save(o.out / "predictions.npy", predictions.predictions)


if __name__ == "__main__":
    main()
