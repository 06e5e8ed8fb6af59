#!/usr/bin/python3
"""Where a training step's time goes, op by op: exports a bench row's model with its loss inside
the graph (bench/cases.py's training case; cross-entropy for all but gpt2, whose loss is its
output), builds the training graph with `kiln grad` (forward, loss, every parameter's gradient;
the optimizer update is left out) and runs it with `kiln run --profile`, which prints each op type's
share of the kernel time. bench/README.md records these tables.

    /usr/bin/python3 bench/profile_step.py MODEL [--build-dir build] [--threads 2] [--repeat 10]
        [--batch N] [--seq N] [--nodes N] [--mixed-precision bf16] [--keep DIR]

--batch and --seq change the row's size (the scaling table's gpt2 at 512 tokens: --seq 512);
--nodes also prints the N slowest nodes with their shapes (kiln run --profile-nodes);
--mixed-precision bf16 profiles the bf16 mixed-precision training graph.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
from cases import ROWS, training_case
from common import REPO, save_feeds
from training_models import LOSSES
from training_parity import export_forward


class CrossEntropy(torch.nn.Module):
    """The bench module with torch's cross-entropy over its labels, as one graph."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        *inputs, labels = args
        return LOSSES["ce"](self.module(*inputs), labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=list(ROWS))
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="write the graphs and inputs to this folder and keep them")
    parser.add_argument("--batch", type=int, help="the batch size (default: the bench row's)")
    parser.add_argument("--seq", type=int, help="tokens per sequence, for bert and gpt2 (default: the row's)")
    parser.add_argument("--nodes", type=int, default=0, help="also print the N slowest nodes")
    parser.add_argument("--mixed-precision", default="no", choices=["no", "bf16", "fp16"],
                        help="the training graph's products in 16 bits (kiln grad --mixed-precision)")
    args = parser.parse_args()
    kiln = args.build_dir.resolve() / "bin" / "kiln"
    case = ROWS[args.model]
    if args.batch:
        case = replace(case, batch=args.batch)
    if args.seq:
        case = replace(case, seq=args.seq)
    module, feeds, loss, train = training_case(case)
    if loss != "none":
        module = CrossEntropy(module)
    with tempfile.TemporaryDirectory(prefix="kiln-profile-") as tmp:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = args.keep
        forward = export_forward(module, feeds, Path(tmp) / "forward.onnx", output_names=["loss"], train=train)
        training = Path(tmp) / "training.onnx"
        subprocess.run([str(kiln), "grad", str(forward), "--loss", "loss", "--out", str(training),
                        "--mixed-precision", args.mixed_precision], check=True,
                       stdout=subprocess.DEVNULL)
        inputs = [a for name, path in save_feeds(feeds, Path(tmp), args.model).items()
                  for a in ("--input", f"{name}={path}")]
        proc = subprocess.run([str(kiln), "run", str(training), *inputs, "--threads", str(args.threads), "--repeat",
                               str(args.repeat), "--profile", "--profile-nodes", str(args.nodes)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"profile_step.py: kiln run failed: {proc.stderr.strip()}")
        lines = proc.stdout.splitlines()
        print(f"{args.model} (batch {case.batch}, size {case.size}): training graph (forward, loss, gradients), "
              f"{args.threads} threads")
        print("\n".join(line for line in lines if not line.startswith("output ")))


if __name__ == "__main__":
    main()
