#!/usr/bin/python3
"""Data-parallel training on this machine (issue 20): each bench case (bench/cases.py's lenet and
gpt2 rows, the same global batch every step) trained by Kiln as 1 rank x 2 threads and as 2 ranks
x 1 thread under mpirun (kiln.distributed.DataParallel: DDP with 25 MB and 4 MB buckets, and ZeRO
stage 2), with the time
the collectives took per step (comm) and the part of it the rank waited for (exposed: what the
backward pass did not hide); and PyTorch DDP (gloo, 2 processes x 1 thread) as the peer, with its
default OpenMP wait policy and with OMP_WAIT_POLICY=PASSIVE (the faster counts).

    /usr/bin/python3 bench/distributed.py [--build-dir build] [--rounds 3] [--models lenet,gpt2]

Every figure is the median over rounds; a round of two ranks counts its slower rank.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from common import REPO, WAIT_POLICIES, header, median, policy_env
from measure import Bench

HERE = Path(__file__).resolve().parent


def kiln_round(bench, case, ranks, zero_stage, scratch, bucket_mb=25):
    artifacts, manifest = bench.artifacts(replace(case, batch=case.batch // ranks))  # each rank's share
    out = Path(tempfile.mkdtemp(dir=scratch))
    worker = [sys.executable, str(HERE / "distributed_worker.py"), str(artifacts), str(manifest), str(out),
              "--steps", str(case.steps), "--warmup", str(case.warmup), "--zero-stage", str(zero_stage),
              "--bucket-mb", str(bucket_mb)]
    env = dict(os.environ, KILN_BUILD_DIR=str(bench.kiln.parents[1]), OMP_NUM_THREADS=str(2 // ranks))
    if ranks > 1:
        worker = [shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
                  "KILN_BUILD_DIR", "-x", "OMP_NUM_THREADS", *worker]
    proc = subprocess.run(worker, capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"kiln ({ranks} ranks) failed:\n{proc.stderr[-2000:]}")
    results = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    return max(results, key=lambda r: r["step_ms"])


def torch_round(case, policy):
    proc = subprocess.run([sys.executable, str(HERE / "torch_ddp_worker.py"), case.model, "--ranks", "2",
                           "--warmup", str(case.warmup), "--steps", str(case.steps)],
                          capture_output=True, text=True, env=policy_env(policy), timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"torch DDP failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["mean_ms"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", type=Path, default=REPO / "build")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="lenet,gpt2")
    a = p.parse_args()
    if shutil.which("mpirun") is None:
        print("mpirun is not installed (scripts/setup.sh installs Open MPI): no distributed bench")
        return
    print(header("Data parallel: 1 rank x 2 threads against 2 ranks x 1 thread, the same global batch", a.rounds))
    print(f"{'model':8} {'batch':>5} {'1x2 ms':>8} {'2x1 ms':>8} {'speed':>6} {'comm ms':>8} {'exposed':>8} "
          f"{'4MB ms':>8} {'exposed':>8} {'ZeRO-2 ms':>9} {'torch 2x1':>9} {'vs torch':>8}")
    with tempfile.TemporaryDirectory() as scratch:
        bench = Bench(a.build_dir, scratch, a.rounds)
        for name in a.models.split(","):
            case = bench.case(name)
            one, two, small, zero2, peer = [], [], [], [], []
            for _ in range(a.rounds):
                one.append(kiln_round(bench, case, 1, 0, scratch))
                two.append(kiln_round(bench, case, 2, 0, scratch))
                small.append(kiln_round(bench, case, 2, 0, scratch, bucket_mb=4))
                zero2.append(kiln_round(bench, case, 2, 2, scratch))
                peer.append(min(torch_round(case, policy) for policy in WAIT_POLICIES))
            one_ms, two_ms = median([r["step_ms"] for r in one]), median([r["step_ms"] for r in two])
            comm, exposed = median([r["comm_ms"] for r in two]), median([r["wait_ms"] for r in two])
            zero_ms, torch_ms = median([r["step_ms"] for r in zero2]), median(peer)
            small_ms, small_exposed = median([r["step_ms"] for r in small]), median([r["wait_ms"] for r in small])
            print(f"{name:8} {case.batch:>5} {one_ms:8.2f} {two_ms:8.2f} {one_ms / two_ms:5.2f}x {comm:8.2f} "
                  f"{exposed:8.2f} {small_ms:8.2f} {small_exposed:8.2f} {zero_ms:9.2f} {torch_ms:9.2f} "
                  f"{torch_ms / two_ms:7.2f}x")
    print("speed: 1x2 over 2x1 time (above 1: two ranks faster); comm: the collectives' time per step on the "
          "slower rank (waiting for the other included); exposed: the part of it that rank waited for; 4MB: 2x1 "
          "with ddp_bucket_cap_mb 4; ZeRO-2: 2x1 with stage 2 (25 MB buckets); vs torch: PyTorch DDP's time "
          "(25 MB buckets) over Kiln's, 2 ranks x 1 thread each")


if __name__ == "__main__":
    main()
