#!/usr/bin/python3
"""Background data loading (issue 22): the Python Trainer on LeNet (with BatchNorm) over
Fashion-MNIST's training images held in a map-style Python dataset whose __getitem__ takes 0.5 ms
(a decode or augmentation stand-in: time.sleep, which releases the GIL as I/O and numpy work do),
batch 64, 60 updates, with dataloader_num_workers 0 and 2 (threads loading batches ahead of the
step). Steps per second, median of --rounds runs; the trained weights are the same either way.

    /usr/bin/python3 bench/dataloader_workers.py [--build-dir build] [--rounds 3]
"""
import argparse
import gzip
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = Path("/usr/share/datasets/fashion-mnist")


class SlowImages:
    def __init__(self, images, labels, delay):
        self.images, self.labels, self.delay = images, labels, delay

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        time.sleep(self.delay)
        return {"input": self.images[i], "labels": self.labels[i]}


def load():
    with gzip.open(DATA / "train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    with gzip.open(DATA / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return images[:8192], labels[:8192]


def steps_per_second(kiln, data, workers):
    with tempfile.TemporaryDirectory() as out:
        args = kiln.TrainingArguments(output_dir=out, report_to="none", disable_tqdm=True, save_strategy="no",
                                      per_device_train_batch_size=64, max_steps=60,
                                      dataloader_num_workers=workers)
        trainer = kiln.Trainer(model="lenet", args=args, train_dataset=data)
        return trainer.train().metrics["train_steps_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    os.environ["KILN_BUILD_DIR"] = str(Path(a.build_dir).resolve())
    sys.path.insert(0, str(REPO / "tests" / "python"))
    from kiln_package import import_kiln
    kiln = import_kiln()
    data = SlowImages(*load(), delay=0.0005)
    print("== dataloader_num_workers: LeNet on Fashion-MNIST, a Python dataset at 0.5 ms per item, batch 64 ==")
    rates = {w: statistics.median(steps_per_second(kiln, data, w) for _ in range(a.rounds)) for w in (0, 2)}
    for w, r in rates.items():
        print(f"{w} workers: {r:7.1f} steps/s")
    print(f"ratio 2 / 0: {rates[2] / rates[0]:.2f}x")


if __name__ == "__main__":
    main()
