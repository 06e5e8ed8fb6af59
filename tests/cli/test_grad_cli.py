"""`kiln grad` and `kiln inspect --training`: the training graph on disk (checker-valid, with the
ai.kiln opset declared when used) and its planned memory."""
import json
import sys
from pathlib import Path

import onnx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch_models  # noqa: E402
from kiln_cli import assert_cli_error as assert_error  # noqa: E402
from kiln_cli import run_kiln


class MseLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return ((self.model(x) - y) ** 2).mean()  # torch 1.13 cannot export F.mse_loss


def mlp_with_loss(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "mlp_loss.onnx"
    torch.onnx.export(MseLoss(torch_models.MLP(d_in=32, hidden=16, d_out=4)), (torch.randn(2, 32), torch.randn(2, 4)),
                      str(path), input_names=["x", "y"], output_names=["loss"], opset_version=17,
                      do_constant_folding=False, dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return path




def test_grad_writes_a_checker_valid_training_graph(tmp_path):
    model = mlp_with_loss(tmp_path)
    out = tmp_path / "train.onnx"
    proc = run_kiln("grad", model, "--loss", "loss", "--frozen-params", "model.net.0.bias", "--out", out)
    assert proc.returncode == 0, proc.stderr
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    outputs = [o.name for o in m.graph.output]
    assert outputs[0] == "loss"
    assert "model.net.0.weight_grad" in outputs and "model.net.0.bias_grad" not in outputs
    assert len([o for o in outputs if o.endswith("_grad")]) == 5
    uses_kiln = any(n.domain == "ai.kiln" for n in m.graph.node)
    declared = {o.domain: o.version for o in m.opset_import}
    assert not uses_kiln or declared.get("ai.kiln") == 1


def test_grad_errors_name_what_is_wrong(tmp_path):
    model = mlp_with_loss(tmp_path)
    assert_error(run_kiln("grad", model, "--loss", "nope", "--out", tmp_path / "t.onnx"), "loss 'nope'")
    assert_error(run_kiln("grad", model, "--loss", "loss", "--requires-grad", "x", "--out", tmp_path / "t.onnx"),
                 "requires_grad names 'x', which is not an initializer of the model")
    assert_error(run_kiln("grad", model, "--loss", "loss", "--requires-grad", "model.net.0.bias",
                          "--frozen-params", "model.net.0.bias", "--out", tmp_path / "t.onnx"),
                 "listed both in requires_grad and in frozen_params")
    assert not (tmp_path / "t.onnx").exists()


def test_inspect_training_reports_planned_peak(tmp_path):
    model = mlp_with_loss(tmp_path)
    proc = run_kiln("inspect", model, "--training", "--loss", "loss", "--dim", "batch=64", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["training_plan"]
    assert "x=float[64, 32]" in plan["inputs"]
    # Reuse by liveness: the training graph's arena is smaller than one buffer per value, and it
    # holds more than the forward pass alone (activations kept for backward, gradients).
    assert 0 < plan["forward_peak_bytes"] < plan["training_peak_bytes"] < plan["training_unplanned_bytes"]
    assert plan["parameters_with_gradients"] == 6
    assert_error(run_kiln("inspect", model, "--training"), "--training needs --loss")
    assert_error(run_kiln("inspect", model, "--training", "--loss", "loss", "--dim", "batch"), "--dim 'batch'")


def test_inspect_training_plans_huge_batches_without_allocating_them(tmp_path):
    """Issue 16: `--dim batch=2^62` died with SIGFPE, and a large batch allocated the inputs and
    the arena the report is about (3.1 GB of memory for batch 200000)."""
    model = mlp_with_loss(tmp_path)
    batch = 1 << 30  # 2^30 x 32 floats: 128 GiB for the input alone
    proc = run_kiln("inspect", model, "--training", "--loss", "loss", "--dim", f"batch={batch}", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["training_plan"]
    assert f"x=float[{batch}, 32]" in plan["inputs"]
    assert plan["forward_peak_bytes"] >= batch * 4  # at least one float per example
    assert_error(run_kiln("inspect", model, "--training", "--loss", "loss", "--dim", f"batch={1 << 62}"),
                 "more elements than a 64-bit count holds")
    # oneDNN 2.6 divided by zero (SIGFPE) on a dimension of 2^31 or more: refused before it sees one.
    assert_error(run_kiln("inspect", model, "--training", "--loss", "loss", "--dim", f"batch={1 << 36}"),
                 "has a dimension of 2^31 or more")
