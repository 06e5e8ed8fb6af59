#!/usr/bin/python3
"""Text generation speed (issue 23): greedy decoding of --new tokens after a 16-token prompt, batch
1, from the bench's GPT-2-style decoder (4 layers, d 256, 4 heads, vocabulary 8192; the zoo's gpt2,
n_positions 1024), by Kiln with its KV cache (the zoo's decoder-with-past export), by Kiln rerunning
the whole sequence for every token (no cache), and by PyTorch with the same weights and its own
KV cache (tests/python/gpt2_with_past.py, torch.no_grad, a greedy loop) under both OpenMP wait
policies, the faster counting. Each measurement is a process of its own at 2 threads, after one
warm-up generation of 8 tokens; ms per new token, the median over --rounds. The cache's flatness:
ms per token at the longest run over the shortest (target: within 2x).

    /usr/bin/python3 bench/generation.py [--build-dir build] [--rounds 3] [--new 128,512]
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import THREADS, WAIT_POLICIES, median, policy_env

REPO = Path(__file__).resolve().parents[1]
CONFIG = {"vocab_size": 8192, "n_positions": 1024, "n_embd": 256, "n_layer": 4, "n_head": 4, "resid_pdrop": 0.0,
          "embd_pdrop": 0.0, "attn_pdrop": 0.0}
PROMPT = [17 + 31 * i % 8000 for i in range(16)]


def worker(args):
    """One measurement: prints {"ms_per_token": ...}."""
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch
    from gpt2_with_past import TorchGPT2
    torch.set_num_threads(THREADS)
    model = TorchGPT2(CONFIG).eval()
    if args.worker == "torch":
        def run(new):
            ids = torch.tensor([PROMPT])
            mask = torch.ones_like(ids)
            past = model.empty_past(1)
            positions = torch.arange(ids.shape[1])[None]
            with torch.no_grad():
                for _ in range(new):
                    logits, *past = model(ids, mask, positions, *past)
                    nxt = logits[:, -1].argmax(-1, keepdim=True)
                    mask = torch.cat([mask, torch.ones_like(nxt)], 1)
                    positions = positions[:, -1:] + 1
                    ids = nxt
    else:
        sys.path.insert(0, str(Path(args.build_dir).resolve() / "python"))
        from kiln.generation import CausalLM, generate
        from kiln.nn import zoo
        config = dict(CONFIG, with_past=args.worker == "kiln-cache")
        net = zoo.create_model("gpt2", **config)
        net.load_state_dict(model.to_zoo())
        net.eval()
        outputs = ["logits"] + ([f"present.{i}.{k}" for i in range(CONFIG["n_layer"]) for k in ("key", "value")]
                                if config["with_past"] else [])
        names = zoo.example_inputs("gpt2", **config)
        dtypes = ["int64"] * min(3, len(names)) + ["float32"] * (len(names) - 3)
        lm = CausalLM(net.to_onnx_bytes(names, zoo.dynamic_axes("gpt2", **config), input_dtypes=dtypes,
                                        output_names=outputs), THREADS)

        def run(new):
            generate(lm, [PROMPT], max_new_tokens=new, use_cache=config["with_past"])
    run(8)
    start = time.perf_counter()
    run(args.new_tokens)
    print(json.dumps({"ms_per_token": (time.perf_counter() - start) * 1000 / args.new_tokens}))


def measure(kind, new, build_dir, policy=None):
    cmd = [sys.executable, __file__, "--worker", kind, "--new-tokens", str(new), "--build-dir", str(build_dir)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=policy_env(policy) if policy else None)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else '?'}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms_per_token"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--new", default="128,512")
    p.add_argument("--worker", choices=["kiln-cache", "kiln-nocache", "torch"])
    p.add_argument("--new-tokens", type=int, default=128)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    lengths = [int(n) for n in args.new.split(",")]
    rows = {}
    for new in lengths:
        times = {"kiln-cache": [], "kiln-nocache": [], **{f"torch {p}": [] for p in WAIT_POLICIES}}
        for _ in range(args.rounds):
            times["kiln-cache"].append(measure("kiln-cache", new, args.build_dir))
            times["kiln-nocache"].append(measure("kiln-nocache", new, args.build_dir))
            for policy in WAIT_POLICIES:
                times[f"torch {policy}"].append(measure("torch", new, args.build_dir, policy))
        rows[new] = {k: median(v) for k, v in times.items()}
    print(f"== generation: ms per new token, greedy, batch 1, 16-token prompt, {THREADS} threads, "
          f"median of {args.rounds} ==")
    print(f"{'new':>5} {'Kiln cache':>11} {'Kiln no cache':>14} {'PyTorch default':>16} {'PyTorch PASSIVE':>16} "
          f"{'speedup':>8} {'tokens/s':>9}")
    for new, r in rows.items():
        torch_best = min(r[f"torch {p}"] for p in WAIT_POLICIES)
        print(f"{new:>5} {r['kiln-cache']:>11.2f} {r['kiln-nocache']:>14.2f} {r['torch default']:>16.2f} "
              f"{r['torch PASSIVE']:>16.2f} {torch_best / r['kiln-cache']:>7.2f}x {1000 / r['kiln-cache']:>9.1f}")
    first, last = rows[lengths[0]], rows[lengths[-1]]
    print(f"cache flatness: {last['kiln-cache'] / first['kiln-cache']:.2f}x the ms per token at {lengths[-1]} new "
          f"tokens as at {lengths[0]} (target <= 2); without the cache "
          f"{last['kiln-nocache'] / first['kiln-nocache']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
