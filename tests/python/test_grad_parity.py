"""Gradient parity with PyTorch: a model and its loss exported from torch, differentiated by
`kiln grad`, run by `kiln run`; every parameter's gradient must match torch.autograd's:
||g_kiln - g_torch|| / ||g_torch|| <= 1e-4. The training graph must also load back and run with
identical results after a save/load round trip (that is what `kiln run` does with it)."""
import numpy as np
import pytest
import torch
from torch import nn
import torch.nn.functional as F

import torch_models
from kiln_cli import run_kiln

TOL = 1e-4


class WithLoss(nn.Module):
    """model(x) and a loss against y, as one exported graph whose output is the scalar loss."""

    def __init__(self, model, loss):
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, x, y):
        out = self.model(x)
        if self.loss == "mse":
            return ((out - y) ** 2).mean()  # torch 1.13 cannot export F.mse_loss
        return F.cross_entropy(out, y)


def export_with_loss(module, x, y, path):
    torch.onnx.export(module, (x, y), str(path), input_names=["x", "y"], output_names=["loss"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def kiln_gradients(tmp_path, module, x, y, loss_kind):
    model_path = tmp_path / "model.onnx"
    export_with_loss(module, x, y, model_path)
    train_path = tmp_path / "train.onnx"
    proc = run_kiln("grad", model_path, "--loss", "loss", "--out", train_path)
    assert proc.returncode == 0, proc.stderr
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    out = tmp_path / "out"
    proc = run_kiln("run", train_path, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
                    "--output-dir", out)
    assert proc.returncode == 0, proc.stderr
    return out


def torch_gradients(module, x, y):
    module.zero_grad()
    loss = module(x, y)
    loss.backward()
    return loss.item(), {name: p.grad.numpy() for name, p in module.named_parameters()}


def compare(out_dir, loss, grads):
    assert abs(float(np.load(out_dir / "loss.npy")) - loss) <= TOL * max(1.0, abs(loss))
    for name, g_torch in grads.items():
        g_kiln = np.load(out_dir / f"{name}_grad.npy")
        assert g_kiln.shape == g_torch.shape, name
        rel = np.linalg.norm(g_kiln - g_torch) / max(np.linalg.norm(g_torch), 1e-30)
        assert rel <= TOL, f"{name}: relative gradient error {rel:.2e}"


@pytest.mark.parametrize("loss_kind", ["mse"])
def test_mlp_gradients_match_torch(tmp_path, loss_kind):
    torch.manual_seed(0)
    module = WithLoss(torch_models.MLP(d_in=64, hidden=32, d_out=10), loss_kind)
    x = torch.randn(8, 64)
    y = torch.randn(8, 10) if loss_kind == "mse" else torch.randint(0, 10, (8,))
    out = kiln_gradients(tmp_path, module, x, y, loss_kind)
    compare(out, *torch_gradients(module, x, y))
