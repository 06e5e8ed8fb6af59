#!/usr/bin/python3
"""bench/bench.py's PyTorch side, one measurement per process (so that its peak resident set is
its own and the parent can set its OpenMP wait policy): torch.set_num_threads(THREADS), then

- `train CASE`: WARMUP steps, then STEPS timed steps of `loss_fn(module(*inputs), labels).backward();
  optimizer.step(); optimizer.zero_grad(set_to_none=True)` with torch.optim.AdamW(lr=1e-3); with
  --bf16 the forward and the loss run under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's
  own mixed precision (float32 parameters and optimizer, bfloat16 products);
- `forward CASE`: three warm-up calls, then RUNS timed calls under torch.no_grad() in eval mode;
- `matmul N`: one warm-up, then RUNS timed float32 N x N @ N x N products.

Prints one JSON line: {"mean_ms", "peak_rss_kb"}.

    /usr/bin/python3 bench/torch_worker.py train|forward MODEL --batch B [--seq S] [--image I]
                                           [--warmup W] [--steps N] [--runs N] [--bf16 1]
    /usr/bin/python3 bench/torch_worker.py matmul 2048 --runs N
"""
import argparse
import json
import sys
import time

import torch
from common import THREADS, peak_rss_kb


def mean_ms(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) * 1000 / runs


def train(case):
    from cases import training_case
    from training_parity import cross_entropy_loss

    module, feeds, loss, _ = training_case(case)
    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    labels = tensors.pop("labels", None)
    inputs = tuple(tensors.values())
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=case.bf16):
            out = module(*inputs)
            value = out if loss == "none" else cross_entropy_loss(out, labels)
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return mean_ms(step, case.warmup, case.steps)


def forward(case):
    from cases import inference_case

    module, feeds = inference_case(case)
    xs = tuple(torch.from_numpy(v) for v in feeds.values())
    with torch.no_grad():
        return mean_ms(lambda: module(*xs), 3, case.runs)


def matmul(n, runs):
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    out = torch.empty(n, n)
    return mean_ms(lambda: torch.matmul(a, b, out=out), 1, runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["train", "forward", "matmul"])
    parser.add_argument("model", help="a model of bench/cases.py, or the matmul's N")
    for flag in ("--batch", "--seq", "--image", "--warmup", "--steps", "--runs", "--bf16"):
        parser.add_argument(flag, type=int, default=0)
    a = parser.parse_args()
    torch.set_num_threads(THREADS)
    if a.what == "matmul":
        ms = matmul(int(a.model), a.runs)
    else:
        from cases import Case

        case = Case(a.model, a.batch, a.seq, a.image, a.steps, a.runs, a.warmup, bf16=bool(a.bf16))
        ms = train(case) if a.what == "train" else forward(case)
    print(json.dumps({"mean_ms": ms, "peak_rss_kb": peak_rss_kb()}))


if __name__ == "__main__":
    sys.exit(main())
