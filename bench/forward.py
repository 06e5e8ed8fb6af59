#!/usr/bin/python3
"""Forward-pass benchmark: Kiln against PyTorch on the same exported models, in one run.

Both sides use the same thread count (2 by default) and are measured the same way: a round is the
mean time of N forward calls after a warm-up; the table shows the median over R rounds. Kiln's
rounds are `kiln run --threads T --repeat N` invocations (the timing excludes loading and planning,
as PyTorch's excludes building the module).

    /usr/bin/python3 bench/forward.py [--build-dir build] [--batch 64] [--runs 20] [--rounds 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import torch_models  # noqa: E402

MODELS = ["mlp", "lenet"]


def torch_round_ms(model, x, runs):
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(runs):
            model(x)
        return (time.perf_counter() - start) * 1000 / runs


def bench_torch(model, x_np, runs, rounds):
    x = torch.from_numpy(x_np)
    with torch.no_grad():
        for _ in range(3):  # warm-up: allocator, oneDNN/MKL primitive caches
            model(x)
    return statistics.median(torch_round_ms(model, x, runs) for _ in range(rounds))


def kiln_round_ms(kiln, model_path, x_path, threads, runs):
    proc = subprocess.run([str(kiln), "run", str(model_path), "--input", f"input={x_path}",
                           "--threads", str(threads), "--repeat", str(runs)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"kiln exited with status {proc.returncode}")
    line = proc.stdout.strip().splitlines()[-1]
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    if not line.startswith("time_ms") or int(fields["runs"]) != runs:
        raise RuntimeError(f"unexpected timing line from kiln: {line!r}")
    return float(fields["mean"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20, help="forward calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    args = parser.parse_args()

    kiln = args.build_dir.resolve() / "bin" / "kiln"
    if not kiln.exists():
        sys.exit(f"forward.py: {kiln} does not exist; build the kiln_cli target first")
    torch.set_num_threads(args.threads)

    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        for name in MODELS:
            _, input_shape = torch_models.MODELS[name]
            model = torch_models.build(name, seed=0)
            model_path = torch_models.export(model, input_shape, Path(tmp) / f"{name}.onnx")
            x = np.random.default_rng(0).standard_normal((args.batch, *input_shape)).astype(np.float32)
            x_path = Path(tmp) / f"{name}_x.npy"
            np.save(x_path, x)
            torch_ms = bench_torch(model, x, args.runs, args.rounds)
            try:
                kiln_ms = statistics.median(kiln_round_ms(kiln, model_path, x_path, args.threads, args.runs)
                                            for _ in range(args.rounds))
                rows.append((name, args.batch, torch_ms, kiln_ms, f"{kiln_ms / torch_ms:.2f}"))
            except RuntimeError as e:
                rows.append((name, args.batch, torch_ms, float("nan"), f"failed: {e}"))

    print(f"forward pass, {args.threads} threads, median of {args.rounds} rounds x {args.runs} runs "
          f"(torch {torch.__version__})")
    print(f"{'model':<8} {'batch':>5} {'PyTorch ms':>11} {'Kiln ms':>9}  ratio (Kiln/PyTorch)")
    for name, batch, t, k, ratio in rows:
        print(f"{name:<8} {batch:>5} {t:>11.3f} {k:>9.3f}  {ratio}")
    return 0 if all(not r[4].startswith("failed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
