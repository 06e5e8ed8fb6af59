"""torch.nn parity of kiln::nn's layers (include/kiln/nn/layers.h).

Each case builds the same layer in torch (python3-torch 1.13) and in Kiln (tools/nn_export builds it
from a JSON spec with torch's class and argument names), copies torch's state_dict into Kiln's module
through an .npz file (load_state_dict, strict), and checks:
  - repr(module) equals torch's, character for character (extra_repr, parameter-free modules);
  - the state_dict keys and shapes equal torch's;
  - the exported ONNX passes onnx.checker.check_model(full_check=True);
  - `kiln run` of the exported file, and Module::operator() (Kiln running the traced module), give
    torch's output: max |kiln - torch| / max |torch| <= 1e-5 (RTOL), with the batch dim (and
    others where a case says so) exported as dynamic and run at another size than traced;
  - BatchNorm in train mode: batch statistics, and the running statistics after one call equal
    torch's (RTOL) with num_batches_tracked 1; Dropout: the mask fraction and the 1/(1-p) scale.
"""
import json
import struct
import subprocess

import numpy as np
import onnx
import pytest
import torch
from kiln_cli import build_dir, run_kiln

RTOL = 1e-5  # max |kiln - torch| / max |torch|


def nn_export(*args):
    exe = build_dir() / "bin" / "kiln-nn-export"
    assert exe.exists(), f"{exe} does not exist: build the kiln_nn_export target or set KILN_BUILD_DIR"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120)


def read_safetensors(path):
    """The tensors of a safetensors file as numpy arrays (the format is 8 bytes + JSON + data)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[key] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def rel_err(got, want):
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want)) / max(np.max(np.abs(want)), 1e-12))


def randomise(module, gen):
    """Non-trivial values for parameters and buffers initialised to constants (norm layers)."""
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point():
                continue
            if name.endswith("running_var") or (name.endswith("weight") and t.dim() == 1):
                t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
            elif name.endswith("running_mean") or name.endswith("bias"):
                t.copy_(torch.randn(t.shape, generator=gen) * 0.5)


class Case:
    def __init__(self, type_, args, shape, dtype="float", dynamic=(0,), modes=("eval",), tag=""):
        self.type, self.args, self.shape, self.dtype = type_, args, tuple(shape), dtype
        self.dynamic, self.modes, self.tag = dynamic, modes, tag

    def id(self):
        return f"{self.type}{self.tag}"


BOTH = ("eval", "train")
CASES = [
    Case("Linear", {"in_features": 4, "out_features": 3}, (2, 4)),
    Case("Linear", {"in_features": 4, "out_features": 3, "bias": False}, (2, 4), tag="-nobias"),
    Case("Linear", {"in_features": 4, "out_features": 3}, (2, 5, 4), dynamic=(0, 1), tag="-rank3"),
    Case("Linear", {"in_features": 4, "out_features": 3}, (4,), dynamic=(), tag="-rank1"),
    Case("Conv1d", {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "stride": 2, "padding": 1}, (2, 3, 11)),
    Case("Conv1d", {"in_channels": 3, "out_channels": 4, "kernel_size": 3}, (3, 10), dynamic=(), tag="-unbatched"),
    Case("Conv2d", {"in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1}, (2, 3, 8, 8)),
    Case("Conv2d", {"in_channels": 4, "out_channels": 6, "kernel_size": [3, 5], "stride": [2, 1], "padding": [1, 2],
                    "dilation": [2, 1], "groups": 2, "bias": False}, (2, 4, 9, 7), tag="-grouped"),
    Case("Conv2d", {"in_channels": 3, "out_channels": 5, "kernel_size": 4, "padding": "same", "dilation": 2},
         (2, 3, 9, 9), dynamic=(0, 2, 3), tag="-same"),
    Case("Conv2d", {"in_channels": 3, "out_channels": 5, "kernel_size": 3, "padding": "valid"}, (1, 3, 6, 6),
         tag="-valid"),
    Case("ConvTranspose2d", {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "stride": 2, "padding": 1,
                             "output_padding": 1}, (2, 4, 5, 5)),
    Case("ConvTranspose2d", {"in_channels": 4, "out_channels": 6, "kernel_size": [3, 2], "groups": 2, "dilation": 2,
                             "bias": False}, (2, 4, 5, 6), tag="-grouped"),
    Case("BatchNorm1d", {"num_features": 5}, (6, 5), modes=BOTH),
    Case("BatchNorm1d", {"num_features": 5, "momentum": 0.3}, (4, 5, 7), modes=BOTH, tag="-3d"),
    Case("BatchNorm2d", {"num_features": 3}, (4, 3, 5, 5), modes=BOTH),
    Case("BatchNorm2d", {"num_features": 3, "affine": False, "eps": 1e-3}, (4, 3, 5, 5), modes=BOTH, tag="-noaffine"),
    Case("BatchNorm2d", {"num_features": 3, "track_running_stats": False}, (4, 3, 5, 5), modes=BOTH, tag="-nostats"),
    Case("LayerNorm", {"normalized_shape": [6]}, (2, 3, 6), dynamic=(0, 1)),
    Case("LayerNorm", {"normalized_shape": [3, 6], "eps": 1e-3}, (2, 3, 6), tag="-2d"),
    Case("LayerNorm", {"normalized_shape": [6], "elementwise_affine": False}, (2, 6), tag="-noaffine"),
    Case("GroupNorm", {"num_groups": 2, "num_channels": 6}, (2, 6, 4, 4)),
    Case("GroupNorm", {"num_groups": 3, "num_channels": 6, "affine": False}, (2, 6, 5), dynamic=(0, 2),
         tag="-noaffine"),
    Case("GroupNorm", {"num_groups": 1, "num_channels": 4, "eps": 1e-3}, (3, 4), tag="-2d"),
    Case("Embedding", {"num_embeddings": 10, "embedding_dim": 4}, (2, 5), dtype="int64", dynamic=(0, 1)),
    Case("Embedding", {"num_embeddings": 10, "embedding_dim": 4, "padding_idx": -1}, (2, 5), dtype="int64", tag="-pad"),
    Case("ReLU", {}, (2, 3, 4)),
    Case("GELU", {}, (2, 3, 4)),
    Case("GELU", {"approximate": "tanh"}, (2, 3, 4), tag="-tanh"),
    Case("SiLU", {}, (2, 3, 4)),
    Case("Tanh", {}, (2, 3, 4)),
    Case("Sigmoid", {}, (2, 3, 4)),
    Case("Dropout", {"p": 0.3}, (2, 3, 4), tag="-eval"),
    Case("MaxPool2d", {"kernel_size": 2}, (2, 3, 8, 8)),
    Case("MaxPool2d", {"kernel_size": 3, "stride": 2, "padding": 1}, (2, 3, 9, 9), tag="-padded"),
    Case("MaxPool2d", {"kernel_size": [3, 2], "stride": 2, "ceil_mode": True, "dilation": [1, 2]}, (1, 2, 8, 9),
         tag="-ceil"),
    Case("MaxPool2d", {"kernel_size": 2}, (3, 8, 8), dynamic=(), tag="-unbatched"),
    Case("AvgPool2d", {"kernel_size": 2}, (2, 3, 8, 8)),
    Case("AvgPool2d", {"kernel_size": 3, "stride": 2, "padding": 1}, (2, 3, 9, 9), tag="-padded"),
    Case("AvgPool2d", {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}, (2, 3, 9, 9),
         tag="-exclude-pad"),
    Case("AvgPool2d", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, (2, 3, 8, 8), tag="-ceil"),
    Case("AdaptiveAvgPool2d", {"output_size": 1}, (2, 3, 7, 5), dynamic=(0, 2, 3)),
    Case("AdaptiveAvgPool2d", {"output_size": [2, 3]}, (2, 3, 8, 9), tag="-2x3"),
    Case("Flatten", {}, (2, 3, 4, 5)),
    Case("Flatten", {"start_dim": 0}, (2, 3, 4), tag="-all"),
    Case("Flatten", {"start_dim": 1, "end_dim": 2}, (2, 3, 4, 5), dynamic=(0, 3), tag="-middle"),
    Case("Flatten", {"start_dim": -3, "end_dim": -2}, (2, 3, 4, 5), tag="-negative"),
    Case("Identity", {}, (2, 3)),
]


def torch_module(case, mode):
    torch.manual_seed(0)
    # JSON lists are torch's tuples (pooling modules print them back as given)
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in case.args.items()}
    m = getattr(torch.nn, case.type)(**args)
    randomise(m, torch.Generator().manual_seed(1))
    return m.train(mode == "train")


def make_input(case, shape, seed):
    gen = torch.Generator().manual_seed(seed)
    if case.dtype == "int64":
        return torch.randint(0, case.args["num_embeddings"], shape, generator=gen)
    return torch.randn(shape, generator=gen)


def run_case(case, mode, tmp_path):
    m = torch_module(case, mode)
    state = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    weights = ["--weights", tmp_path / "weights.npz"] if state else []  # an empty .npz is not a weights file
    if state:
        np.savez(tmp_path / "weights.npz", **state)
    # Traced at case.shape; run with the dynamic dims one larger.
    run_shape = tuple(d + 1 if i in case.dynamic else d for i, d in enumerate(case.shape))
    x = make_input(case, run_shape, seed=2)
    np.save(tmp_path / "x.npy", x.numpy())
    with torch.no_grad():
        want = m(x).numpy()  # updates torch's running statistics in train mode
    spec = json.dumps({"type": case.type, "args": case.args})
    model = tmp_path / "model.onnx"
    args = ["--spec", spec, *weights, "--out", model, "--input-shape", ",".join(map(str, case.shape)),
            "--input-dtype", case.dtype, "--run", tmp_path / "x.npy", "--out-dir", tmp_path / "module"]
    if case.dynamic:
        args += ["--dynamic", *case.dynamic]
    if mode == "eval":
        args.append("--eval")
    proc = nn_export(*args)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["repr"] == repr(m)
    assert report["state_dict"] == {k: list(v.shape) for k, v in m.state_dict().items()}
    onnx.checker.check_model(onnx.load(str(model)), full_check=True)

    cli = run_kiln("run", model, "-i", f"input={tmp_path / 'x.npy'}", "-o", tmp_path / "cli")
    assert cli.returncode == 0, cli.stderr
    got = np.load(tmp_path / "cli" / "output.npy")
    assert got.shape == want.shape
    assert rel_err(got, want) <= RTOL
    by_module = np.load(tmp_path / "module" / "output.npy")
    assert rel_err(by_module, want) <= RTOL
    return m, read_safetensors(tmp_path / "module" / "state.safetensors")


# Layers whose train and eval modes export the same graph run in eval mode only.
@pytest.mark.parametrize("case,mode", [(c, m) for c in CASES for m in c.modes],
                         ids=lambda v: v if isinstance(v, str) else v.id())
def test_layer_matches_torch(case, mode, tmp_path):
    m, state = run_case(case, mode, tmp_path)
    # After one call, Kiln's buffers equal torch's: updated running statistics and
    # num_batches_tracked in train mode, untouched ones in eval mode.
    for key, value in m.state_dict().items():
        if value.is_floating_point():
            assert rel_err(state[key], value.numpy()) <= RTOL, key
        else:
            assert int(state[key]) == int(value), key


def dropout_run(tmp_path, p, mode):
    x = np.ones((8, 1000), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    args = ["--spec", json.dumps({"type": "Dropout", "args": {"p": p}}), "--out", tmp_path / "d.onnx",
            "--input-shape", "8,1000"]
    if mode == "eval":
        args.append("--eval")
    proc = nn_export(*args)
    assert proc.returncode == 0, proc.stderr
    onnx.checker.check_model(onnx.load(str(tmp_path / "d.onnx")), full_check=True)
    cli = run_kiln("run", tmp_path / "d.onnx", "-i", f"input={tmp_path / 'x.npy'}", "-o", tmp_path / "out")
    assert cli.returncode == 0, cli.stderr
    return np.load(tmp_path / "out" / "output.npy")


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_train_drops_a_fraction_p_and_rescales(p, tmp_path):
    y = dropout_run(tmp_path, p, "train")
    dropped = float(np.mean(y == 0))
    sigma = (p * (1 - p) / y.size) ** 0.5
    assert abs(dropped - p) <= 5 * sigma, (dropped, p)
    kept = y[y != 0]
    assert np.allclose(kept, 1 / (1 - p), rtol=1e-6, atol=0)


def test_dropout_eval_is_identity(tmp_path):
    y = dropout_run(tmp_path, 0.5, "eval")
    assert np.array_equal(y, np.ones((8, 1000), dtype=np.float32))


def test_sequential_of_layers_matches_torch(tmp_path):
    """A small CNN from these layers: keys "0.weight", "1.running_mean", ... as torch's Sequential."""
    specs = [
        ("Conv2d", {"in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": False}),
        ("BatchNorm2d", {"num_features": 8}),
        ("ReLU", {}),
        ("MaxPool2d", {"kernel_size": 2}),
        ("GroupNorm", {"num_groups": 2, "num_channels": 8}),
        ("SiLU", {}),
        ("AdaptiveAvgPool2d", {"output_size": 1}),
        ("Flatten", {}),
        ("Linear", {"in_features": 8, "out_features": 4}),
        ("GELU", {}),
    ]
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[getattr(torch.nn, t)(**a) for t, a in specs])
    randomise(m, torch.Generator().manual_seed(1))
    m.eval()
    np.savez(tmp_path / "w.npz", **{k: v.numpy() for k, v in m.state_dict().items()})
    x = torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    np.save(tmp_path / "x.npy", x.numpy())
    spec = json.dumps({"type": "Sequential", "modules": [{"type": t, "args": a} for t, a in specs]})
    proc = nn_export("--spec", spec, "--weights", tmp_path / "w.npz", "--out", tmp_path / "m.onnx",
                     "--input-shape", "2,3,8,8", "--dynamic", 0, "--eval")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["repr"] == repr(m)
    model = onnx.load(str(tmp_path / "m.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert sorted(i.name for i in model.graph.initializer) == sorted(
        k for k in m.state_dict() if not k.endswith("num_batches_tracked"))
    cli = run_kiln("run", tmp_path / "m.onnx", "-i", f"input={tmp_path / 'x.npy'}", "-o", tmp_path / "out")
    assert cli.returncode == 0, cli.stderr
    with torch.no_grad():
        want = m(x).numpy()
    assert rel_err(np.load(tmp_path / "out" / "output.npy"), want) <= RTOL


@pytest.mark.parametrize("spec,shape,needle", [
    ({"type": "Conv2d", "args": {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "groups": 2}}, "1,3,5,5",
     "in_channels must be divisible by groups"),
    ({"type": "Conv2d", "args": {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": "same",
                                 "stride": 2}}, "1,3,5,5", "padding='same' is not supported for strided convolutions"),
    ({"type": "Linear", "args": {"in_features": 4, "out_features": 2}}, "2,5", "in_features=4"),
    ({"type": "AdaptiveAvgPool2d", "args": {"output_size": 3}}, "1,2,7,7", "divisible"),
    ({"type": "BatchNorm2d", "args": {"num_features": 3}}, "2,3,4", "expected 4D input (got 3D input"),
    ({"type": "GroupNorm", "args": {"num_groups": 4, "num_channels": 6}}, "2,6",
     "num_channels must be divisible by num_groups"),
])
def test_invalid_layers_fail_with_torchs_message(spec, shape, needle, tmp_path):
    proc = nn_export("--spec", json.dumps(spec), "--input-shape", shape, "--out", tmp_path / "m.onnx")
    assert proc.returncode == 1
    assert proc.stderr.startswith("kiln-nn-export: error: ") and needle in proc.stderr, proc.stderr


GRAD_RTOL = 1e-4  # gradients: max |kiln - torch| / max |torch| per parameter (float32 reductions in both)


@pytest.mark.parametrize("specs,shape,dtype", [
    ([("Conv2d", {"in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": False}),
      ("BatchNorm2d", {"num_features": 8}), ("GELU", {}), ("GroupNorm", {"num_groups": 2, "num_channels": 8}),
      ("SiLU", {}), ("MaxPool2d", {"kernel_size": 2}),
      ("ConvTranspose2d", {"in_channels": 8, "out_channels": 4, "kernel_size": 2, "stride": 2}),
      ("Tanh", {}), ("AvgPool2d", {"kernel_size": 2}), ("Flatten", {"start_dim": 1, "end_dim": 2}),
      ("LayerNorm", {"normalized_shape": [4]}),
      ("Flatten", {}), ("Dropout", {"p": 0.0}), ("Linear", {"in_features": 64, "out_features": 5})],
     (4, 3, 8, 8), "float"),
    ([("Embedding", {"num_embeddings": 10, "embedding_dim": 6, "padding_idx": 0}),
      ("Linear", {"in_features": 6, "out_features": 6}),
      ("Tanh", {}), ("Flatten", {}), ("BatchNorm1d", {"num_features": 18, "track_running_stats": False}),
      ("Identity", {}),
      ("Sigmoid", {}), ("Linear", {"in_features": 18, "out_features": 5}), ("ReLU", {})],
     (4, 3), "int64"),
], ids=["cnn", "embedding"])
def test_training_mode_export_gives_torchs_gradients(specs, shape, dtype, tmp_path):
    """Training artifacts from a training-mode export: loss, parameter gradients and updated running
    statistics equal torch's for CrossEntropyLoss over the same batch. (Every bias here reaches the
    loss through a nonlinearity, so no true gradient is zero: a normalisation right after a bias
    would make it float noise on both sides. The Embedding's padding row must get no gradient.)"""
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[getattr(torch.nn, t)(**a) for t, a in specs])
    randomise(m, torch.Generator().manual_seed(1))
    m.train()
    np.savez(tmp_path / "w.npz", **{k: v.detach().numpy() for k, v in m.state_dict().items()})
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(0, 10, shape, generator=gen) if dtype == "int64" else torch.randn(shape, generator=gen)
    labels = torch.randint(0, 5, (shape[0],), generator=gen)
    params = {k: v.detach().numpy() for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
    feeds = {"input": x.numpy(), "labels": labels.numpy(), **params}
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)

    spec = json.dumps({"type": "Sequential", "modules": [{"type": t, "args": a} for t, a in specs]})
    proc = nn_export("--spec", spec, "--weights", tmp_path / "w.npz", "--out", tmp_path / "m.onnx",
                     "--input-shape", ",".join(map(str, shape)), "--input-dtype", dtype, "--dynamic", 0)
    assert proc.returncode == 0, proc.stderr
    art = run_kiln("artifacts", tmp_path / "m.onnx", "--loss", "CrossEntropyLoss", "--optimizer", "AdamW",
                   "--out", tmp_path / "art")
    assert art.returncode == 0, art.stderr
    args = [a for name in feeds for a in ("-i", f"{name}={tmp_path / (name + '.npy')}")]
    cli = run_kiln("run", tmp_path / "art" / "training_model.onnx", *args, "-o", tmp_path / "out")
    assert cli.returncode == 0, cli.stderr

    loss = torch.nn.functional.cross_entropy(m(x), labels)
    loss.backward()
    assert rel_err(np.load(tmp_path / "out" / "loss.npy"), loss.detach().numpy()) <= RTOL
    for name, p in m.named_parameters():
        assert rel_err(np.load(tmp_path / "out" / f"{name}_grad.npy"), p.grad.numpy()) <= GRAD_RTOL, name
    for name, b in m.named_buffers():
        if b.is_floating_point():
            assert rel_err(np.load(tmp_path / "out" / f"{name}.updated.npy"), b.numpy()) <= RTOL, name
