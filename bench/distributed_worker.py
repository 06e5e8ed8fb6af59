"""One process of bench/distributed.py: trains a bench case's artifacts on one repeated batch with
kiln.training.api (Module, Optimizer) and, under mpirun, kiln.distributed.DataParallel, each rank
training on its share of the global batch (artifacts exported at that batch); writes
OUT/rank<r>.json with the mean step time and the communication time per step.

    [mpirun -np N] /usr/bin/python3 bench/distributed_worker.py ARTIFACTS MANIFEST OUT --steps S --warmup W
        [--zero-stage K]
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from kiln_package import import_kiln  # noqa: E402

kiln = import_kiln()
import kiln.distributed as dist  # noqa: E402
from kiln.training.api import CheckpointState, Module, Optimizer  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("artifacts", type=Path)
    p.add_argument("manifest", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--zero-stage", type=int, default=0)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    o = p.parse_args()
    rank, size = dist.rank(), dist.world_size()
    entry = json.loads(o.manifest.read_text())[0]
    state = CheckpointState.load_checkpoint(str(o.artifacts / "checkpoint"))
    module = Module(str(o.artifacts / "training_model.onnx"), state)
    inputs = [np.load(o.manifest.parent / entry[name]) for name in module.input_names()]
    ddp = dist.DataParallel(module, zero_stage=o.zero_stage, bucket_cap_mb=o.bucket_mb) if size > 1 else None
    shard = ddp.owned_ranges() if ddp and o.zero_stage else None
    optimizer = Optimizer(str(o.artifacts / "optimizer_model.onnx"), module, shard=shard)
    busy0 = wait0 = 0.0
    for step in range(o.warmup + o.steps):
        if step == o.warmup:
            if ddp:
                busy0, wait0 = ddp.communication_seconds()
            start = time.perf_counter()
        (ddp or module)(*inputs)
        optimizer.step()
        if ddp:
            ddp.gather_parameters()
        module.lazy_reset_grad()
    elapsed = time.perf_counter() - start
    busy, wait = ddp.communication_seconds() if ddp else (0.0, 0.0)
    result = {"step_ms": 1e3 * elapsed / o.steps, "comm_ms": 1e3 * (busy - busy0) / o.steps,
              "wait_ms": 1e3 * (wait - wait0) / o.steps, "rows": int(inputs[0].shape[0])}
    o.out.mkdir(parents=True, exist_ok=True)
    (o.out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
