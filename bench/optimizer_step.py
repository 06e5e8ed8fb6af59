#!/usr/bin/python3
"""Optimizer step benchmark: one AdamW update of every parameter, Kiln's Optimizer.step() (the
optimizer model run through a Session, in place) against torch.optim.AdamW.step(), on two
parameter sets: "many" (60 Linear(32, 32) layers: 120 small tensors, where per-tensor overhead
shows) and "big" (4 Linear(1024, 1024) layers: 4.2M parameters, memory bound).

Each side runs in its own process with T threads; PyTorch runs twice, with its default OpenMP
wait policy and with OMP_WAIT_POLICY=PASSIVE, and the faster counts. A side's time is the best of
R rounds of N steps (mean per step).

    /usr/bin/python3 bench/optimizer_step.py [--build-dir build] [--threads 2] [--rounds 5]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
CASES = {"many": (60, 32, 3000), "big": (4, 1024, 100)}  # layers, width, steps per round


def model(name):
    layers, width, _ = CASES[name]
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def best_of(rounds, steps, step):
    for _ in range(10):
        step()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t) / steps)
    return best


def torch_worker(name, threads, rounds):
    torch.set_num_threads(threads)
    m = model(name)
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    print(best_of(rounds, CASES[name][2], opt.step))


def kiln_worker(name, rounds, artifacts):
    sys.path.insert(0, os.environ["KILN_PYTHON_DIR"])  # threads: OMP_NUM_THREADS, set by the parent
    from kiln.training import api

    width = CASES[name][1]
    state = api.CheckpointState.load_checkpoint(f"{artifacts}/checkpoint")
    module = api.Module(f"{artifacts}/training_model.onnx", state, f"{artifacts}/eval_model.onnx")
    optimizer = api.Optimizer(f"{artifacts}/optimizer_model.onnx", module)
    rng = np.random.default_rng(0)
    module.train()
    module(rng.standard_normal((4, width)).astype(np.float32), rng.standard_normal((4, width)).astype(np.float32))
    print(best_of(rounds, CASES[name][2], optimizer.step))


def run_worker(args, env=None):
    proc = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False)
    if proc.returncode != 0:
        sys.exit(f"optimizer_step.py: worker {args} failed:\n{proc.stderr}")
    return float(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--artifacts", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.worker:
        side, name = a.worker
        if side == "torch":
            torch_worker(name, a.threads, a.rounds)
        else:
            kiln_worker(name, a.rounds, a.artifacts)
        return
    build = a.build_dir.resolve()
    kiln_env = {"KILN_PYTHON_DIR": str(build / "python"), "OMP_NUM_THREADS": str(a.threads)}
    print(f"AdamW step, {a.threads} threads, best of {a.rounds} rounds (torch {torch.__version__})")
    print(f"{'params':8} {'tensors':>7} {'elements':>9} {'PyTorch us':>11} {'Kiln us':>9} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="kiln-bench-optimizer-") as tmp:
        for name, (layers, width, _) in CASES.items():
            onnx_path = Path(tmp) / f"{name}.onnx"
            torch.onnx.export(model(name), torch.randn(4, width), str(onnx_path), input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, opset_version=17)
            artifacts = Path(tmp) / name
            subprocess.run([str(build / "bin" / "kiln"), "artifacts", str(onnx_path), "--loss", "MSELoss",
                            "--optimizer", "AdamW", "--out", str(artifacts)], check=True, capture_output=True)
            common = ["--threads", a.threads, "--rounds", a.rounds]
            torch_s = min(run_worker(["--worker", "torch", name, *common]),
                          run_worker(["--worker", "torch", name, *common], {"OMP_WAIT_POLICY": "PASSIVE"}))
            kiln_s = run_worker(["--worker", "kiln", name, "--artifacts", artifacts, *common], kiln_env)
            elements = layers * (width * width + width)
            print(f"{name:8} {2 * layers:>7} {elements:>9} {torch_s * 1e6:>11.1f} {kiln_s * 1e6:>9.1f} "
                  f"{kiln_s / torch_s:>6.2f}")


if __name__ == "__main__":
    main()
