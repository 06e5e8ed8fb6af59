#!/usr/bin/python3
"""Pipeline parallelism on this machine (issue 21): the bench GPT-2-style decoder (4 layers, d 256,
seq 128, tied LM head) trained by kiln.graphcore.IPUTrainer as one process (2 threads), as 2 stages
(2 ranks x 1 thread) and as 4 stages (4 ranks on 2 cores), 8 micro-batches of 4 per update, with
both schedules. Printed per run: the time per update, and per stage its bubble (the share of the
update it waited for the other stages) and its activation arena (the training plan's peak).

A pipeline runs each stage's forward twice (GPipe's re-materialization) and on one host shares the
cores between its stages, so it is not faster than one process here: what it buys is memory per
rank (a quarter of the layers, the arena of one stage) and, across hosts, models that fit no single
one. The bubble is what the schedule leaves idle: (stages - 1) / (micro-batches + stages - 1) in
theory for both schedules; 1F1B keeps at most `stages` micro-batches' inputs per stage instead of
all of them.

    /usr/bin/python3 bench/pipeline.py [--build-dir build] [--steps 3]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "python" / "pipeline_train.py"


def train(build, layers, schedule, steps, scratch):
    out = Path(tempfile.mkdtemp(dir=scratch))
    ranks = len(layers)
    command = [sys.executable, str(SCRIPT), "--model", "gpt2", "--size", "bench", "--layers", *map(str, layers),
               "--batch", "4", "--accum", "8", "--steps", str(steps), "--schedule", schedule, "--out", str(out)]
    env = dict(os.environ, KILN_BUILD_DIR=str(build), OMP_NUM_THREADS=str(max(1, 2 // ranks)))
    if ranks > 1:
        command = [shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
                   "KILN_BUILD_DIR", "-x", "OMP_NUM_THREADS", *command]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    if shutil.which("mpirun") is None:
        print("pipeline bench: mpirun not found (scripts/setup.sh installs Open MPI)")
        return
    build = Path(a.build_dir).resolve()
    print("== Pipeline parallelism: GPT-2-style decoder (4 layers, d 256, seq 128), 8 micro-batches of 4 ==")
    print(f"{'run':<22} {'ms / update':>12}   per stage: bubble %, arena MiB")
    with tempfile.TemporaryDirectory() as scratch:
        for name, layers, schedule in [("1 process", [4], "1f1b"), ("2 stages, 1F1B", [2, 2], "1f1b"),
                                       ("2 stages, GPipe", [2, 2], "gpipe"), ("4 stages, 1F1B", [1, 1, 1, 1], "1f1b"),
                                       ("4 stages, GPipe", [1, 1, 1, 1], "gpipe")]:
            ranks = train(build, layers, schedule, a.steps, scratch)
            per_update = max(r["train_runtime"] for r in ranks) / a.steps * 1000
            stages = []
            for r in sorted(ranks, key=lambda r: r.get("pipeline_stage", 0)):
                if "pipeline_stage" not in r:
                    continue
                busy = r["pipeline_compute_seconds"] + r["pipeline_wait_seconds"]
                stages.append(f"{100 * r['pipeline_wait_seconds'] / busy:4.0f}%, "
                              f"{r['pipeline_stage_peak_bytes'] / 2 ** 20:6.1f}")
            print(f"{name:<22} {per_update:12.1f}   {' | '.join(stages) or '-'}")


if __name__ == "__main__":
    main()
