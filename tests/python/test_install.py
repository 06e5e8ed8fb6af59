"""`cmake --install BUILD --prefix P` gives a working kiln command and Python package, found through
P alone (no build tree on any path)."""
import os
import subprocess
import sys

import numpy as np
import torch
import torch_models
from kiln_cli import build_dir


def test_install_into_a_prefix_gives_a_working_package(tmp_path):
    prefix = tmp_path / "prefix"
    proc = subprocess.run(["cmake", "--install", str(build_dir()), "--prefix", str(prefix)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = prefix / "lib" / version / "dist-packages"
    assert (site / "kiln" / "training" / "api" / "module.py").exists()

    torch.manual_seed(0)
    torch.onnx.export(torch_models.MLP(), (torch.randn(2, 784),), str(tmp_path / "mlp.onnx"), input_names=["x"],
                      output_names=["logits"], opset_version=17)
    script = f"""
import numpy as np
import kiln
from kiln.training import artifacts
from kiln.training.api import CheckpointState, Module, Optimizer
assert kiln.__file__.startswith({str(site)!r}), kiln.__file__
artifacts.generate_artifacts({str(tmp_path / "mlp.onnx")!r}, loss=artifacts.LossType.CrossEntropyLoss,
                             optimizer=artifacts.OptimType.AdamW, artifact_directory={str(tmp_path / "art")!r})
state = CheckpointState.load_checkpoint({str(tmp_path / "art" / "checkpoint")!r})
module = Module({str(tmp_path / "art" / "training_model.onnx")!r}, state)
optimizer = Optimizer({str(tmp_path / "art" / "optimizer_model.onnx")!r}, module)
loss = module(np.zeros((2, 784), np.float32), np.zeros(2, np.int64))
optimizer.step()
print(float(loss))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(site)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert np.isfinite(float(run.stdout.strip()))
    cli = subprocess.run([str(prefix / "bin" / "kiln"), "--version"], capture_output=True, text=True, env=env)
    assert cli.returncode == 0 and cli.stdout.startswith("kiln "), cli.stderr
