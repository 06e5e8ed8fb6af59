#!/usr/bin/python3
"""Where a training step's time goes, op by op: exports a bench row's model with its loss inside
the graph (bench/cases.py's training case; cross-entropy for all but gpt2, whose loss is its
output), builds the training graph with `kiln grad` (forward, loss, every parameter's gradient;
the optimizer update is left out) and runs it with `kiln run --profile`, which prints each op type's
share of the kernel time. bench/README.md records these tables.

    /usr/bin/python3 bench/profile_step.py MODEL [--build-dir build] [--threads 2] [--repeat 10]
"""
import argparse
import os
import subprocess
import sys
import tempfile
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
    args = parser.parse_args()
    kiln = args.build_dir.resolve() / "bin" / "kiln"
    module, feeds, loss, train = training_case(ROWS[args.model])
    if loss != "none":
        module = CrossEntropy(module)
    with tempfile.TemporaryDirectory(prefix="kiln-profile-") as tmp:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = args.keep
        forward = export_forward(module, feeds, Path(tmp) / "forward.onnx", output_names=["loss"], train=train)
        training = Path(tmp) / "training.onnx"
        subprocess.run([str(kiln), "grad", str(forward), "--loss", "loss", "--out", str(training)], check=True,
                       stdout=subprocess.DEVNULL)
        inputs = [a for name, path in save_feeds(feeds, Path(tmp), args.model).items()
                  for a in ("--input", f"{name}={path}")]
        proc = subprocess.run([str(kiln), "run", str(training), *inputs, "--threads", str(args.threads), "--repeat",
                               str(args.repeat), "--profile"], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"profile_step.py: kiln run failed: {proc.stderr.strip()}")
        lines = proc.stdout.splitlines()
        print(f"{args.model}: training graph (forward, loss, gradients), {args.threads} threads")
        print("\n".join(line for line in lines if not line.startswith("output ")))


if __name__ == "__main__":
    main()
