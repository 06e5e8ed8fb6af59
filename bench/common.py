"""What bench/forward.py and bench/train_step.py share: the table's rows, the command line, timing
`kiln run --repeat` rounds interleaved with PyTorch's, and printing the table."""
import argparse
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Row:
    """One benchmarked model: `batch` (and `seq` for token models) is what a user would run on a
    CPU; `runs` calls per round keep a round near a second at 2 threads on an idle machine, and
    the whole benchmark within a few minutes."""
    name: str
    batch: int
    seq: int = 0
    runs: int = 20


def parse_args(doc, rows, runs_help):
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--models", default=",".join(r.name for r in rows),
                        help="comma-separated models to run (default: all)")
    parser.add_argument("--batch", type=int, help="batch size for every model (default: per model)")
    parser.add_argument("--seq", type=int, help="sequence length for the token models (default: 128)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, help=runs_help)
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    return parser.parse_args()


def selected_rows(args, rows, script):
    """(kiln binary, the rows asked for with --batch/--seq/--runs applied); exits with a message
    naming `script` when the binary or a model is missing. Sets PyTorch's thread count."""
    kiln = args.build_dir.resolve() / "bin" / "kiln"
    if not kiln.exists():
        sys.exit(f"{script}: {kiln} does not exist; build the kiln_cli target first")
    known = {r.name: r for r in rows}
    wanted = [m for m in args.models.split(",") if m]
    unknown = [m for m in wanted if m not in known]
    if unknown:
        sys.exit(f"{script}: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
    torch.set_num_threads(args.threads)
    selected = []
    for name in wanted:
        row = known[name]
        selected.append(Row(name, args.batch or row.batch, (args.seq or row.seq) if row.seq else 0,
                            args.runs or row.runs))
    return kiln, selected


def save_feeds(feeds, folder, name):
    """Writes each input as `folder/NAME_INPUT.npy` for `kiln run --input`; {input name: path}."""
    feed_paths = {}
    for input_name, value in feeds.items():
        feed_paths[input_name] = folder / f"{name}_{input_name}.npy"
        np.save(feed_paths[input_name], value)
    return feed_paths


def interleaved_medians(torch_round, kiln_round, rounds):
    """(PyTorch ms, Kiln ms): medians over `rounds`, the two sides' rounds interleaved so that a
    change in the machine's load (it is often shared) affects both alike."""
    torch_ms, kiln_ms = [], []
    for _ in range(rounds):
        torch_ms.append(torch_round())
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


def print_table(title, rows):
    """Prints (row, PyTorch ms, Kiln ms, ratio or "failed: ...") rows under `title`; the exit
    status: 1 when Kiln failed on any model."""
    print(title)
    print(f"{'model':<9} {'batch':>5} {'seq':>4} {'N':>3} {'PyTorch ms':>11} {'Kiln ms':>9}  ratio (Kiln/PyTorch)")
    for row, t, k, ratio in rows:
        seq = str(row.seq) if row.seq else "-"
        print(f"{row.name:<9} {row.batch:>5} {seq:>4} {row.runs:>3} {t:>11.3f} {k:>9.3f}  {ratio}")
    return 0 if all(not r[3].startswith("failed") for r in rows) else 1
