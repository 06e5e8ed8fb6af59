"""`kiln train`: the main job with its defaults (LeNet on Fashion-MNIST, accuracy >= 0.85, and with
--bf16 true within 1 accuracy point of that), a user's
ONNX model whose log_history matches a PyTorch loop with the same model, data and hyperparameters,
`kiln evaluate` / `kiln predict`, and clear errors."""
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from kiln_cli import assert_cli_error, kiln_path, run_kiln  # noqa: E402
from training_parity import read_safetensors  # noqa: E402


def test_kiln_train_defaults_train_lenet_on_fashion_mnist(tmp_path):
    proc = run_kiln("train", "--output_dir", tmp_path / "out", timeout=900)
    assert proc.returncode == 0, proc.stderr
    accuracy = float(re.search(r"^accuracy ([0-9.]+) on 10000 examples", proc.stdout, re.M).group(1))
    assert accuracy >= 0.85, proc.stdout
    out = tmp_path / "out"
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 7500 and state["max_steps"] == 7500 and state["epoch"] == 1
    assert (out / "checkpoint-7500" / "model.safetensors").exists() and (out / "model.onnx").exists()
    assert abs(json.loads((out / "eval_results.json").read_text())["eval_accuracy"] - accuracy) < 1e-4
    # The bar is plain lines when stderr is not a terminal.
    assert "step 7500/7500 (100%)" in proc.stderr

    ev = run_kiln("evaluate", "--model", "lenet", "--output_dir", tmp_path / "ev", "--resume_from_checkpoint",
                  out / "checkpoint-7500", timeout=300)
    assert ev.returncode == 0, ev.stderr
    evaluated = float(re.search(r"eval_accuracy\s+= ([0-9.]+)", ev.stdout).group(1))
    assert abs(evaluated - accuracy) < 1e-4, ev.stdout
    pr = run_kiln("predict", "--model", "lenet", "--output_dir", tmp_path / "pr", "--resume_from_checkpoint",
                  out / "checkpoint-7500", "--predictions-dir", tmp_path, timeout=300)
    assert pr.returncode == 0, pr.stderr
    assert np.load(tmp_path / "predictions.npy").shape == (10000, 10)

    # bf16 mixed precision (issue 19): the same epoch lands within 1 accuracy point of float32.
    bf16 = run_kiln("train", "--output_dir", tmp_path / "bf16", "--bf16", "true", "--save_strategy", "no",
                    "--disable_tqdm", "true", timeout=900)
    assert bf16.returncode == 0, bf16.stderr
    bf16_accuracy = float(re.search(r"^accuracy ([0-9.]+) on 10000 examples", bf16.stdout, re.M).group(1))
    assert abs(bf16_accuracy - accuracy) <= 0.01, (accuracy, bf16_accuracy)
    training = (tmp_path / "bf16" / "artifacts" / "training_model.onnx").read_bytes()
    assert b"kiln.mixed_precision" in training and b"/autocast_bf16" in training


class MLP(torch.nn.Module):
    """The built-in `mlp`: Flatten -> Linear(784, 128) -> ReLU -> Linear(128, 10)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_log_history_matches_a_pytorch_loop(tmp_path, smoothing):
    """Full-batch training (the batch is the dataset, so the sampler's order does not matter): the
    built-in mlp with HF's defaults (AdamW, weight decay 0, linear decay, max_grad_norm 1) against
    the same loop in PyTorch from the same initial weights."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, size=64).astype(np.int64)
    np.savez(tmp_path / "data.npz", input=x, labels=y)
    steps = 15
    proc = run_kiln("train", "--model", "mlp", "--train-data", tmp_path / "data.npz", "--eval-data",
                    tmp_path / "data.npz", "--output_dir", tmp_path / "out", "--per_device_train_batch_size", "64",
                    "--num_train_epochs", str(steps), "--logging_steps", "1", "--learning_rate", "1e-3",
                    "--save_strategy", "no", "--disable_tqdm", "true", "--label_smoothing_factor", str(smoothing),
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    kiln_losses = [e["loss"] for e in history if "loss" in e]
    kiln_lrs = [e["learning_rate"] for e in history if "loss" in e]
    assert len(kiln_losses) == steps

    initial, _ = read_safetensors(tmp_path / "out" / "artifacts" / "checkpoint")
    model = MLP()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(initial[name]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (steps - s) / steps))
    torch_losses, torch_lrs = [], []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y),
                                                 label_smoothing=smoothing)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        torch_losses.append(loss.item())
        torch_lrs.append(sched.get_last_lr()[0])
    np.testing.assert_allclose(kiln_losses, torch_losses, rtol=1e-3)
    np.testing.assert_allclose(kiln_lrs, torch_lrs, rtol=1e-9)
    final = read_safetensors(tmp_path / "out" / "model.safetensors")[0]
    for name, p in model.named_parameters():
        np.testing.assert_allclose(final[name], p.detach().numpy(), atol=1e-4, err_msg=name)


def test_kiln_train_errors(tmp_path):
    assert_cli_error(run_kiln("train", "--learning_rat", "0.1", "--output_dir", tmp_path), "--learning_rate")
    assert_cli_error(run_kiln("train", "--model", "resnet9", "--output_dir", tmp_path), "unknown built-in model")
    (tmp_path / "bad.csv").write_text("a,b,label\n1,2,0\n3,x,1\n")
    assert_cli_error(run_kiln("train", "--model", "mlp", "--train-data", tmp_path / "bad.csv", "--output_dir",
                              tmp_path / "o"), "bad.csv")
    assert_cli_error(run_kiln("train", "--output_dir", tmp_path / "o2", "--resume_from_checkpoint", "true"),
                     "no complete checkpoint")


def test_a_failing_final_evaluation_loses_no_training(tmp_path):
    """Eval data that does not fit the model fails the final evaluation with an error naming the
    input, after the trained model and the trainer state are saved (as HF's scripts save first)."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "train.npz", input=rng.standard_normal((16, 3, 16, 16)).astype(np.float32),
             labels=rng.integers(0, 10, 16))
    np.savez(tmp_path / "eval.npz", input=rng.standard_normal((8, 1, 16, 16)).astype(np.float32),
             labels=rng.integers(0, 10, 8))
    out = tmp_path / "out"
    proc = run_kiln("train", "--model", "lenet", "--model-config", '{"num_channels": 3, "image_size": 16}',
                    "--train-data", tmp_path / "train.npz", "--eval-data", tmp_path / "eval.npz", "--output_dir",
                    out, "--max_steps", "2", "--per_device_train_batch_size", "8", "--save_strategy", "no",
                    "--disable_tqdm", "true")
    assert_cli_error(proc, "input 'input' expects")
    assert (out / "model.onnx").exists() and (out / "model.safetensors").exists()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    assert json.loads((out / "train_results.json").read_text())["train_loss"] > 0


def test_evaluate_and_predict_take_true_and_create_the_predictions_folder(tmp_path):
    """--resume_from_checkpoint true (any case) names the last checkpoint in evaluate / predict too,
    and predict creates its --predictions-dir."""
    out = tmp_path / "out"
    tr = run_kiln("train", "--model", "mlp", "--max_steps", "20", "--save_steps", "10", "--output_dir", out,
                  "--disable_tqdm", "true")
    assert tr.returncode == 0, tr.stderr
    ev = run_kiln("evaluate", "--model", "mlp", "--output_dir", out, "--resume_from_checkpoint", "True")
    assert ev.returncode == 0, ev.stderr
    last = float(re.search(r"eval_accuracy\s+= ([0-9.]+)", ev.stdout).group(1))
    ev20 = run_kiln("evaluate", "--model", "mlp", "--output_dir", out, "--resume_from_checkpoint",
                    out / "checkpoint-20")
    assert float(re.search(r"eval_accuracy\s+= ([0-9.]+)", ev20.stdout).group(1)) == last
    pr = run_kiln("predict", "--model", "mlp", "--output_dir", out, "--resume_from_checkpoint", "true",
                  "--predictions-dir", tmp_path / "new" / "dir")
    assert pr.returncode == 0, pr.stderr
    assert np.load(tmp_path / "new" / "dir" / "predictions.npy").shape == (10000, 10)


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_a_checkpoint_and_exits_with_its_own_status(tmp_path, signo):
    """Issue 16, F9: pre-emption (SIGTERM) or ^C saves a checkpoint at the next step boundary,
    says so, exits with 128 + the signal's number and releases the output_dir lock."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", input=rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
             labels=rng.integers(0, 10, size=64).astype(np.int64))
    out = tmp_path / "out"
    args = [str(kiln_path()), "train", "--model", "mlp", "--train-data", tmp_path / "data.npz", "--eval-data",
            tmp_path / "data.npz", "--output_dir", out, "--per_device_train_batch_size", "4",
            "--num_train_epochs", "100000", "--save_strategy", "no", "--disable_tqdm", "true"]
    proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = out / ".kiln-train.lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and "pid" in lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the handlers are installed before train() takes the lock
    time.sleep(0.5)  # a few steps in
    proc.send_signal(signo)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signo, stderr
    match = re.search(r"kiln: stopped by .* at step (\d+): checkpoint saved in", stderr)
    assert match, stderr
    step = int(match.group(1))
    assert step > 0
    assert (out / f"checkpoint-{step}" / "trainer_state.json").exists()
    assert lock.read_text() == ""  # released
    state = json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text())
    assert state["global_step"] == step
