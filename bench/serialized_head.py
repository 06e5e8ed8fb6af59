#!/usr/bin/python3
"""The LM-head serialization (issue 21: IPUConfig's embedding_serialization_factor): a training step
of the bench's GPT-2-style model (4 layers, d 256, vocabulary 8192, tied LM head, seq 128, batch 8)
with Hugging Face's causal-LM loss in the graph, trained by kiln.Trainer with the factor 1 (the
whole head: MatMul, then SoftmaxCrossEntropyLoss) and 4 and 8 (ai.kiln.LinearCrossEntropy over
vocabulary blocks). Each run is a process of its own: ms per step (median over the steps after
--warmup) and the process's peak resident set (VmHWM; torch's import and the export included, the
same for every row). Median of --rounds rounds.

    /usr/bin/python3 bench/serialized_head.py [--build-dir build] [--rounds 3] [--steps 8] [--warmup 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
VOCAB, SEQ, BATCH = 8192, 128, 8
FACTORS = [1, 4, 8]


def worker(factor, steps, warmup, out_dir):
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch
    import torch.nn.functional as F
    from kiln_package import import_kiln
    from zoo_models import GPT2
    kiln = import_kiln()

    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.gpt = GPT2(vocab=VOCAB, max_len=SEQ, dim=256, heads=4, layers=4)

        def forward(self, input_ids, labels=None):
            logits = self.gpt(input_ids)
            shift = logits[..., :-1, :].contiguous()
            loss = F.cross_entropy(shift.view(-1, shift.size(-1)), labels[..., 1:].contiguous().view(-1))
            return {"loss": loss, "logits": logits}

    class Clock(kiln.TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter())

    rng = np.random.default_rng(0)
    items = [{"input_ids": ids, "labels": ids} for ids in rng.integers(0, VOCAB, (BATCH * (steps + warmup), SEQ))]
    extra = {"ipu_config_overrides": f"embedding_serialization_factor={factor}"} if factor > 1 else {}
    args = kiln.TrainingArguments(out_dir, per_device_train_batch_size=BATCH, max_steps=steps + warmup,
                                  save_strategy="no", report_to=[], disable_tqdm=True, logging_steps=1000,
                                  train_sampling_strategy="sequential", **extra)
    clock = Clock()
    trainer = kiln.Trainer(model=CausalLM(), args=args, train_dataset=items, callbacks=[clock])
    start = time.perf_counter()
    trainer.train()
    stamps = [start] + clock.times
    per_step = [1000 * (b - a) for a, b in zip(stamps[warmup:], stamps[warmup + 1:])]
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    print(json.dumps({"ms": statistics.median(per_step), "rss_mb": hwm / 1024}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=str(REPO / "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        return worker(a.worker, a.steps, a.warmup, a.out)
    env = dict(os.environ, KILN_BUILD_DIR=str(Path(a.build_dir).resolve()), OMP_NUM_THREADS="2")
    results = {f: [] for f in FACTORS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for f in FACTORS:
                proc = subprocess.run([sys.executable, __file__, "--worker", str(f), "--steps", str(a.steps),
                                       "--warmup", str(a.warmup), "--out", str(Path(tmp) / f"run{f}_{r}")],
                                      capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    sys.exit(f"factor {f} failed: {proc.stderr.strip().splitlines()[-1]}")
                results[f].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"GPT-2-style, vocab {VOCAB}, seq {SEQ}, batch {BATCH}, 2 threads; median of {a.rounds} rounds")
    print(f"{'factor':>6} {'ms/step':>9} {'peak RSS MB':>12}")
    for f in FACTORS:
        ms = statistics.median(x["ms"] for x in results[f])
        rss = statistics.median(x["rss_mb"] for x in results[f])
        print(f"{f:>6} {ms:>9.1f} {rss:>12.0f}")


if __name__ == "__main__":
    main()
