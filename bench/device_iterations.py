#!/usr/bin/python3
"""IPUConfig's device_iterations (issue 21): `kiln train` on its default job (LeNet with BatchNorm on
Fashion-MNIST, batch 8) for 400 updates with 1 and with 16 updates per call into the engine, their
batches collated up front; the steps per second of each (median of --rounds runs). Kiln's loop is
C++, so the host work a call saves (callbacks, logging decisions) is small next to a step.

    /usr/bin/python3 bench/device_iterations.py [--build-dir build] [--rounds 3]
"""
import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def steps_per_second(kiln, iterations, scratch):
    out = Path(tempfile.mkdtemp(dir=scratch))
    subprocess.run([str(kiln), "train", "--output_dir", str(out), "--max_steps", "400", "--save_strategy", "no",
                    "--disable_tqdm", "true", "--logging_steps", "50", "--ipu_config_overrides",
                    f"device_iterations={iterations}"], check=True, capture_output=True, text=True, timeout=600)
    return json.loads((out / "train_results.json").read_text())["train_steps_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    kiln = Path(a.build_dir).resolve() / "bin" / "kiln"
    print("== device_iterations: kiln train (LeNet, Fashion-MNIST, batch 8), 400 updates ==")
    with tempfile.TemporaryDirectory() as scratch:
        rates = {n: statistics.median(steps_per_second(kiln, n, scratch) for _ in range(a.rounds)) for n in (1, 16)}
    for n, r in rates.items():
        print(f"device_iterations {n:>2}: {r:8.1f} steps/s")
    print(f"ratio 16 / 1: {rates[16] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
