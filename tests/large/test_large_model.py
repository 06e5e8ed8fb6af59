"""A model whose parameters pass protobuf's 2 GiB limit (issue 19, item 5), end to end through the
Python on-device API: an embedding table of 2.18 GB (4194304 x 130 float32) stored as external
data beside the forward model, then

- generate_artifacts given the model's path (its external data read from its folder);
- one SGD step: the loss, the updated embedding rows and head weights against float64 NumPy;
  rows no id touched stay as they were;
- the checkpoint saved and loaded back bit for bit;
- export_model_for_inferencing writes the inference model with its weights in "<file>.data", and
  Kiln and ONNX Runtime 1.30 both run it to NumPy's logits.

It needs about 12 GB of memory and a minute or two, so it is not part of `make test`:
`make test-large` runs it (CI runs it when time allows).
"""
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from kiln_cli import REPO  # noqa: E402
from kiln_package import import_kiln  # noqa: E402

import_kiln()
import kiln.backend  # noqa: E402
from kiln.training import artifacts  # noqa: E402
from kiln.training.api import CheckpointState, Module, Optimizer  # noqa: E402

V, D, C, B = 4_194_304, 130, 5, 8
LR = 0.5


def embedding_values():
    rows = np.arange(V, dtype=np.float32)[:, None]
    cols = np.arange(D, dtype=np.float32)[None, :]
    return (np.sin(rows * 0.001 + cols * 0.1) * 0.05).astype(np.float32)


def write_forward(folder: Path) -> Path:
    """ids [B] -> Gather(E) -> MatMul(W) + b -> logits [B, C]; E in folder/model.onnx.data."""
    E = embedding_values()
    assert E.nbytes > 2**31
    data = folder / "model.onnx.data"
    E.tofile(data)
    del E
    e = TensorProto()
    e.name = "embedding"
    e.data_type = TensorProto.FLOAT
    e.dims.extend([V, D])
    e.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "model.onnx.data"), ("offset", "0"), ("length", str(V * D * 4))):
        entry = e.external_data.add()
        entry.key, entry.value = key, value
    rng = np.random.default_rng(0)
    w = helper.make_tensor("head.weight", TensorProto.FLOAT, [D, C],
                           rng.standard_normal((D, C)).astype(np.float32).ravel())
    b = helper.make_tensor("head.bias", TensorProto.FLOAT, [C], rng.standard_normal(C).astype(np.float32))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["embedding", "ids"], ["h"]),
         helper.make_node("MatMul", ["h", "head.weight"], ["z"]),
         helper.make_node("Add", ["z", "head.bias"], ["logits"])],
        "big_embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", C])],
        [e, w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def softmax_ce(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(labels)), labels]).mean()
    grad = p.copy()
    grad[np.arange(len(labels)), labels] -= 1
    return loss, grad / len(labels)


def test_a_model_over_2_gib_trains_checkpoints_and_exports(tmp_path):
    path = write_forward(tmp_path)
    art = tmp_path / "artifacts"
    artifacts.generate_artifacts(str(path), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.SGD, artifact_directory=str(art),
                                 additional_output_names=["logits"])
    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = Module(str(art / "training_model.onnx"), state, str(art / "eval_model.onnx"))
    optimizer = Optimizer(str(art / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)

    ids = np.array([0, 7, 4_194_303, 2_000_000, 7, 123_456, 3_333_333, 1], dtype=np.int64)
    labels = np.array([0, 1, 2, 3, 4, 0, 1, 2], dtype=np.int64)
    E_rows = embedding_values()[ids].astype(np.float64)  # recomputed: the table is not kept in memory
    W = state.parameters["head.weight"].data.astype(np.float64)
    bias = state.parameters["head.bias"].data.astype(np.float64)
    logits = E_rows @ W + bias
    want_loss, dlogits = softmax_ce(logits, labels)

    loss, got_logits = module(ids, labels)
    assert abs(float(loss) - want_loss) <= 1e-5 * abs(want_loss)
    np.testing.assert_allclose(got_logits, logits, rtol=1e-5, atol=1e-5)
    optimizer.step()

    dW = E_rows.T @ dlogits
    dE = dlogits @ W.T
    new_rows = E_rows.copy()
    for row in np.unique(ids):  # a repeated id's row gets the sum of its gradients
        same = ids == row
        new_rows[same] = E_rows[same][0] - LR * dE[same].sum(axis=0)
    E_after = state.parameters["embedding"].data
    assert E_after.shape == (V, D)
    np.testing.assert_allclose(E_after[ids], new_rows, rtol=1e-5, atol=1e-6)
    untouched = np.array([1_000, 4_194_302, 2_500_000])
    np.testing.assert_array_equal(E_after[untouched], embedding_values()[untouched])
    np.testing.assert_allclose(state.parameters["head.weight"].data, W - LR * dW, rtol=1e-5, atol=1e-6)

    # The checkpoint over 2 GiB, saved and loaded back.
    CheckpointState.save_checkpoint(state, str(tmp_path / "saved"))
    again = CheckpointState.load_checkpoint(str(tmp_path / "saved"))
    assert np.array_equal(again.parameters["embedding"].data, E_after)
    del again

    # The inference export keeps its weights beside it, and runs in Kiln and in ONNX Runtime.
    exported = tmp_path / "export" / "inference.onnx"
    exported.parent.mkdir()
    module.export_model_for_inferencing(str(exported), ["logits"])
    assert (exported.parent / "inference.onnx.data").stat().st_size >= V * D * 4
    assert exported.stat().st_size < 2**20
    proto = onnx.load(str(exported), load_external_data=False)
    external = [t.name for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert "embedding" in external
    want_logits = new_rows @ (W - LR * dW) + (bias - LR * dlogits.sum(axis=0))
    (from_kiln,) = kiln.backend.prepare(str(exported)).run({"ids": ids})
    np.testing.assert_allclose(from_kiln, want_logits, rtol=1e-4, atol=1e-5)
    node = shutil.which("node")
    assert node, "node is not installed: run scripts/setup.sh (it installs Node.js and onnxruntime-node)"
    np.save(tmp_path / "ids.npy", ids)
    proc = subprocess.run([node, str(REPO / "tests" / "python" / "ort_run.js"), str(exported), str(tmp_path / "ort"),
                           f"ids={tmp_path / 'ids.npy'}"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "ort" / "out_0.npy"), from_kiln, rtol=1e-5, atol=1e-6)
