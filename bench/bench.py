#!/usr/bin/python3
"""Kiln's benchmark (issue 17): every table in one run, at 2 threads, Kiln against PyTorch (run
twice: with the environment's default OpenMP wait policy and with OMP_WAIT_POLICY=PASSIVE; the
faster counts) and ONNX Runtime. In this order:

  peak     sgemm GFLOP/s of a 2048x2048 @ 2048x2048 float32 matmul (PyTorch, Kiln); the peak is
           the largest;
  full     full training step (forward, loss, backward, AdamW, zero grad) of mlp, lenet,
           resnet18 at 32x32 and 224x224, bert and gpt2: step time, speedup (best PyTorch / Kiln,
           target 2.0x), peak RSS and the RSS ratio Kiln / PyTorch (target <= 0.8); then, with
           `peak`, bert's and gpt2's achieved matmul GFLOP/s (3 x forward MatMul/Gemm FLOPs per step
           / step time) as % of the peak (target 75% for Kiln);
  forward  forward pass of the same models' inference graphs: Kiln, ONNX Runtime (onnxruntime-node)
           and PyTorch; Kiln's speedup over ORT (target >= 1.0);
  scaling  Kiln's step time for gpt2 at seq 128, 256, 512 and resnet18 32x32 at batch 8, 16, 32,
           against the forward MatMul/Gemm/Conv FLOPs;
  threads  Kiln's step time for bert and gpt2 at 1 and 2 threads (target speedup >= 1.8);
  recompute  Kiln's step time, planned activation arena and peak RSS for gpt2 at seq 512 and
           resnet18 32x32 with and without gradient checkpointing (issue 19: >= 40% less memory for
           <= 1.35x the time);
  bf16     Kiln's step time for bert and gpt2 in float32 and with bf16 mixed precision, and how
           this machine runs bfloat16 products (issue 19: >= 1.5x faster on AVX512-BF16 CPUs),
           against PyTorch's float32 step (issue 17: >= 2.0x on bert and gpt2) and its bf16
           autocast step.

Each measurement runs in its own process; a round runs each side once, the sides alternating, and
a table shows the median over the rounds. The default rounds keep the whole run within 15 minutes
on an idle 2-core machine. --quick runs one round of a few steps: it checks that the script works;
its figures are NOT for reporting.

    /usr/bin/python3 bench/bench.py [--build-dir build] [--only full,peak,...] [--models mlp,bert,...]
                                    [--rounds 3] [--quick] [--max-isa avx2]

--max-isa avx2 runs Kiln and PyTorch as on a CPU without AVX-512, on an AVX-512 machine (see
bench/README.md for what that does and does not reproduce).

A model Kiln fails on shows `failed: <first line of Kiln's error>` in its row, the other rows and
tables still print, and the exit status is 1. See bench/README.md.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cases import ROWS
from common import ISA_CAPS, REPO
from measure import Bench
from tables import (
    bf16_table,
    forward_table,
    full_table,
    matmul_efficiency_table,
    peak_table,
    recompute_table,
    scaling_table,
    threads_table,
)

TABLES = ["peak", "full", "forward", "scaling", "threads", "recompute", "bf16"]
DEFAULT_ROUNDS = 3


def bf16_compute_path(kiln):
    """How this machine runs bfloat16 products: the last line of `kiln ops`."""
    out = subprocess.run([str(kiln), "ops"], capture_output=True, text=True, check=False).stdout
    lines = [line for line in out.splitlines() if line.startswith("bfloat16 products")]
    return lines[-1].split(": ", 1)[1] if lines else "unknown (`kiln ops` did not say)"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--only", default=",".join(TABLES), help=f"comma-separated tables (default: all of {TABLES})")
    parser.add_argument("--models", default=",".join(ROWS),
                        help=f"comma-separated models (default: all of {list(ROWS)})")
    parser.add_argument("--rounds", type=int, help=f"rounds; tables show the median (default {DEFAULT_ROUNDS}, "
                        "--quick 1)")
    parser.add_argument("--quick", action="store_true", help="1 round of few steps: checks the script; figures "
                        "not for reporting")
    parser.add_argument("--max-isa", choices=sorted(ISA_CAPS), help="run Kiln and PyTorch as on a CPU without "
                        "AVX-512 (oneDNN, Kiln's vector code, ATen and OpenBLAS held to AVX2; ONNX Runtime cannot be)")
    args = parser.parse_args()
    args.only = _names(parser, args.only, TABLES, "table")
    args.models = _names(parser, args.models, list(ROWS), "model")
    args.rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)
    return args


def _names(parser, text, known, what):
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown {what}(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def main():
    args = parse_args()
    if args.max_isa:
        os.environ.update(ISA_CAPS[args.max_isa])  # every worker process inherits it
    build = args.build_dir.resolve()
    for exe in ("kiln", "kiln-train-steps"):
        if not (build / "bin" / exe).exists():
            sys.exit(f"bench.py: {build / 'bin' / exe} does not exist; build the kiln_cli and kiln_train_steps targets")
    start, failed, peak = time.monotonic(), False, None
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        bench = Bench(build, tmp, args.rounds, args.quick)
        if "peak" in args.only:
            peak, peak_failed = peak_table(bench, args.quick)
            failed |= peak_failed
        if "full" in args.only:
            failed |= full_table(bench, args.models)
        if peak is not None:
            failed |= matmul_efficiency_table(bench, peak, args.models)
        if "forward" in args.only:
            failed |= forward_table(bench, args.models)
        if "scaling" in args.only:
            failed |= scaling_table(bench, args.models)
        if "threads" in args.only:
            failed |= threads_table(bench, args.models)
        if "recompute" in args.only:
            failed |= recompute_table(bench, args.models)
        if "bf16" in args.only:
            failed |= bf16_table(bench, args.models, bf16_compute_path(bench.kiln))
    print(f"\nbench.py: {time.monotonic() - start:.0f} s{', quick: figures not for reporting' if args.quick else ''}"
          f"{'; some measurements failed (exit status 1)' if failed else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
