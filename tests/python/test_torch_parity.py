"""PyTorch parity: models exported with torch.onnx.export (opset 17, dynamic batch) and run with
`kiln run` must match PyTorch's forward within a max relative error of 1e-4
(max |kiln - torch| / max |torch|)."""
import numpy as np
import pytest
import torch
import torch_models
from kiln_cli import run_kiln

MAX_REL_ERR = 1e-4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (torch model, input shape, exported ONNX path); each model exported once."""
    out = {}
    folder = tmp_path_factory.mktemp("models")
    for name, (_, input_shape) in torch_models.MODELS.items():
        model = torch_models.build(name, seed=0)
        path = torch_models.export(model, input_shape, folder / f"{name}.onnx")
        out[name] = (model, input_shape, path)
    return out


def run_both(kiln, exported, name, batch, tmp_path):
    model, input_shape, path = exported[name]
    x = np.random.default_rng(1000 + batch).standard_normal((batch, *input_shape)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = run_kiln("run", path, "--input", f"input={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    got = np.load(tmp_path / "out" / "output.npy")
    # The command reports each output's name, dtype and shape.
    shape = ", ".join(str(d) for d in want.shape)
    assert f"output output float[{shape}]" in proc.stdout, proc.stdout
    return got, want


def max_rel_err(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", ["mlp", "lenet"])
def test_forward_matches_pytorch(kiln, exported, name, batch, tmp_path):
    got, want = run_both(kiln, exported, name, batch, tmp_path)
    assert got.dtype == np.float32
    assert got.shape == want.shape
    err = max_rel_err(got, want)
    assert err <= MAX_REL_ERR, f"{name} batch {batch}: max relative error {err:.3g}"


@pytest.mark.parametrize("batch", [1, 5])
def test_reshape_computed_from_shape(kiln, exported, batch, tmp_path):
    """x.view(x.size(0), -1) exports as Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    import onnx
    ops = {n.op_type for n in onnx.load(str(exported["viewnet"][2])).graph.node}
    assert {"Shape", "Gather", "Concat", "Reshape"} <= ops, ops
    got, want = run_both(kiln, exported, "viewnet", batch, tmp_path)
    assert got.shape == want.shape == (batch, 5)
    err = max_rel_err(got, want)
    assert err <= MAX_REL_ERR, f"viewnet batch {batch}: max relative error {err:.3g}"


def test_lenet_keeps_batchnorm_and_avgpool(exported):
    """The exported CNN must exercise BatchNormalization and AveragePool, not folded versions."""
    import onnx
    ops = [n.op_type for n in onnx.load(str(exported["lenet"][2])).graph.node]
    for op in ["Conv", "BatchNormalization", "MaxPool", "AveragePool", "Flatten", "Gemm", "Relu"]:
        assert op in ops, ops
