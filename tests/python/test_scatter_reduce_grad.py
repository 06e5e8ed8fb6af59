"""The gradient of ScatterElements with reduction max / min (opset 18) against torch's
scatter_reduce(amax / amin, include_self=True) where data and updates tie at a position: the
gradient is split evenly among the tied values (the finite-difference checks of
tests/autodiff/scatter_rules_test.cpp cover the untied case). Exact equality of the values
(thirds in float32)."""
import numpy as np
import onnx
import pytest
import torch
from kiln_cli import run_kiln
from onnx import TensorProto, helper, numpy_helper


@pytest.mark.filterwarnings("ignore:scatter_reduce")
@pytest.mark.parametrize("reduction,torch_reduce", [("max", "amax"), ("min", "amin")])
def test_ties_share_the_gradient_as_torch(tmp_path, reduction, torch_reduce):
    data = np.array([[1.0, 5.0, 2.0], [4.0, 0.0, 4.0]], np.float32)
    upd = np.array([[5.0, 3.0, 5.0], [4.0, 4.0, 0.0]], np.float32)
    if reduction == "min":
        data, upd = -data, -upd
    idx = np.array([[1, 2, 1], [0, 0, 1]], np.int64)
    w = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], np.float32)
    nodes = [helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"], axis=1, reduction=reduction),
             helper.make_node("Mul", ["y", "w"], ["yw"]),
             helper.make_node("ReduceSum", ["yw"], ["loss"], keepdims=0)]
    inits = [numpy_helper.from_array(a, n) for a, n in ((data, "data"), (idx, "idx"), (upd, "upd"), (w, "w"))]
    graph = helper.make_graph(nodes, "tie", [], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "f.onnx")
    proc = run_kiln("grad", tmp_path / "f.onnx", "--loss", "loss", "--requires-grad", "data,upd", "--out",
                    tmp_path / "g.onnx")
    assert proc.returncode == 0, proc.stderr
    proc = run_kiln("run", tmp_path / "g.onnx", "--output-dir", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    d = torch.tensor(data, requires_grad=True)
    u = torch.tensor(upd, requires_grad=True)
    y = d.scatter_reduce(1, torch.tensor(idx), u, reduce=torch_reduce, include_self=True)
    (y * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(np.load(tmp_path / "out" / "data_grad.npy"), d.grad.numpy(), rtol=1e-6, atol=0)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "upd_grad.npy"), u.grad.numpy(), rtol=1e-6, atol=0)
