"""The gradients of ScatterElements' reductions where finite differences cannot look, against torch's
scatter_reduce(include_self=True): max / min (opset 18) where data and updates tie at a position
(the gradient split evenly among the tied values), and mul (opset 16) with zero factors (each
factor's gradient the product of the others, without dividing by a zero). The finite-difference
checks of tests/autodiff/scatter_rules_test.cpp cover the smooth cases. Within 1e-6 relative."""
import numpy as np
import onnx
import pytest
import torch
from kiln_cli import run_kiln
from onnx import TensorProto, helper, numpy_helper


def kiln_and_torch_grads(tmp_path, data, idx, upd, reduction, opset, torch_reduce):
    """d(sum(w * scatter(data, idx, upd)))/d(data, upd) from Kiln's gradient graph (`kiln grad`,
    `kiln run`) and from torch."""
    w = np.linspace(-1.0, 2.0, data.size, dtype=np.float32).reshape(data.shape)
    nodes = [helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"], axis=1, reduction=reduction),
             helper.make_node("Mul", ["y", "w"], ["yw"]),
             helper.make_node("ReduceSum", ["yw"], ["loss"], keepdims=0)]
    inits = [numpy_helper.from_array(a, n) for a, n in ((data, "data"), (idx, "idx"), (upd, "upd"), (w, "w"))]
    graph = helper.make_graph(nodes, "scatter", [], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), tmp_path / "f.onnx")
    proc = run_kiln("grad", tmp_path / "f.onnx", "--loss", "loss", "--requires-grad", "data,upd", "--out",
                    tmp_path / "g.onnx")
    assert proc.returncode == 0, proc.stderr
    proc = run_kiln("run", tmp_path / "g.onnx", "--output-dir", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    d = torch.tensor(data, requires_grad=True)
    u = torch.tensor(upd, requires_grad=True)
    y = d.scatter_reduce(1, torch.tensor(idx), u, reduce=torch_reduce, include_self=True)
    (y * torch.tensor(w)).sum().backward()
    for name, want in (("data_grad", d.grad), ("upd_grad", u.grad)):
        np.testing.assert_allclose(np.load(tmp_path / "out" / f"{name}.npy"), want.numpy(), rtol=1e-6, atol=0,
                                   err_msg=name)


@pytest.mark.filterwarnings("ignore:scatter_reduce")
@pytest.mark.parametrize("reduction,torch_reduce", [("max", "amax"), ("min", "amin")])
def test_ties_share_the_gradient_as_torch(tmp_path, reduction, torch_reduce):
    data = np.array([[1.0, 5.0, 2.0], [4.0, 0.0, 4.0]], np.float32)
    upd = np.array([[5.0, 3.0, 5.0], [4.0, 4.0, 0.0]], np.float32)
    if reduction == "min":
        data, upd = -data, -upd
    idx = np.array([[1, 2, 1], [0, 0, 1]], np.int64)
    kiln_and_torch_grads(tmp_path, data, idx, upd, reduction, 18, torch_reduce)


@pytest.mark.filterwarnings("ignore:scatter_reduce")
def test_products_with_zeros_as_torch(tmp_path):
    """A position with one zero factor (in data, or in an update) and one with two."""
    data = np.array([[0.0, 2.0, 3.0, 1.5], [1.0, 0.0, 2.0, 0.5]], np.float32)
    upd = np.array([[4.0, 0.0, 2.0], [0.0, 3.0, 5.0]], np.float32)
    idx = np.array([[0, 1, 1], [1, 1, 3]], np.int64)
    kiln_and_torch_grads(tmp_path, data, idx, upd, "mul", 16, "prod")
