"""torchvision parity of the zoo's image models and backbones (include/kiln/nn/zoo.h, backbone.h).

torchvision (python3-torchvision 0.14, weights=None, seeded) builds ResNet-18/34/50 and ConvNeXt-T;
their BatchNorm statistics and affines and ConvNeXt's layer_scale get non-trivial random values
(the defaults, 0/1 and 1e-6, would hide most of the network). The state_dict goes through an .npz
file into Kiln's model (tools/nn_export --zoo, load_state_dict strict), and:
  - Kiln's state_dict keys, in order, and shapes are torchvision's;
  - the exported ONNX (eval mode) run with `kiln run` gives torchvision's logits on a random batch:
    max |kiln - torch| / max |torch| <= 1e-4 (RTOL). Batch 2 at 224x224, except ResNet-50 at
    128x128 to keep the file's time down (the classifier pools globally; the backbone test below
    runs ResNet-50 at 224);
  - the ResNet-50 backbone's feature maps (stem = maxpool output, stage1..4 = layer1..4) equal
    torchvision's intermediate outputs at 224x224, with HF's documented shapes; ConvNeXt-T's (stem =
    features.0, stage1..4 = features.1/3/5/7) at 64x64;
  - ResNet-18 in training mode (batch statistics) matches torchvision's train() forward.
"""
import json
import subprocess

import numpy as np
import onnx
import pytest
import torch
import torchvision
from kiln_cli import build_dir, run_kiln

RTOL = 1e-4  # max |kiln - torch| / max |torch|


def nn_export(*args):
    exe = build_dir() / "bin" / "kiln-nn-export"
    assert exe.exists(), f"{exe} does not exist: build the kiln_nn_export target or set KILN_BUILD_DIR"
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def rel_err(got, want):
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want)) / np.max(np.abs(want)))


def torchvision_model(name, **kwargs):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, **kwargs)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.copy_(0.1 * torch.randn(module.num_features, generator=gen))
                module.running_var.copy_(0.5 + torch.rand(module.num_features, generator=gen))
                module.weight.copy_(0.5 + torch.rand(module.num_features, generator=gen))
                module.bias.copy_(0.1 * torch.randn(module.num_features, generator=gen))
            if hasattr(module, "layer_scale"):  # ConvNeXt's CNBlock
                module.layer_scale.copy_(0.1 + 0.4 * torch.rand(module.layer_scale.shape, generator=gen))
    return model.eval()


def save_weights(path, state_dict, drop_prefix=None):
    np.savez(path, **{k: v.numpy() for k, v in state_dict.items() if not (drop_prefix and k.startswith(drop_prefix))})


def batch(path, shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    np.save(path, x)
    return x


@pytest.mark.parametrize("name,size", [("resnet18", 224), ("resnet34", 224), ("resnet50", 128), ("convnext_tiny", 224)])
def test_logits_match_torchvision(tmp_path, name, size):
    model = torchvision_model(name)
    state = model.state_dict()
    save_weights(tmp_path / "w.npz", state)
    x = batch(tmp_path / "x.npy", (2, 3, size, size))
    report = nn_export("--zoo", name, "--weights", tmp_path / "w.npz", "--eval", "--input-shape", f"2,3,{size},{size}",
                       "--out", tmp_path / "model.onnx")
    assert report["keys"] == list(state.keys())
    assert {k: tuple(v) for k, v in report["state_dict"].items()} == {k: tuple(v.shape) for k, v in state.items()}
    if name == "resnet18":
        onnx.checker.check_model(onnx.load(str(tmp_path / "model.onnx")), full_check=True)
    proc = run_kiln("run", tmp_path / "model.onnx", "--input", f"pixel_values={tmp_path / 'x.npy'}", "--output-dir",
                    tmp_path / "out", timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out" / "logits.npy")
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape == (2, 1000)
    assert rel_err(got, want) <= RTOL


def test_resnet50_backbone_matches_torchvision_intermediates(tmp_path):
    model = torchvision_model("resnet50")
    save_weights(tmp_path / "w.npz", model.state_dict(), drop_prefix="fc.")
    x = batch(tmp_path / "x.npy", (1, 3, 224, 224), seed=1)
    outputs = {}
    hooks = [getattr(model, m).register_forward_hook(lambda mod, i, o, m=m: outputs.__setitem__(m, o.numpy()))
             for m in ("maxpool", "layer1", "layer2", "layer3", "layer4")]
    with torch.no_grad():
        model(torch.from_numpy(x))
    for h in hooks:
        h.remove()
    report = nn_export("--backbone", "resnet50", "--out-indices", "0,1,2,3,4", "--weights", tmp_path / "w.npz",
                       "--eval",
                       "--input-shape", "1,3,224,224", "--out", tmp_path / "bb.onnx")
    assert report["keys"] == [k for k in model.state_dict() if not k.startswith("fc.")]
    proc = run_kiln("run", tmp_path / "bb.onnx", "--input", f"pixel_values={tmp_path / 'x.npy'}", "--output-dir",
                    tmp_path / "out", timeout=300)
    assert proc.returncode == 0, proc.stderr
    expected_shapes = {"stem": (1, 64, 56, 56), "stage1": (1, 256, 56, 56), "stage2": (1, 512, 28, 28),
                       "stage3": (1, 1024, 14, 14), "stage4": (1, 2048, 7, 7)}  # HF's documented example
    for stage, layer in zip(expected_shapes, ("maxpool", "layer1", "layer2", "layer3", "layer4")):
        got = np.load(tmp_path / "out" / f"{stage}.npy")
        assert got.shape == expected_shapes[stage] == outputs[layer].shape
        assert rel_err(got, outputs[layer]) <= RTOL, stage


def test_convnext_backbone_matches_torchvision_features(tmp_path):
    model = torchvision_model("convnext_tiny")
    save_weights(tmp_path / "w.npz", model.state_dict(), drop_prefix="classifier.")
    x = batch(tmp_path / "x.npy", (1, 3, 64, 64), seed=2)
    with torch.no_grad():
        want, y = [], torch.from_numpy(x)
        for i, layer in enumerate(model.features):
            y = layer(y)
            if i % 2 == 0 and i > 0:
                continue
            want.append(y.numpy())  # features.0 (stem), then the stages at 1, 3, 5, 7
    nn_export("--backbone", "convnext_tiny", "--out-indices", "0,1,2,3,4", "--weights", tmp_path / "w.npz", "--eval",
              "--input-shape", "1,3,64,64", "--run", tmp_path / "x.npy", "--out-dir", tmp_path / "out")
    for i, w in enumerate(want):
        got = np.load(tmp_path / "out" / f"output{i}.npy")
        assert got.shape == w.shape
        assert rel_err(got, w) <= RTOL, i


def test_resnet18_training_mode_uses_batch_statistics(tmp_path):
    model = torchvision_model("resnet18")
    save_weights(tmp_path / "w.npz", model.state_dict())
    x = batch(tmp_path / "x.npy", (4, 3, 64, 64), seed=3)
    nn_export("--zoo", "resnet18", "--weights", tmp_path / "w.npz", "--input-shape", "4,3,64,64", "--run",
              tmp_path / "x.npy", "--out-dir", tmp_path / "out")
    model.train()
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    assert rel_err(np.load(tmp_path / "out" / "output.npy"), want) <= RTOL
