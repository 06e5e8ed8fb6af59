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
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

import torch_models  # noqa: E402
import zoo_models  # noqa: E402
from common import Row, interleaved_medians, kiln_round_ms, parse_args, print_table, save_feeds, selected_rows  # noqa: E402

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
    """(PyTorch ms, Kiln ms), see common.interleaved_medians."""
    xs = [torch.from_numpy(v) for v in feeds.values()]
    with torch.no_grad():
        for _ in range(3):  # warm-up: allocator, oneDNN/MKL primitive caches
            model(*xs)
    return interleaved_medians(lambda: torch_round_ms(model, xs, runs), kiln_round, rounds)


def main():
    args = parse_args(__doc__, ROWS, "forward calls per round (default: per model)")
    kiln, selected = selected_rows(args, ROWS, "forward.py")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        for row in selected:
            model, feeds, model_path = prepare(row, Path(tmp))
            feed_paths = save_feeds(feeds, Path(tmp), row.name)
            def kiln_round(model_path=model_path, feed_paths=feed_paths, row=row):
                return kiln_round_ms(kiln, model_path, feed_paths, args.threads, row.runs)
            try:
                torch_ms, kiln_ms = bench_pair(model, feeds, kiln_round, row.runs, args.rounds)
                rows.append((row, torch_ms, kiln_ms, f"{kiln_ms / torch_ms:.2f}"))
            except RuntimeError as e:  # Kiln failed: still report PyTorch's time
                rows.append((row, bench_pair(model, feeds, lambda: 0.0, row.runs, args.rounds)[0],
                             float("nan"), f"failed: {e}"))
    return print_table(f"forward pass, {args.threads} threads, median of {args.rounds} rounds of N runs "
                       f"(torch {torch.__version__})", rows)


if __name__ == "__main__":
    sys.exit(main())
