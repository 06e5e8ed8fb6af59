#!/usr/bin/python3
"""Forward-pass benchmark: Kiln against PyTorch on the same exported models, in one run.

Both sides use the same thread count (2 by default) and are measured the same way: a round is the
mean time of N forward calls after a warm-up; the table shows the median over R rounds, the two
sides' rounds interleaved. Kiln's rounds are `kiln run --threads T --repeat N` invocations (the
timing excludes loading and planning, as PyTorch's excludes building the module).

    /usr/bin/python3 bench/forward.py [--build-dir build] [--models mlp,resnet18,...]
                                      [--batch B] [--seq S] [--runs N] [--rounds 5]

Each model has its own batch, sequence length and calls per round (see ROWS); --batch, --seq and
--runs override them for every model.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import torch_models  # noqa: E402
import zoo_models  # noqa: E402


@dataclass
class Row:
    """One benchmarked model: `batch` (and `seq` for token models) is what a user would run on a
    CPU; `runs` calls per round keep a round near a second at 2 threads on an idle machine, and
    the whole benchmark within a few minutes."""
    name: str
    batch: int
    seq: int = 0
    runs: int = 20


ROWS = [
    Row("mlp", 64),
    Row("lenet", 64),
    Row("resnet18", 8, runs=2),       # 224x224 images
    Row("vit", 32, runs=10),          # 32x32 images, patch 4, dim 64, 2 layers
    Row("bert", 8, seq=128, runs=3),  # BERT-mini: 4 layers, dim 256, padded batches
    Row("gpt2", 4, seq=128, runs=3),  # 4 layers, dim 256, vocabulary 8192
]


def prepare(row, folder):
    """(torch model, {input name: array}, ONNX path) for a row, with seeded weights and inputs."""
    rng = np.random.default_rng(0)
    path = folder / f"{row.name}.onnx"
    if row.name in torch_models.MODELS:
        _, input_shape = torch_models.MODELS[row.name]
        model = torch_models.build(row.name, seed=0)
        torch_models.export(model, input_shape, path)
        feeds = {"input": rng.standard_normal((row.batch, *input_shape)).astype(np.float32)}
    else:
        model, spec = zoo_models.build(row.name, size="bench", seed=0)
        zoo_models.export(model, spec, path)
        feeds = spec.inputs(row.batch, row.seq, rng)
    return model, feeds, path


def torch_round_ms(model, xs, runs):
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(runs):
            model(*xs)
        return (time.perf_counter() - start) * 1000 / runs


def bench_pair(model, feeds, kiln_round, runs, rounds):
    """(PyTorch ms, Kiln ms): medians over `rounds`, the two sides' rounds interleaved so that a
    change in the machine's load (it is often shared) affects both alike."""
    xs = [torch.from_numpy(v) for v in feeds.values()]
    with torch.no_grad():
        for _ in range(3):  # warm-up: allocator, oneDNN/MKL primitive caches
            model(*xs)
    torch_ms, kiln_ms = [], []
    for _ in range(rounds):
        torch_ms.append(torch_round_ms(model, xs, runs))
        kiln_ms.append(kiln_round())
    return statistics.median(torch_ms), statistics.median(kiln_ms)


def kiln_round_ms(kiln, model_path, feed_paths, threads, runs):
    inputs = [arg for name, path in feed_paths.items() for arg in ("--input", f"{name}={path}")]
    proc = subprocess.run([str(kiln), "run", str(model_path), *inputs,
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
    parser.add_argument("--models", default=",".join(r.name for r in ROWS),
                        help="comma-separated models to run (default: all)")
    parser.add_argument("--batch", type=int, help="batch size for every model (default: per model)")
    parser.add_argument("--seq", type=int, help="sequence length for the token models (default: 128)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, help="forward calls per round (default: per model)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    args = parser.parse_args()

    kiln = args.build_dir.resolve() / "bin" / "kiln"
    if not kiln.exists():
        sys.exit(f"forward.py: {kiln} does not exist; build the kiln_cli target first")
    known = {r.name: r for r in ROWS}
    wanted = [m for m in args.models.split(",") if m]
    unknown = [m for m in wanted if m not in known]
    if unknown:
        sys.exit(f"forward.py: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
    torch.set_num_threads(args.threads)

    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        for name in wanted:
            row = known[name]
            row = Row(name, args.batch or row.batch, (args.seq or row.seq) if row.seq else 0,
                      args.runs or row.runs)
            model, feeds, model_path = prepare(row, Path(tmp))
            feed_paths = {}
            for input_name, value in feeds.items():
                feed_paths[input_name] = Path(tmp) / f"{name}_{input_name}.npy"
                np.save(feed_paths[input_name], value)
            def kiln_round():
                return kiln_round_ms(kiln, model_path, feed_paths, args.threads, row.runs)
            try:
                torch_ms, kiln_ms = bench_pair(model, feeds, kiln_round, row.runs, args.rounds)
                rows.append((row, torch_ms, kiln_ms, f"{kiln_ms / torch_ms:.2f}"))
            except RuntimeError as e:  # Kiln failed: still report PyTorch's time
                rows.append((row, bench_pair(model, feeds, lambda: 0.0, row.runs, args.rounds)[0],
                             float("nan"), f"failed: {e}"))

    print(f"forward pass, {args.threads} threads, median of {args.rounds} rounds of N runs "
          f"(torch {torch.__version__})")
    print(f"{'model':<9} {'batch':>5} {'seq':>4} {'N':>3} {'PyTorch ms':>11} {'Kiln ms':>9}  ratio (Kiln/PyTorch)")
    for row, t, k, ratio in rows:
        seq = str(row.seq) if row.seq else "-"
        print(f"{row.name:<9} {row.batch:>5} {seq:>4} {row.runs:>3} {t:>11.3f} {k:>9.3f}  {ratio}")
    return 0 if all(not r[3].startswith("failed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
