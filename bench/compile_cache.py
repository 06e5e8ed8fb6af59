#!/usr/bin/python3
"""IPUConfig's executable_cache_dir (issue 21): time to a trained first step of `kiln train
--max_steps 1` (load, build the artifacts -- the gradient graph, eval and optimizer models, initial
checkpoint --, plan, one step, a 16-example evaluation) without the cache, and with a warm one
(the artifacts linked from the cache instead of built). Models: the zoo's ResNet-18 (11.2 M
parameters, 28x28 inputs) and a BERT-mini-sized encoder (4 layers, d 256, seq 128). Median of
--rounds runs of each; wall seconds of the whole process.

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
}


def write_data(folder, model):
    rng = np.random.default_rng(0)
    path = folder / f"{model}.npz"
    if model == "resnet18":
        np.savez(path, input=rng.standard_normal((16, 1, 28, 28)).astype(np.float32), labels=rng.integers(0, 10, 16))
    else:
        ids = rng.integers(1, 8192, (16, 128))
        np.savez(path, input_ids=ids, attention_mask=np.ones_like(ids), token_type_ids=np.zeros_like(ids),
                 labels=rng.integers(0, 2, 16))
    return path


def run(kiln, model, data, out, cache):
    args = [str(kiln), "train", "--model", model, "--model-config", MODELS[model][0], "--train-data", str(data),
            "--eval-data", str(data), "--output_dir", str(out), "--max_steps", "1", "--save_strategy", "no",
            "--disable_tqdm", "true", "--per_device_train_batch_size", "8"]
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
            cache = scratch / f"cache-{model}"
            run(kiln, model, data, scratch / "fill", cache)  # fills the cache
            cold = statistics.median(run(kiln, model, data, scratch / f"c{i}", None) for i in range(a.rounds))
            warm = statistics.median(run(kiln, model, data, scratch / f"w{i}", cache) for i in range(a.rounds))
            print(f"{model:<10} {cold:9.2f} {warm:11.2f} {cold - warm:7.2f}")


if __name__ == "__main__":
    main()
