"""Inference export after training: artifacts of a forward model are trained for a few steps by
`kiln-train-steps`, which then writes the inference model (Module::export_model_for_inferencing)
and runs the eval model on held-out batches. The exported model must be

- a valid ONNX model (onnx.checker with full_check, which runs shape inference) of standard ops
  only (every node in the "" / "ai.onnx" domain), BatchNormalization in inference mode
  (training_mode 0, one output), no Dropout in training mode;
- holding the trained parameters: its initializers equal the checkpoint saved after the steps
  (bit for bit) and differ from the initial ones;
- the eval model's function: `kiln run` on it and ONNX Runtime (onnxruntime-node, through
  tests/python/ort_run.js) both give the eval model's logits within 1e-5
  (max |a - b| / max(1, max |b|)).

Models: the MLP; a LeNet-style CNN with BatchNorm in training mode and Dropout; torchvision's
ResNet-18 (1000 classes, 64 x 64 images), BatchNorm in training mode.

ONNX Runtime comes from Node.js: scripts/setup.sh installs onnxruntime-node under node_modules. The
tests fail (not skip) when node or the module is missing.
"""
import json
import shutil
import subprocess

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import torch
import torch_models
import zoo_models
from kiln_cli import REPO, run_kiln
from torch import nn
from training_parity import (
    export_forward,
    generate_artifacts,
    perturb,
    perturb_batchnorm_stats,
    read_safetensors,
    run_train_steps,
    weight_error,
    write_manifest,
)

TOL = 1e-5
STEPS = 3
ORT_RUN = REPO / "tests" / "python" / "ort_run.js"


@pytest.fixture(scope="module")
def node():
    """The node executable, with onnxruntime-node resolvable from the repository."""
    exe = shutil.which("node")
    assert exe, "node is not installed: run scripts/setup.sh (it installs Node.js and onnxruntime-node)"
    proc = subprocess.run([exe, "-e", "require.resolve('onnxruntime-node')"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, ("onnxruntime-node is not installed under node_modules: run scripts/setup.sh "
                                  f"({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'not found'})")
    return exe


def lenet_with_dropout():
    """LeNet (Conv-ReLU-BatchNorm-...) with Dropout(0.5) before the last Linear."""
    model = torch_models.LeNet()
    model.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 120), nn.ReLU(), nn.Dropout(0.5), nn.Linear(120, 10))
    return model


# name -> (constructor, input shape with the batch, classes, BatchNorm/Dropout in training mode)
CASES = {
    "mlp": (lambda: torch_models.MLP(), (8, 784), 10, False),
    "lenet_dropout": (lenet_with_dropout, (8, 1, 28, 28), 10, True),
    "resnet18": (lambda: zoo_models.resnet18(), (2, 3, 64, 64), 1000, True),
}


def batch(shape, classes, seed):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal(shape).astype(np.float32),
            "labels": rng.integers(0, classes, size=(shape[0],), dtype=np.int64)}


def check_standard_inference_model(path):
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    foreign = sorted({f"{n.op_type} ({n.domain})" for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    assert not foreign, f"{path}: nodes outside the standard domain: {foreign}"
    for n in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "BatchNormalization":
            assert attrs.get("training_mode", 0) == 0, f"{n.name}: training_mode {attrs['training_mode']}"
            assert len([o for o in n.output if o]) == 1, f"{n.name}: outputs {list(n.output)}"
        if n.op_type == "Dropout" and len(n.input) >= 3 and n.input[2]:
            mode = [i for i in model.graph.initializer if i.name == n.input[2]]
            assert mode and not onnx.numpy_helper.to_array(mode[0]).item(), f"{n.name}: Dropout in training mode"
    assert [o.name for o in model.graph.output] == ["logits"], [o.name for o in model.graph.output]
    return {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}


def close(got, want):
    return weight_error(got, want) <= TOL


@pytest.mark.parametrize("name", list(CASES))
def test_exported_inference_model_matches_eval_model(tmp_path, node, name):
    ctor, shape, classes, train = CASES[name]
    torch.manual_seed(0)
    module = perturb_batchnorm_stats(perturb(ctor()))
    train_batches = [batch(shape, classes, 10 + i) for i in range(STEPS)]
    eval_batches = [batch(shape, classes, 100 + i) for i in range(2)]
    model_path = export_forward(module, {"input": train_batches[0]["input"]}, tmp_path / "model.onnx",
                                output_names=["logits"], train=train)
    artifacts = generate_artifacts(model_path, tmp_path / "artifacts", "--loss", "CrossEntropyLoss",
                                   "--additional-output-names", "logits", "--optimizer", "AdamW", "--lr", "1e-2")

    exported, saved = tmp_path / "inference.onnx", tmp_path / "trained.safetensors"
    proc_args = ["--batches", write_manifest(tmp_path / "data", train_batches), "--steps", STEPS, "--threads", 2,
                 "--eval", write_manifest(tmp_path / "data", eval_batches, "eval"), "--eval-out", tmp_path / "eval",
                 "--save", saved, "--export", exported, "--export-outputs", "logits"]
    _, _, evals = run_train_steps(artifacts, *proc_args)

    inits = check_standard_inference_model(exported)
    trained, _ = read_safetensors(saved)
    initial, meta = read_safetensors(artifacts / "checkpoint")
    for pname in meta["kiln.trainable"] + meta["kiln.frozen"]:
        assert pname in inits, f"parameter {pname} is no initializer of the exported model"
        assert np.array_equal(inits[pname], trained[pname]), f"{pname}: exported value differs from the checkpoint"
    moved = [p for p in meta["kiln.trainable"] if not np.array_equal(trained[p], initial[p])]
    assert len(moved) == len(meta["kiln.trainable"]), "some trainable parameters did not change in training"

    assert [e["eval_batch"] for e in evals] == [0, 1]
    logits_index = evals[0]["outputs"].index("logits")
    for b, feeds in enumerate(eval_batches):
        want = np.load(tmp_path / "eval" / f"out_{b}_{logits_index}.npy")
        assert want.shape == (shape[0], classes)
        np.save(tmp_path / f"x{b}.npy", feeds["input"])

        proc = run_kiln("run", exported, "--input", f"input={tmp_path / f'x{b}.npy'}",
                        "--output-dir", tmp_path / f"k{b}")
        assert proc.returncode == 0, proc.stderr
        got_kiln = np.load(tmp_path / f"k{b}" / "logits.npy")
        assert close(got_kiln, want), f"kiln run of the export vs eval model: {weight_error(got_kiln, want):.2e}"

        proc = subprocess.run([node, str(ORT_RUN), str(exported), str(tmp_path / f"o{b}"),
                               f"input={tmp_path / f'x{b}.npy'}"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1])["outputs"] == ["logits"]
        got_ort = np.load(tmp_path / f"o{b}" / "out_0.npy")
        assert close(got_ort, got_kiln), f"ONNX Runtime vs Kiln on the export: {weight_error(got_ort, got_kiln):.2e}"
        assert close(got_ort, want), f"ONNX Runtime on the export vs eval model: {weight_error(got_ort, want):.2e}"
