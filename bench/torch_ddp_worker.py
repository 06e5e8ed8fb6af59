#!/usr/bin/python3
"""bench/distributed.py's peer: torch DistributedDataParallel (gloo) over N processes of one thread
each, every rank training a bench case on rows r, r + N, ... of its batch with AdamW (lr 1e-3),
as bench/distributed_worker.py does for Kiln. Prints one JSON line from rank 0: {"mean_ms"}, the
slowest rank's mean step time.

    /usr/bin/python3 bench/torch_ddp_worker.py MODEL --ranks N [--batch B] [--seq S] [--warmup W] [--steps S]
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as tdist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, size, port, a, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    tdist.init_process_group("gloo", rank=rank, world_size=size)
    from cases import ROWS, training_case
    from training_parity import cross_entropy_loss

    module, feeds, loss, _ = training_case(ROWS[a.model])
    tensors = {k: torch.from_numpy(v[rank::size].copy()) for k, v in feeds.items()}
    labels = tensors.pop("labels", None)
    inputs = tuple(tensors.values())
    model = torch.nn.parallel.DistributedDataParallel(module)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            tdist.barrier()
            start = time.perf_counter()
        out = model(*inputs)
        value = out if loss == "none" else cross_entropy_loss(out, labels)
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    ms = torch.tensor([(time.perf_counter() - start) * 1000 / a.steps])
    tdist.all_reduce(ms, op=tdist.ReduceOp.MAX)
    if rank == 0:
        queue.put(float(ms[0]))
    tdist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, a.ranks, port, a, queue)) for r in range(a.ranks)]
    for proc in procs:
        proc.start()
    ms = queue.get(timeout=600)
    for proc in procs:
        proc.join()
    print(json.dumps({"mean_ms": ms}))


if __name__ == "__main__":
    main()
