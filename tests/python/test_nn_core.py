"""Parity of kiln::nn's core (Tracer, Module::state_dict, operator() with training-mode BatchNorm)
with torch.nn (python3-torch 1.13), and the exported files against onnx.checker (full check).

`kiln-nn-export core-files DIR` (tools/nn_export/core_files.cpp) builds
Linear(4, 5) -> BatchNorm1d(5) -> ReLU -> Linear(5, 3) from test-only modules written against
module.h, saves its initial state_dict, runs it twice in training mode and once in eval mode, and
exports it in both modes. Here the same torch model loads the initial weights and repeats the runs.

Tolerance: max |kiln - torch| <= 1e-5 * max(1, max |torch|) (float32 on both sides, O(1) values);
num_batches_tracked exactly.
"""
import json
import struct

import numpy as np
import onnx
import torch
from kiln_cli import run_nn_export
from torch import nn
from training_parity import read_safetensors

TOL = 1e-5


def run_export(out_dir):
    run_nn_export("core-files", out_dir)


def keys_in_file_order(path):
    """safetensors keys in the order of their data (the order Kiln wrote them: the state_dict's)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: header[k]["data_offsets"][0])


def close(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want).max()
    assert err <= TOL * max(1.0, np.abs(want).max()), f"max error {err}"


def test_nn_core_matches_torch(tmp_path):
    run_export(tmp_path)
    init, _ = read_safetensors(tmp_path / "weights_init.safetensors")
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    # Same keys, same order as torch's state_dict.
    assert keys_in_file_order(tmp_path / "weights_init.safetensors") == list(model.state_dict().keys())
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in init.items()})

    x = torch.from_numpy(np.load(tmp_path / "x.npy"))
    model.train()
    with torch.no_grad():
        model(x)
        y_train = model(x)
    close(np.load(tmp_path / "y_train.npy"), y_train.numpy())
    after, _ = read_safetensors(tmp_path / "state_after.safetensors")
    for key, value in model.state_dict().items():
        if key.endswith("num_batches_tracked"):
            assert int(np.array(after[key])) == int(value) == 2
        else:
            close(after[key], value.numpy())

    model.eval()
    with torch.no_grad():
        close(np.load(tmp_path / "y_eval.npy"), model(x).numpy())

    for name in ("train.onnx", "eval.onnx"):
        proto = onnx.load(str(tmp_path / name))
        onnx.checker.check_model(proto, full_check=True)
        inits = [t.name for t in proto.graph.initializer]
        assert set(inits) <= set(init.keys()), inits
        assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    train = onnx.load(str(tmp_path / "train.onnx"))
    bn = [n for n in train.graph.node if n.op_type == "BatchNormalization"][0]
    assert len(bn.output) == 3
    assert any(a.name == "training_mode" and a.i == 1 for a in bn.attribute)
    assert train.opset_import[0].version == 17 and train.ir_version == 8
