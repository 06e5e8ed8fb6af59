"""`kiln train --model resnet18 --model-config JSON`: a model zoo entry with config overrides trains on
Fashion-MNIST images (512 of them, 28x28, one channel) for 20 steps and its logged loss falls; bad
--model-config values are clear errors."""
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from kiln_cli import assert_cli_error, run_kiln  # noqa: E402

FASHION = Path("/usr/share/datasets/fashion-mnist")
CONFIG = '{"num_channels": 1, "num_labels": 10}'


def fashion_npz(path, n):
    """The first n training images, normalised as `kiln train` normalises fashion-mnist:train."""
    assert (FASHION / "train-images-idx3-ubyte.gz").exists(), f"{FASHION} is missing: run scripts/setup.sh"
    images = np.frombuffer(gzip.open(FASHION / "train-images-idx3-ubyte.gz").read()[16:], dtype=np.uint8)
    labels = np.frombuffer(gzip.open(FASHION / "train-labels-idx1-ubyte.gz").read()[8:], dtype=np.uint8)
    x = (images[:n * 784].reshape(n, 1, 28, 28).astype(np.float32) / 255.0 - 0.2860) / 0.3530
    np.savez(path, input=x, labels=labels[:n].astype(np.int64))


def test_kiln_train_resnet18_with_a_model_config(tmp_path):
    fashion_npz(tmp_path / "data.npz", 512)
    proc = run_kiln("train", "--model", "resnet18", "--model-config", CONFIG, "--train-data", tmp_path / "data.npz",
                    "--eval-data", tmp_path / "data.npz", "--output_dir", tmp_path / "out", "--max_steps", "20",
                    "--per_device_train_batch_size", "32", "--logging_steps", "5", "--save_strategy", "no",
                    "--disable_tqdm", "true", timeout=600)
    assert proc.returncode == 0, proc.stderr
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    losses = [e["loss"] for e in history if "loss" in e]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    assert "accuracy" in proc.stdout and "on 512 examples" in proc.stdout


def test_model_config_errors(tmp_path):
    assert_cli_error(run_kiln("train", "--model", "resnet18", "--model-config", '{"num_label": 10}', "--output_dir",
                              tmp_path), "'resnet18' has no config key 'num_label'")
    assert_cli_error(run_kiln("train", "--model", "resnet18", "--model-config", "[1]", "--output_dir", tmp_path),
                     "--model-config must be a JSON object")
    assert_cli_error(run_kiln("train", "--model", "resnet18", "--model-config", "{num", "--output_dir", tmp_path),
                     "--model-config '{num' is not valid JSON")
    assert_cli_error(run_kiln("train", "--model", "resnet18", "--model-config", '{"layer_type": "wide"}',
                              "--output_dir", tmp_path), 'layer_type must be "basic" or "bottleneck"')
    (tmp_path / "m.onnx").write_bytes(b"")
    assert_cli_error(run_kiln("train", "--model", tmp_path / "m.onnx", "--model-config", CONFIG, "--output_dir",
                              tmp_path), "--model-config applies to built-in models")
