#!/usr/bin/python3
"""Training-step benchmark: one forward + backward pass (loss and every parameter's gradient),
Kiln against PyTorch on the same models and inputs, in one run.

Each model is exported with its loss (tests/python/training_models.py: cross-entropy, or the LM
loss for GPT-2; BatchNorm in training mode) and turned into a training graph by `kiln grad`,
outside the timing. A Kiln round is `kiln run TRAIN.onnx --threads T --repeat N` (one warm-up
step, then the mean of N timed steps; loading and planning are not timed). A PyTorch round is the
mean of N steps of `zero_grad(set_to_none=True); loss = module(*inputs, y); loss.backward()` after
three warm-up steps, with torch.set_num_threads(T). The table shows the median over R rounds, the
two sides' rounds alternating so that a change in the machine's load affects both alike.

    /usr/bin/python3 bench/train_step.py [--build-dir build] [--models mlp,resnet18,...]
                                         [--batch B] [--seq S] [--runs N] [--rounds 5]
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
sys.path.insert(0, str(REPO / "bench"))

import torch_models  # noqa: E402
from forward import Row, kiln_round_ms  # noqa: E402
from training_models import Case, WithLoss, export_with_loss, zoo_case  # noqa: E402

# The models and sizes of bench/forward.py; a step costs about three forward passes, so N is
# about a third of forward.py's (a round near a second on an idle 2-core machine).
ROWS = [
    Row("mlp", 64, runs=10),
    Row("lenet", 64, runs=6),
    Row("resnet18", 8, runs=1),       # 224x224 images, BatchNorm in training mode
    Row("vit", 32, runs=3),
    Row("bert", 8, seq=128, runs=1),
    Row("gpt2", 4, seq=128, runs=1),
]


def make_case(row):
    """The row's model with its loss and seeded inputs (the target named "y")."""
    if row.name in torch_models.MODELS:
        _, input_shape = torch_models.MODELS[row.name]
        model = torch_models.build(row.name, seed=0)
        rng = np.random.default_rng(0)
        feeds = {"input": rng.standard_normal((row.batch, *input_shape)).astype(np.float32),
                 "y": rng.integers(0, 10, size=(row.batch,), dtype=np.int64)}
        # LeNet's BatchNorm normalises with batch statistics, as in a training step.
        return Case(WithLoss(model, "ce"), feeds, train=row.name == "lenet")
    return zoo_case(row.name, "bench", row.batch, row.seq)


def torch_round_ms(module, xs, runs):
    start = time.perf_counter()
    for _ in range(runs):
        module.zero_grad(set_to_none=True)
        module(*xs).backward()
    return (time.perf_counter() - start) * 1000 / runs


def bench_pair(case, kiln_round, runs, rounds):
    """(PyTorch ms, Kiln ms): medians over `rounds`, the two sides' rounds alternating."""
    module = case.module.train(case.train)
    xs = case.tensors()
    torch_round_ms(module, xs, 3)  # warm-up: allocator, oneDNN/MKL primitive caches
    torch_ms, kiln_ms = [], []
    for _ in range(rounds):
        torch_ms.append(torch_round_ms(module, xs, runs))
        kiln_ms.append(kiln_round())
    return statistics.median(torch_ms), statistics.median(kiln_ms)


def kiln_training_graph(kiln, case, folder, name):
    """Exports the model with its loss, runs `kiln grad` on it and returns the training graph's path
    (every parameter of the module differentiated: named, since a model may hold float buffers
    that are no parameters, like GPT-2's causal mask)."""
    model_path = folder / f"{name}.onnx"
    export_with_loss(case, model_path)
    train_path = folder / f"{name}_train.onnx"
    params = ",".join(n for n, _ in case.module.named_parameters())
    proc = subprocess.run([str(kiln), "grad", str(model_path), "--loss", "loss", "--out", str(train_path),
                           "--requires-grad", params], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"kiln grad exited with status {proc.returncode}")
    return train_path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--models", default=",".join(r.name for r in ROWS),
                        help="comma-separated models to run (default: all)")
    parser.add_argument("--batch", type=int, help="batch size for every model (default: per model)")
    parser.add_argument("--seq", type=int, help="sequence length for the token models (default: 128)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, help="training steps per round (default: per model)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    args = parser.parse_args()

    kiln = args.build_dir.resolve() / "bin" / "kiln"
    if not kiln.exists():
        sys.exit(f"train_step.py: {kiln} does not exist; build the kiln_cli target first")
    known = {r.name: r for r in ROWS}
    wanted = [m for m in args.models.split(",") if m]
    unknown = [m for m in wanted if m not in known]
    if unknown:
        sys.exit(f"train_step.py: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
    torch.set_num_threads(args.threads)

    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-train-") as tmp:
        folder = Path(tmp)
        for name in wanted:
            row = known[name]
            row = Row(name, args.batch or row.batch, (args.seq or row.seq) if row.seq else 0,
                      args.runs or row.runs)
            case = make_case(row)
            feed_paths = {}
            for input_name, value in case.feeds.items():
                feed_paths[input_name] = folder / f"{name}_{input_name}.npy"
                np.save(feed_paths[input_name], value)
            try:
                train_path = kiln_training_graph(kiln, case, folder, name)
                torch_ms, kiln_ms = bench_pair(
                    case, lambda: kiln_round_ms(kiln, train_path, feed_paths, args.threads, row.runs),
                    row.runs, args.rounds)
                rows.append((row, torch_ms, kiln_ms, f"{kiln_ms / torch_ms:.2f}"))
            except RuntimeError as e:  # Kiln failed: still report PyTorch's time
                message = str(e).splitlines()[-1] if str(e) else "failed"
                rows.append((row, bench_pair(case, lambda: 0.0, row.runs, args.rounds)[0], float("nan"),
                             f"failed: {message}"))

    print(f"training step (forward + backward), {args.threads} threads, median of {args.rounds} rounds of N "
          f"steps (torch {torch.__version__})")
    print(f"{'model':<9} {'batch':>5} {'seq':>4} {'N':>3} {'PyTorch ms':>11} {'Kiln ms':>9}  ratio (Kiln/PyTorch)")
    for row, t, k, ratio in rows:
        seq = str(row.seq) if row.seq else "-"
        print(f"{row.name:<9} {row.batch:>5} {seq:>4} {row.runs:>3} {t:>11.3f} {k:>9.3f}  {ratio}")
    return 0 if all(not r[3].startswith("failed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
