#!/usr/bin/python3
"""One rank of the on-device API under mpirun (test_distributed.py): kiln.training.api's Module
and Optimizer, wrapped in kiln.distributed.DataParallel, train an MLP on this rank's rows of each
seeded global batch (or on all of them, run alone as the one-process reference).

    mpirun -np 2 /usr/bin/python3 ddp_ondevice.py --out DIR [--zero-stage 2] [--accum 2] [--optim sgd]

Each rank writes DIR/rank<r>.json: its per-step losses (over its rows), the final weights and the
elements its optimizer updates.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kiln_package import import_kiln  # noqa: E402

kiln = import_kiln()
import kiln.distributed as dist  # noqa: E402
from kiln import nn  # noqa: E402
from kiln.training import artifacts  # noqa: E402
from kiln.training.api import CheckpointState, Module, Optimizer  # noqa: E402

GLOBAL_BATCH = 16


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--zero-stage", type=int, default=0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--optim", choices=["adamw", "sgd"], default="adamw")
    o = p.parse_args()
    rank, size = dist.rank(), dist.world_size()
    folder = o.out / "artifacts"
    if rank == 0:  # one rank writes the artifacts, the others wait for them
        nn.manual_seed(0)
        net = nn.Sequential(nn.Linear(20, 48), nn.ReLU(), nn.Linear(48, 48), nn.ReLU(), nn.Linear(48, 5))
        o.out.mkdir(parents=True, exist_ok=True)
        net.export(str(o.out / "mlp.onnx"), {"input": (4, 20)}, dynamic_axes={"input": {0: "batch"}})
        optim = artifacts.OptimType.AdamW if o.optim == "adamw" else artifacts.OptimType.SGD
        artifacts.generate_artifacts(str(o.out / "mlp.onnx"), loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=optim, artifact_directory=str(folder))
    dist.barrier()
    state = CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    module = Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"))
    ddp = dist.DataParallel(module, zero_stage=o.zero_stage, bucket_cap_mb=0.004)
    optimizer = Optimizer(str(folder / "optimizer_model.onnx"), module,
                          shard=ddp.owned_ranges() if o.zero_stage else None)
    optimizer.set_learning_rate(0.05 if o.optim == "sgd" else 1e-3)
    rng = np.random.default_rng(7)
    losses = []
    for _ in range(o.steps):
        step_loss = 0.0
        for micro in range(o.accum):
            x = rng.standard_normal((GLOBAL_BATCH, 20)).astype(np.float32)
            y = rng.integers(0, 5, GLOBAL_BATCH).astype(np.int64)
            mine = slice(rank, None, size)  # this rank's rows of the global batch
            if micro + 1 < o.accum:
                with ddp.no_sync():
                    loss = ddp(x[mine], y[mine])
            else:
                loss = ddp(x[mine], y[mine])
            step_loss += float(loss) / o.accum
        optimizer.step()
        ddp.gather_parameters()
        module.lazy_reset_grad()
        losses.append(step_loss)
    owned = sum(end - begin for _, begin, end in ddp.owned_ranges())
    result = {"losses": losses, "weights": module.get_contiguous_parameters().tolist(), "owned": owned,
              "total": module.get_parameters_size()}
    (o.out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
