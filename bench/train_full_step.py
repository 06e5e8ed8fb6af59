#!/usr/bin/python3
"""Full training-step benchmark: forward, loss, backward and the AdamW update, Kiln's on-device
training API against PyTorch, on the models and sizes of bench/train_step.py, with each side's
peak memory.

Each model's forward graph is exported (opset 17; BatchNorm in training mode for LeNet and
ResNet-18; GPT-2 with its language-model loss inside, the others with `kiln artifacts --loss
CrossEntropyLoss`) and turned into training artifacts with `kiln artifacts --optimizer AdamW`,
outside the timing. Each side then runs in its own process, so that its peak resident set size
(VmHWM: ru_maxrss would carry this parent's peak over exec) is its own:

- **Kiln**: `kiln-train-steps ARTIFACTS --threads T --warmup K --steps K+N` over one repeated batch:
  each step is module.train(); module(inputs); optimizer.step(); module.lazy_reset_grad();
- **PyTorch**: torch.set_num_threads(T); K warm-up steps, then N timed steps of
  `loss = loss_fn(module(*inputs), labels); loss.backward(); optimizer.step();
  optimizer.zero_grad(set_to_none=True)` with torch.optim.AdamW(lr=1e-3).

The table shows each side's mean step time over the N timed steps (the median over R rounds, the
two sides' processes alternating) and peak RSS (the largest over the rounds).

    /usr/bin/python3 bench/train_full_step.py [--build-dir build] [--models mlp,resnet18,...]
                                              [--batch B] [--seq S] [--runs N] [--rounds 1]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

import torch_models  # noqa: E402
import zoo_models  # noqa: E402
from common import REPO, Row  # noqa: E402
from training_models import WithLoss  # noqa: E402
from training_parity import cross_entropy_loss, export_forward, perturb, write_manifest  # noqa: E402

# The sizes of bench/train_step.py; `runs` timed steps after WARMUP (a step also updates every
# parameter, so about as long as train_step.py's forward + backward).
ROWS = [
    Row("mlp", 64, runs=30),
    Row("lenet", 64, runs=20),
    Row("resnet18", 8, runs=8),       # 224x224 images, BatchNorm in training mode
    Row("bert", 8, seq=128, runs=10),
    Row("gpt2", 4, seq=128, runs=10),
]
WARMUP = 3


def build_case(name, batch, seq):
    """(torch module, one batch {input: array, ..., "labels"?}, kiln loss, BatchNorm in training
    mode), seeded: the parent (which exports it) and the PyTorch worker build the same one. Weights
    get seeded noise so that no two initializers are equal (the exporter would merge them)."""
    rng = np.random.default_rng(0)
    if name in torch_models.MODELS:
        _, input_shape = torch_models.MODELS[name]
        module = perturb(torch_models.build(name, seed=0))
        feeds = {"input": rng.standard_normal((batch, *input_shape)).astype(np.float32),
                 "labels": rng.integers(0, 10, size=(batch,), dtype=np.int64)}
        return module, feeds, "CrossEntropyLoss", name == "lenet"
    model, spec = zoo_models.build(name, size="bench", seed=0)
    feeds = spec.inputs(batch, seq, rng)
    if name == "gpt2":  # the LM loss inside the model: its output is the loss
        feeds["y"] = feeds["input_ids"].copy()
        return WithLoss(model, "lm"), feeds, "none", False
    classes = zoo_models.SIZES[name]["bench"].get("classes", 1000)
    if name == "resnet18":
        for m in model.modules():  # calibrate_batchnorm leaves a cumulative average; train as torch does
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = 0.1
    feeds["labels"] = rng.integers(0, classes, size=(batch,), dtype=np.int64)
    return perturb(model), feeds, "CrossEntropyLoss", name == "resnet18"


# ------------------------------------------------------------------------------- PyTorch worker

def torch_worker(name, batch, seq, threads, warmup, runs):
    """Runs in its own process; prints {"mean_ms", "peak_rss_kb"}."""
    torch.set_num_threads(threads)
    module, feeds, loss, _ = build_case(name, batch, seq)
    module.train()
    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    labels = tensors.pop("labels", None)
    inputs = tuple(tensors.values())
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)

    def step():
        out = module(*inputs)
        value = out if loss == "none" else cross_entropy_loss(out, labels)
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1000)
    print(json.dumps({"mean_ms": sum(times) / len(times), "peak_rss_kb": peak_rss_kb()}))


def peak_rss_kb():
    """VmHWM, this process's own peak resident set: ru_maxrss survives exec on Linux, so a worker
    started by this (large) parent would report the parent's peak (as kiln-train-steps does)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def torch_round(row, threads):
    proc = subprocess.run([sys.executable, __file__, "--torch-worker", row.name, "--batch", str(row.batch),
                           "--seq", str(row.seq), "--threads", str(threads), "--runs", str(row.runs)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"train_full_step.py: the PyTorch worker failed on {row.name}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------- Kiln side

def kiln_artifacts(kiln, row, folder):
    """Exports the row's model, generates its artifacts and saves its batch; returns (artifact
    folder, manifest). Raises RuntimeError with kiln's message when it fails."""
    module, feeds, loss, train = build_case(row.name, row.batch, row.seq)
    inputs = {k: v for k, v in feeds.items() if k != "labels"}
    model_path = export_forward(module, inputs, folder / f"{row.name}.onnx",
                                output_names=["loss" if loss == "none" else "logits"], train=train)
    out = folder / f"{row.name}_artifacts"
    proc = subprocess.run([str(kiln), "artifacts", str(model_path), "--loss", loss, "--optimizer", "AdamW",
                           "--lr", "1e-3", "--out", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"kiln artifacts exited with status {proc.returncode}")
    return out, write_manifest(folder / f"{row.name}_data", [feeds])


def kiln_round(train_steps, artifacts, manifest, row, threads):
    proc = subprocess.run([str(train_steps), str(artifacts), "--batches", str(manifest), "--threads", str(threads),
                           "--warmup", str(WARMUP), "--steps", str(WARMUP + row.runs)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"kiln-train-steps exited with status {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------- the table

def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--models", default=",".join(r.name for r in ROWS))
    parser.add_argument("--batch", type=int, help="batch size for every model (default: per model)")
    parser.add_argument("--seq", type=int, help="sequence length for the token models (default: 128)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, help="timed steps per round (default: per model)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; the median step time is reported")
    parser.add_argument("--torch-worker", help=argparse.SUPPRESS)
    return parser.parse_args()


def selected_rows(args):
    known = {r.name: r for r in ROWS}
    wanted = [m for m in args.models.split(",") if m]
    unknown = [m for m in wanted if m not in known]
    if unknown:
        sys.exit(f"train_full_step.py: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [Row(m, args.batch or known[m].batch, (args.seq or known[m].seq) if known[m].seq else 0,
                args.runs or known[m].runs) for m in wanted]


def main():
    args = parse_args()
    if args.torch_worker:
        return torch_worker(args.torch_worker, args.batch, args.seq, args.threads, WARMUP, args.runs)
    build = args.build_dir.resolve()
    kiln, train_steps = build / "bin" / "kiln", build / "bin" / "kiln-train-steps"
    for exe in (kiln, train_steps):
        if not exe.exists():
            sys.exit(f"train_full_step.py: {exe} does not exist; build the kiln_cli and kiln_train_steps targets")
    print(f"full training step (forward, backward, AdamW), {args.threads} threads, median of {args.rounds} "
          f"round(s) of N steps after {WARMUP} warm-up steps (torch {torch.__version__})")
    print(f"{'model':<9} {'batch':>5} {'seq':>4} {'N':>3} {'Kiln ms':>9} {'PyTorch ms':>11} {'ratio':>6} "
          f"{'Kiln RSS MB':>12} {'PyTorch RSS MB':>15}")
    failed = False
    with tempfile.TemporaryDirectory(prefix="kiln-bench-full-step-") as tmp:
        for row in selected_rows(args):
            torch_runs, kiln_runs, error = [], [], None
            try:
                artifacts, manifest = kiln_artifacts(kiln, row, Path(tmp))
            except RuntimeError as e:
                error = str(e).splitlines()[-1]
            for _ in range(args.rounds):
                torch_runs.append(torch_round(row, args.threads))
                if error is None:
                    try:
                        kiln_runs.append(kiln_round(train_steps, artifacts, manifest, row, args.threads))
                    except RuntimeError as e:
                        error = str(e).splitlines()[-1]
            t_ms = statistics.median(r["mean_ms"] for r in torch_runs)
            t_mb = max(r["peak_rss_kb"] for r in torch_runs) / 1024
            seq = str(row.seq) if row.seq else "-"
            head = f"{row.name:<9} {row.batch:>5} {seq:>4} {row.runs:>3}"
            if error is not None:
                failed = True
                print(f"{head} {'-':>9} {t_ms:>11.2f} {'-':>6} {'-':>12} {t_mb:>15.0f}  failed: {error}")
                continue
            k_ms = statistics.median(r["mean_ms"] for r in kiln_runs)
            k_mb = max(r["peak_rss_kb"] for r in kiln_runs) / 1024
            print(f"{head} {k_ms:>9.2f} {t_ms:>11.2f} {k_ms / t_ms:>6.2f} {k_mb:>12.0f} {t_mb:>15.0f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
