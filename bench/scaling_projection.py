#!/usr/bin/python3
"""Projected data-parallel scaling of the bench models to 8, 64 and 512 nodes (docs/distributed.md),
from a stated cost model, not a measurement:

- one rank per node, each with the per-rank batch of the bench (weak scaling: the global batch
  grows with the nodes); a step computes for C ms (measured on this machine by
  bench/distributed.py, 1 rank x 2 threads: pass --compute-ms to use another machine's), the
  backward pass being 2/3 of it;
- the gradients are S = 4 bytes x the trainable parameters (counted from the bench models),
  reduced in buckets of 25 MB; an allreduce of b bytes over N ranks takes
  2 (N-1)/N b / bandwidth + 2 log2(N) latency (reduce-scatter then allgather, recursive halving and
  doubling: Open MPI's choice for large messages), a reduce-scatter or an allgather half of that;
- DDP: the buckets' allreduces overlap the backward pass; what is exposed is the larger of the
  last bucket's allreduce and the total less the backward time;
- ZeRO stage 1: DDP's allreduce, then the parameters' allgather after the optimizer step, exposed
  (Kiln does not overlap it with the next forward); stage 2: reduce-scatter overlapped as DDP's
  allreduce, then the same allgather;
- efficiency = C / (C + exposed); memory per rank = parameters, gradients and bucket buffers (4
  bytes each per parameter) and Adam's moments (8 bytes per parameter, / N under ZeRO).

Each model is projected at this machine's compute time, and at 1/16 of it (a node whose socket
computes 16 times faster than these 2 threads: more cores, wider vectors), where the same bytes
weigh 16 times more.

    /usr/bin/python3 bench/scaling_projection.py [--compute-ms lenet=4.1,gpt2=300]
"""
import argparse
import itertools
import math

from cases import ROWS, training_case

NETWORKS = {  # name: (bytes per second, seconds of latency per message)
    "100 Gb/s (InfiniBand, RoCE)": (12.5e9, 5e-6),
    "25 Gb/s Ethernet": (3.125e9, 20e-6),
}
NODES = [8, 64, 512]
BUCKET = 25 * 1024 * 1024
# bench/distributed.py's 1 rank x 2 threads step on the machine of bench/README.md's issue-20 run.
DEFAULT_COMPUTE_MS = {"lenet": 3.2, "gpt2": 268.0}


def allreduce_s(size, n, bandwidth, latency, fraction=1.0):
    """An allreduce (fraction 1), or a reduce-scatter / allgather (0.5), of `size` bytes in buckets."""
    if n == 1:
        return 0.0
    buckets = max(1, math.ceil(size / BUCKET))
    return fraction * (2 * (n - 1) / n * size / bandwidth + buckets * 2 * math.log2(n) * latency)


def exposed_s(size, n, compute_s, bandwidth, latency, fraction):
    """The part of the overlapped reduction the backward pass does not hide."""
    total = allreduce_s(size, n, bandwidth, latency, fraction)
    last = allreduce_s(min(size, BUCKET), n, bandwidth, latency, fraction)
    return max(last, total - compute_s * 2 / 3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compute-ms", default="", help="model=ms,... (default: this machine's, see the source)")
    a = p.parse_args()
    compute = dict(DEFAULT_COMPUTE_MS)
    for item in filter(None, a.compute_ms.split(",")):
        name, ms = item.split("=")
        compute[name] = float(ms)
    print("Projected efficiency (step time alone / step time with communication), one rank per node")
    for name in ["lenet", "gpt2"]:
        module = training_case(ROWS[name])[0]
        params = sum(p.numel() for p in module.parameters() if p.requires_grad)
        size = 4 * params
        print(f"\n{name}: {params / 1e6:.2f} M parameters, {size / 2**20:.1f} MiB of gradients")
        print(f"  {'compute ms':>10} {'network':28} {'nodes':>5} {'DDP':>6} {'ZeRO-1':>7} {'ZeRO-2':>7} "
              f"{'comm ms':>8}")
        for speedup, (net, (bandwidth, latency)), n in itertools.product([1, 16], NETWORKS.items(), NODES):
            c = compute[name] / 1e3 / speedup
            gather = allreduce_s(size, n, bandwidth, latency, 0.5)
            ddp = exposed_s(size, n, c, bandwidth, latency, 1.0)
            zero1 = ddp + gather
            zero2 = exposed_s(size, n, c, bandwidth, latency, 0.5) + gather
            print(f"  {1e3 * c:10.2f} {net:28} {n:5d} {c / (c + ddp):6.1%} {c / (c + zero1):7.1%} "
                  f"{c / (c + zero2):7.1%} {1e3 * allreduce_s(size, n, bandwidth, latency):8.2f}")
        for n in NODES:
            ddp_mb = 20 * params / 2**20
            zero_mb = (12 * params + 8 * params / n) / 2**20
            print(f"  memory per rank at {n:3d} nodes: DDP {ddp_mb:7.1f} MiB, ZeRO-1/2 {zero_mb:7.1f} MiB "
                  "(parameters, gradients, buckets, Adam; activations aside)")


if __name__ == "__main__":
    main()
