#!/usr/bin/python3
"""IPUConfig's executable_cache_dir (issue 21): time to a trained first step of `kiln train
--max_steps 1` (load, build the artifacts -- the gradient graph, eval and optimizer models, initial
checkpoint --, plan, one step, a 16-example evaluation) without the cache, and with a warm one
(the artifacts linked from the cache instead of built). Models: the zoo's ResNet-18 (11.2 M
parameters, 28x28 inputs), a BERT-mini-sized encoder (4 layers, d 256, seq 128) and the bench's
GPT-2-style decoder (4 layers, d 256, vocabulary 8192, tied LM head, seq 128; exported from torch
with Hugging Face's causal-LM loss, trained with --loss none). Median of --rounds runs of each;
wall seconds of the whole process.

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


def run(kiln, model, data, out, cache):
    config = MODELS[model][0]
    chosen = ["--model", model, "--model-config", config] if config else \
        ["--model", str(data.parent / f"{model}.onnx"), "--loss", "none", "--metrics", "none"]
    args = [str(kiln), "train", *chosen, "--train-data", str(data), "--eval-data", str(data), "--output_dir",
            str(out), "--max_steps", "1", "--save_strategy", "no", "--disable_tqdm", "true",
            "--per_device_train_batch_size", "8"]
    if cache:
        args += ["--ipu_config_overrides", f"executable_cache_dir={cache}"]
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    kiln = Path(a.build_dir).resolve() / "bin" / "kiln"
    print("== executable_cache_dir: kiln train --max_steps 1, wall seconds (median) ==")
    print(f"{'model':<10} {'no cache':>9} {'warm cache':>11} {'saved':>7}")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for model in MODELS:
            data = write_data(scratch, model)
            if MODELS[model][0] is None:
                export_gpt2(scratch)
            cache = scratch / f"cache-{model}"
            run(kiln, model, data, scratch / "fill", cache)  # fills the cache
            cold = statistics.median(run(kiln, model, data, scratch / f"c{i}", None) for i in range(a.rounds))
            warm = statistics.median(run(kiln, model, data, scratch / f"w{i}", cache) for i in range(a.rounds))
            print(f"{model:<10} {cold:9.2f} {warm:11.2f} {cold - warm:7.2f}")


if __name__ == "__main__":
    main()
