#!/usr/bin/python3
"""IPUConfig's executable_cache_dir (issue 21): the artifacts cache and the plan cache.

Table 1, time to a trained first step: wall seconds of `kiln train --max_steps 1` (load, build the
artifacts -- the gradient graph, eval and optimizer models, initial checkpoint --, plan, one step,
a 16-example evaluation) without the cache, and with a warm one (the artifacts linked from the
cache instead of built, every graph's fused form and memory plan loaded instead of made).

Table 2, planning alone: `kiln train --compile_only`'s compile_seconds (the training, eval and
optimizer models planned for their batch shapes: fusion, shape inference, kernel preparation --
oneDNN's primitives, JIT code it cannot keep on CPU --, memory planning) with no cache, with an
empty cache (planned, then stored) and a warm one (loaded).

Table 3, the plan cache alone, in one process: kiln._kiln.Session(training_model.onnx) built and
planned for a training step's signature (its gradients bound) without and with a warm plan cache,
oneDNN's primitive cache warm in both: construction (ONNX parse; fusion and the layout pass, or the
cached graph read, checked and parsed) and planning (shape inference, kernel preparation, the
memory plan placed or loaded and checked), ms.

Models: the zoo's ResNet-18 (11.2 M parameters, 28x28 inputs), a BERT-mini-sized encoder (4 layers,
d 256, seq 128) and the bench's GPT-2-style decoder (4 layers, d 256, vocabulary 8192, tied LM
head, seq 128; exported from torch with Hugging Face's causal-LM loss, trained with --loss none).
Median of --rounds runs of each.

    /usr/bin/python3 bench/compile_cache.py [--build-dir build] [--rounds 3]
"""
import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "resnet18": ('{"num_channels": 1, "num_labels": 10}', "input"),
    "bert": ('{"vocab_size": 8192, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, '
             '"intermediate_size": 1024, "max_position_embeddings": 128, "num_labels": 2}', "input_ids"),
    "gpt2": (None, "input_ids"),  # an ONNX file: export_gpt2
}


def export_gpt2(folder):
    """The bench's GPT-2-style model with HF's causal-LM loss (outputs loss, logits) as ONNX."""
    import sys
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import torch
    import torch.nn.functional as F
    from zoo_models import GPT2

    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.gpt = GPT2(vocab=8192, max_len=128, dim=256, heads=4, layers=4)

        def forward(self, input_ids, labels):
            logits = self.gpt(input_ids)
            shift = logits[..., :-1, :].contiguous()
            return F.cross_entropy(shift.view(-1, shift.size(-1)), labels[..., 1:].contiguous().view(-1)), logits

    path = folder / "gpt2.onnx"
    ids = torch.zeros(2, 128, dtype=torch.int64)
    torch.onnx.export(CausalLM(), (ids, ids), path, input_names=["input_ids", "labels"],
                      output_names=["loss", "logits"], opset_version=17, do_constant_folding=False,
                      dynamic_axes={"input_ids": {0: "batch"}, "labels": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING)
    return path


def write_data(folder, model):
    rng = np.random.default_rng(0)
    path = folder / f"{model}.npz"
    if model == "resnet18":
        np.savez(path, input=rng.standard_normal((16, 1, 28, 28)).astype(np.float32), labels=rng.integers(0, 10, 16))
    elif model == "gpt2":
        ids = rng.integers(0, 8192, (16, 128))
        np.savez(path, input_ids=ids, labels=ids)
    else:
        ids = rng.integers(1, 8192, (16, 128))
        np.savez(path, input_ids=ids, attention_mask=np.ones_like(ids), token_type_ids=np.zeros_like(ids),
                 labels=rng.integers(0, 2, 16))
    return path


def run(kiln, model, data, out, cache, compile_only=False):
    """Wall seconds of the run, and its compile_seconds with compile_only."""
    config = MODELS[model][0]
    chosen = ["--model", model, "--model-config", config] if config else \
        ["--model", str(data.parent / f"{model}.onnx"), "--loss", "none", "--metrics", "none"]
    args = [str(kiln), "train", *chosen, "--train-data", str(data), "--eval-data", str(data), "--output_dir",
            str(out), "--max_steps", "1", "--save_strategy", "no", "--disable_tqdm", "true",
            "--per_device_train_batch_size", "8", "--eval_strategy", "steps", "--eval_steps", "1"]
    if cache:
        args += ["--ipu_config_overrides", f"executable_cache_dir={cache}"]
    if compile_only:
        args += ["--compile_only"]
    start = time.perf_counter()
    proc = subprocess.run(args, check=True, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if not compile_only:
        return wall
    line = next(x for x in proc.stdout.splitlines() + proc.stderr.splitlines() if "compile_seconds" in x)
    return float(line.split("=")[1])


def session_times(artifacts, rounds):
    """(construct, plan) ms medians for the training model without and with a warm plan cache."""
    import os
    import sys

    import onnx
    sys.path.insert(0, str(REPO / "tests" / "python"))
    os.environ.setdefault("KILN_BUILD_DIR", str(REPO / "build"))
    from kiln_package import import_kiln
    import_kiln()
    from kiln import _kiln
    path = str(artifacts / "training_model.onnx")
    model = onnx.load(path, load_external_data=False)
    shapes = {i.name: [d.dim_value if d.dim_value > 0 else 8 for d in i.type.tensor_type.shape.dim]
              for i in model.graph.input}
    bound = {o.name for o in model.graph.output if o.name.endswith("_grad")}
    cache = str(artifacts.parent / "session-plans")

    def once(plan_cache_dir):
        start = time.perf_counter()
        session = _kiln.Session(path, check=False, plan_cache_dir=plan_cache_dir)
        built = time.perf_counter()
        stats = session.plan(shapes, bound)
        assert stats["graph_from_cache"] == stats["memory_plan_from_cache"] == bool(plan_cache_dir and warm)
        return 1e3 * (built - start), 1e3 * (time.perf_counter() - built)

    warm = False
    once(cache)  # fills the cache; oneDNN's primitives made once in this process
    warm = True
    runs = {name: [once(c) for _ in range(max(rounds, 5))] for name, c in (("none", ""), ("warm", cache))}
    return {name: tuple(statistics.median(r[k] for r in rs) for k in (0, 1)) for name, rs in runs.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    kiln = Path(a.build_dir).resolve() / "bin" / "kiln"
    first_step, planning, sessions = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for model in MODELS:
            data = write_data(scratch, model)
            if MODELS[model][0] is None:
                export_gpt2(scratch)
            cache = scratch / f"cache-{model}"
            run(kiln, model, data, scratch / "fill", cache)  # fills the cache
            sessions.append((model, session_times(scratch / "fill" / "artifacts", a.rounds)))
            rounds = range(a.rounds)
            cold = statistics.median(run(kiln, model, data, scratch / f"c{i}", None) for i in rounds)
            warm = statistics.median(run(kiln, model, data, scratch / f"w{i}", cache) for i in rounds)
            first_step.append((model, cold, warm))
            none = statistics.median(run(kiln, model, data, scratch / f"pn{i}", None, True) for i in rounds)
            empty = statistics.median(
                run(kiln, model, data, scratch / f"pe{i}", scratch / f"empty-{model}-{i}", True) for i in rounds)
            loaded = statistics.median(run(kiln, model, data, scratch / f"pw{i}", cache, True) for i in rounds)
            planning.append((model, none, empty, loaded))
    print("== executable_cache_dir: kiln train --max_steps 1, wall seconds (median) ==")
    print(f"{'model':<10} {'no cache':>9} {'warm cache':>11} {'saved':>7}")
    for model, cold, warm in first_step:
        print(f"{model:<10} {cold:9.2f} {warm:11.2f} {cold - warm:7.2f}")
    print("== plan cache: kiln train --compile_only, compile_seconds of the three graphs, ms (median) ==")
    print(f"{'model':<10} {'no cache':>9} {'empty (stores)':>15} {'warm (loads)':>13} {'saved':>7}")
    for model, none, empty, loaded in planning:
        print(f"{model:<10} {1e3 * none:9.1f} {1e3 * empty:15.1f} {1e3 * loaded:13.1f} {1e3 * (none - loaded):7.1f}")
    print("== plan cache: one process, the training model's Session built and planned, ms (median) ==")
    print(f"{'model':<10} {'construct':>10} {'cached':>7} {'plan':>6} {'cached':>7} {'saved':>6}")
    for model, t in sessions:
        (nc, np_), (wc, wp) = t["none"], t["warm"]
        print(f"{model:<10} {nc:10.2f} {wc:7.2f} {np_:6.2f} {wp:7.2f} {nc + np_ - wc - wp:6.2f}")


if __name__ == "__main__":
    main()
