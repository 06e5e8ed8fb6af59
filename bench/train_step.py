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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

import torch_models  # noqa: E402
from common import Row, interleaved_medians, kiln_round_ms, parse_args, print_table, save_feeds, selected_rows  # noqa: E402
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
    """(PyTorch ms, Kiln ms), see common.interleaved_medians."""
    module = case.module.train(case.train)
    xs = case.tensors()
    torch_round_ms(module, xs, 3)  # warm-up: allocator, oneDNN/MKL primitive caches
    return interleaved_medians(lambda: torch_round_ms(module, xs, runs), kiln_round, rounds)


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
    args = parse_args(__doc__, ROWS, "training steps per round (default: per model)")
    kiln, selected = selected_rows(args, ROWS, "train_step.py")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-train-") as tmp:
        folder = Path(tmp)
        for row in selected:
            case = make_case(row)
            feed_paths = save_feeds(case.feeds, folder, row.name)
            try:
                train_path = kiln_training_graph(kiln, case, folder, row.name)
                torch_ms, kiln_ms = bench_pair(
                    case,
                    lambda t=train_path, f=feed_paths, r=row: kiln_round_ms(kiln, t, f, args.threads, r.runs),
                    row.runs, args.rounds)
                rows.append((row, torch_ms, kiln_ms, f"{kiln_ms / torch_ms:.2f}"))
            except RuntimeError as e:  # Kiln failed: still report PyTorch's time
                message = str(e).splitlines()[-1] if str(e) else "failed"
                rows.append((row, bench_pair(case, lambda: 0.0, row.runs, args.rounds)[0], float("nan"),
                             f"failed: {message}"))
    return print_table(f"training step (forward + backward), {args.threads} threads, median of {args.rounds} "
                       f"rounds of N steps (torch {torch.__version__})", rows)


if __name__ == "__main__":
    sys.exit(main())
