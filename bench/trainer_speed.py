"""The Trainer's speed on LeNet / Fashion-MNIST against an equivalent PyTorch loop, and its
overhead over the raw training API, in one run (2 threads each):

  - Kiln Trainer: `kiln train --model lenet` for N optimizer steps at batch 64 (data loading,
    collation, clipping, the schedule and logging included), its train_steps_per_second;
  - Kiln raw API: `kiln-train-steps` over the same artifacts and one repeated batch (module call,
    optimizer step, lazy_reset_grad only);
  - PyTorch: the same LeNet (BatchNorm in training mode) on the same Fashion-MNIST batches with
    AdamW, the linear schedule and clip_grad_norm_(1.0), batches drawn from a shuffled tensor; in a
    worker process, once with the default OpenMP wait policy and once with OMP_WAIT_POLICY=PASSIVE
    (the faster counts).

    /usr/bin/python3 bench/trainer_speed.py --build-dir build [--steps 400] [--threads 2]
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import WAIT_POLICIES, policy_env

REPO = Path(__file__).resolve().parents[1]
FASHION = Path("/usr/share/datasets/fashion-mnist")


class LeNet(torch.nn.Module):
    """Kiln's built-in lenet (src/models/builtin.cpp), in torch."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.BatchNorm2d(6)
        self.conv2, self.bn2 = torch.nn.Conv2d(6, 16, 5), torch.nn.BatchNorm2d(16)
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(400, 120), torch.nn.Linear(120, 84), torch.nn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x.flatten(1))))))


def fashion_train():
    with gzip.open(FASHION / "train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(FASHION / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return ((images.astype(np.float32) / 255 - 0.2860) / 0.3530), labels


def torch_steps_per_second(steps, batch, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = fashion_train()
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    model = LeNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (steps - s) / steps))
    order = torch.randperm(len(y))
    start = None
    for step in range(steps + 10):
        if step == 10:
            start = time.perf_counter()
        idx = order[(step * batch) % (len(y) - batch):][:batch]
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return steps / (time.perf_counter() - start)


def torch_worker(args, policy):
    """PyTorch's steps/s in a worker process under the OpenMP wait policy `policy` (WAIT_POLICIES)."""
    proc = subprocess.run([sys.executable, __file__, "--torch-worker", "--steps", str(args.steps), "--batch",
                           str(args.batch), "--threads", str(args.threads)], capture_output=True, text=True,
                          env=policy_env(policy))
    if proc.returncode != 0:
        sys.exit(f"the PyTorch worker failed ({policy}): {proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["steps_per_second"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        print(json.dumps({"steps_per_second": torch_steps_per_second(args.steps, args.batch, args.threads)}))
        return
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        out = tmp / "out"
        proc = subprocess.run([str(args.build_dir / "bin" / "kiln"), "train", "--model", "lenet",
                               "--output_dir", str(out),
                               "--max_steps", str(args.steps), "--per_device_train_batch_size", str(args.batch),
                               "--save_strategy", "no", "--logging_steps", "100", "--disable_tqdm", "true"],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"kiln train failed: {proc.stderr}")
        trainer = json.loads((out / "train_results.json").read_text())["train_steps_per_second"]

        x, y = fashion_train()
        np.save(tmp / "x.npy", x[:args.batch])
        np.save(tmp / "y.npy", y[:args.batch])
        (tmp / "batches.json").write_text(json.dumps([{"input": "x.npy", "labels": "y.npy"}]))
        proc = subprocess.run([str(args.build_dir / "bin" / "kiln-train-steps"), str(out / "artifacts"), "--batches",
                               str(tmp / "batches.json"), "--steps", str(args.steps), "--warmup", "10", "--threads",
                               str(args.threads)], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"kiln-train-steps failed: {proc.stderr}")
        raw = 1000.0 / json.loads(proc.stdout.strip().splitlines()[-1])["mean_ms"]
    peers = {policy: torch_worker(args, policy) for policy in WAIT_POLICIES}
    print(f"Trainer speed, LeNet on Fashion-MNIST, batch {args.batch}, {args.steps} steps, {args.threads} threads "
          f"(torch {torch.__version__})")
    print(f"{'':24}{'steps/s':>10}")
    print(f"{'Kiln Trainer':24}{trainer:10.1f}")
    print(f"{'Kiln raw training API':24}{raw:10.1f}")
    for policy, rate in peers.items():
        print(f"{'PyTorch loop (' + policy + ')':24}{rate:10.1f}")
    peer = max(peers.values())
    print(f"Trainer overhead over the raw API: {100 * (raw / trainer - 1):.1f}%   Kiln Trainer / PyTorch (the faster "
          f"policy): {trainer / peer:.2f}x steps/s")


if __name__ == "__main__":
    main()
