"""A training step with a torch optimizer, plain PyTorch against the same module wrapped in Kiln's
ORTModule (kiln.training.ortmodule), on the bench models (bench/cases.py), in one run:

  - each side runs in a worker process per OpenMP wait policy (default and OMP_WAIT_POLICY=PASSIVE,
    which both PyTorch and Kiln's OpenMP threads follow); the faster policy counts for each side;
  - a step is forward, the loss (cross-entropy in torch, or GPT-2's own), zero_grad, backward and
    AdamW's step; the mean of N steps after warm-up, the median of the rounds;
  - ORTModule's step is split into Kiln's forward and backward runs, the torch work around them (the
    loss, zero_grad, AdamW) and the rest: the bridge's own cost (Python, feeding and wrapping tensors,
    autograd), printed as a share of the step (issue 18's target: under 5% on the transformers);
  - the first call's export and planning time is printed too.

    /usr/bin/python3 bench/ortmodule_step.py --build-dir build [--models mlp,lenet,...] [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import WAIT_POLICIES, median, policy_env

REPO = Path(__file__).resolve().parents[1]
MODELS = ["mlp", "lenet", "resnet18-32", "bert", "gpt2"]
THREADS = 2


def worker(model_name, side, steps, warmup):
    """One side's steps in this process: {"step_ms", ...} as JSON on stdout."""
    import torch
    sys.path.insert(0, str(REPO / "tests" / "python"))
    from cases import ROWS, training_case

    torch.set_num_threads(THREADS)
    case = ROWS[model_name]
    module, feeds, loss_kind, _ = training_case(case)
    labels = feeds.pop("labels", None)
    inputs = [torch.from_numpy(v) for v in feeds.values()]
    target = torch.from_numpy(labels) if labels is not None else None
    timing = {"kiln_forward": 0.0, "kiln_backward": 0.0}
    first_call_ms = None
    if side == "ortmodule":
        from kiln.training import ortmodule

        run = ortmodule._Bound.run

        def timed(self, feeds):  # Kiln's own time, forward and backward parts apart
            start = time.perf_counter()
            try:
                return run(self, feeds)
            finally:
                key = "kiln_backward" if any(n.startswith("kiln_grad_output_") for n in self.inputs) else "kiln_forward"
                timing[key] += time.perf_counter() - start

        ortmodule._Bound.run = timed
        module = ortmodule.ORTModule(module)
        start = time.perf_counter()
        module(*inputs)
        first_call_ms = (time.perf_counter() - start) * 1e3
        timing.update(kiln_forward=0.0, kiln_backward=0.0)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)
    parts = {"loss": 0.0, "optimizer": 0.0}
    total = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            timing.update(kiln_forward=0.0, kiln_backward=0.0)
            parts.update(loss=0.0, optimizer=0.0)
            total = 0.0
        start = time.perf_counter()
        out = module(*inputs)
        t = time.perf_counter()
        loss = out if loss_kind == "none" else torch.nn.functional.cross_entropy(out, target)
        parts["loss"] += time.perf_counter() - t
        t = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        parts["optimizer"] += time.perf_counter() - t
        loss.backward()
        t = time.perf_counter()
        optimizer.step()
        parts["optimizer"] += time.perf_counter() - t
        total += time.perf_counter() - start
    result = {"step_ms": total / steps * 1e3, "first_call_ms": first_call_ms}
    result.update({k: v / steps * 1e3 for k, v in {**timing, **parts}.items()})
    print(json.dumps(result))


def measure(build_dir, model, side, policy, steps, warmup):
    env = policy_env(policy)
    env["PYTHONPATH"] = os.pathsep.join([str(build_dir / "python"), str(REPO / "bench")])
    proc = subprocess.run([sys.executable, __file__, "--worker", model, side, str(steps), str(warmup)],
                          capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{model} {side} ({policy}): {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", REPO / "build"), type=Path)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        model, side, steps, warmup = args.worker
        return worker(model, side, int(steps), int(warmup))
    build_dir = args.build_dir.resolve()
    print(f"== a training step with torch's AdamW: plain PyTorch and ORTModule ({THREADS} threads, each side at "
          f"its faster OpenMP wait policy, median of {args.rounds} rounds of {args.steps} steps) ==")
    print(f"{'model':12} {'PyTorch ms':>10} {'ORTModule ms':>12} {'speedup':>8} {'Kiln fwd':>9} {'Kiln bwd':>9} "
          f"{'torch':>7} {'bridge':>7} {'bridge %':>8} {'1st call s':>10}")
    for model in args.models.split(","):
        best = {}
        for side in ("torch", "ortmodule"):
            by_policy = {}
            for policy in WAIT_POLICIES:
                rounds = [measure(build_dir, model, side, policy, args.steps, args.warmup) for _ in range(args.rounds)]
                by_policy[policy] = {k: median([r[k] for r in rounds]) if rounds[0][k] is not None else None
                                     for k in rounds[0]}
            best[side] = min(by_policy.values(), key=lambda r: r["step_ms"])
        t, o = best["torch"], best["ortmodule"]
        torch_work = o["loss"] + o["optimizer"]
        bridge = o["step_ms"] - o["kiln_forward"] - o["kiln_backward"] - torch_work
        print(f"{model:12} {t['step_ms']:10.2f} {o['step_ms']:12.2f} {t['step_ms'] / o['step_ms']:7.2f}x "
              f"{o['kiln_forward']:9.2f} {o['kiln_backward']:9.2f} {torch_work:7.2f} {bridge:7.2f} "
              f"{100 * bridge / o['step_ms']:7.1f}% {o['first_call_ms'] / 1e3:10.2f}", flush=True)


if __name__ == "__main__":
    main()
