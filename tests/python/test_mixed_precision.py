"""bf16 mixed precision from Python and the command line, against torch.autocast: the same model
trained 20 AdamW steps in float32 and in bfloat16 by PyTorch (torch.autocast("cpu", torch.bfloat16))
and by Kiln (generate_artifacts(mixed_precision="bf16")). torch's own bf16-vs-fp32 loss spread sets
the tolerance: Kiln's bf16 losses must stay within twice that spread of float32 (Kiln's float32
itself matches torch's to 1e-3), and must differ from Kiln's float32 (the products really run in
bfloat16). The exported inference model of a bf16-trained Module is float32 standard ONNX that
ONNX Runtime runs; the Trainer's bf16=True and fp16=True (with its loss scaler) train a torch model
to within 1% of float32's losses; artifacts of another precision, both flags at once and an unknown
precision are clear errors. The loss scaler's skips and exact resume: tests/trainer/trainer_test.cpp.
Gradients and the pass itself: tests/training/mixed_precision_test.cpp."""
import copy
import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
import torch_models
from kiln_cli import REPO, assert_cli_error, run_kiln
from kiln_package import import_kiln
from training_parity import export_forward, load_initializers_into, perturb

kiln = import_kiln()
from kiln.training import artifacts  # noqa: E402
from kiln.training.api import CheckpointState, Module, Optimizer  # noqa: E402

STEPS = 20
ORT_RUN = REPO / "tests" / "python" / "ort_run.js"
WIDTH = 32


class Float32LayerNorm(torch.nn.LayerNorm):
    """LayerNorm in float32 under autocast, as Kiln keeps it: torch 1.13's CPU autocast passes it a
    bfloat16 input with float32 weights and fails ("expected scalar type BFloat16 but found Float")."""

    def forward(self, x):
        return super().forward(x.float())


class ResidualMLP(torch.nn.Module):
    """Pre-LayerNorm residual blocks x + W2 gelu(W1 LayerNorm(x)) and a linear head: a transformer's
    feed-forward half."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(20, WIDTH)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            Float32LayerNorm(WIDTH), torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
            torch.nn.Linear(4 * WIDTH, WIDTH)) for _ in range(3))
        self.head = torch.nn.Linear(WIDTH, 10)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def batches(shape, seed):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal(shape).astype(np.float32),
             "labels": rng.integers(0, 10, size=(shape[0],), dtype=np.int64)} for _ in range(STEPS)]


def torch_losses(module, data, autocast):
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    module.train()
    losses = []
    for b in data:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(module(torch.from_numpy(b["input"])), torch.from_numpy(b["labels"]))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return np.array(losses)


def kiln_losses(model_path, folder, data, mixed_precision):
    artifacts.generate_artifacts(str(model_path), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(folder),
                                 additional_output_names=["logits"], mixed_precision=mixed_precision)
    state = CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    module = Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"))
    optimizer = Optimizer(str(folder / "optimizer_model.onnx"), module)
    losses = []
    for b in data:
        module.train()
        losses.append(float(module(b["input"], b["labels"])[0]))
        optimizer.step()
        module.lazy_reset_grad()
    return np.array(losses), module


CASES = {"residual_mlp": (ResidualMLP, (16, 20)), "lenet": (torch_models.LeNet, (16, 1, 28, 28))}


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_training_stays_as_close_to_float32_as_torch_autocast(tmp_path, name):
    node = shutil.which("node")
    assert node, "node is not installed: run scripts/setup.sh (it installs Node.js and onnxruntime-node)"
    ctor, shape = CASES[name]
    data = batches(shape, 7)
    torch.manual_seed(0)
    module = perturb(ctor())
    path = export_forward(module, {"input": data[0]["input"]}, tmp_path / "model.onnx", output_names=["logits"],
                          train=True)
    load_initializers_into(module, path)
    start = {k: v.clone() for k, v in module.state_dict().items()}
    torch_fp32 = torch_losses(module, data, autocast=False)
    module.load_state_dict(start)
    torch_bf16 = torch_losses(module, data, autocast=True)
    kiln_fp32, _ = kiln_losses(path, tmp_path / "fp32", data, "no")
    kiln_bf16, trained = kiln_losses(path, tmp_path / "bf16", data, "bf16")

    def spread(a, b):
        return float(np.max(np.abs(a - b) / np.abs(b)))

    torch_spread = spread(torch_bf16, torch_fp32)
    print(f"{name}: torch bf16 vs fp32 {torch_spread:.2e}, kiln bf16 vs fp32 {spread(kiln_bf16, kiln_fp32):.2e}, "
          f"kiln bf16 vs torch bf16 {spread(kiln_bf16, torch_bf16):.2e}, "
          f"kiln fp32 vs torch {spread(kiln_fp32, torch_fp32):.2e}")
    assert spread(kiln_fp32, torch_fp32) < 1e-3
    assert 0 < spread(kiln_bf16, kiln_fp32) <= 2 * torch_spread
    assert spread(kiln_bf16, torch_fp32) <= 2 * torch_spread

    training = onnx.load(str(tmp_path / "bf16" / "training_model.onnx"))
    assert {p.key: p.value for p in training.metadata_props}["kiln.mixed_precision"] == "bf16"
    assert any(n.name.endswith("/autocast_bf16") for n in training.graph.node)
    exported = tmp_path / "inference.onnx"
    trained.export_model_for_inferencing(str(exported), ["logits"])
    inference = onnx.load(str(exported))
    onnx.checker.check_model(inference)
    assert not [n.name for n in inference.graph.node if "autocast" in n.name]
    assert not [n.name for n in inference.graph.node
                if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.BFLOAT16]
    assert all(i.data_type == onnx.TensorProto.FLOAT for i in inference.graph.initializer)
    # ONNX Runtime runs the export, and gives Kiln's eval model's float32 logits on it.
    x = data[0]["input"]
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([node, str(ORT_RUN), str(exported), str(tmp_path / "ort"), f"input={tmp_path / 'x.npy'}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    from_ort = np.load(tmp_path / "ort" / "out_0.npy")
    import kiln.backend
    (from_kiln,) = kiln.backend.prepare(str(exported)).run({"input": x})
    assert np.max(np.abs(from_ort - from_kiln)) <= 1e-5 * max(1.0, np.max(np.abs(from_kiln)))
    # The bf16 eval model computes the same logits to bfloat16's precision.
    trained.eval()
    from_bf16_eval = trained(x, data[0]["labels"])[1]
    assert 0 < np.max(np.abs(from_bf16_eval - from_kiln)) <= 2e-2 * np.max(np.abs(from_kiln))


def items(n=64, seed=3):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(20).astype(np.float32), "labels": int(rng.integers(0, 10))} for _ in range(n)]


class WithLoss(torch.nn.Module):
    """ResidualMLP with HF's output convention (loss first when labels are given)."""

    def __init__(self):
        super().__init__()
        self.net = ResidualMLP()

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"logits": logits} if labels is None else {"loss": F.cross_entropy(logits, labels), "logits": logits}


def trainer_losses(tmp_path, name, model, **more):
    args = kiln.TrainingArguments(output_dir=str(tmp_path / name), per_device_train_batch_size=8, num_train_epochs=2,
                                  learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
                                  disable_tqdm=True, **more)
    trainer = kiln.Trainer(model=model, args=args, train_dataset=items(), eval_dataset=items(16, 4))
    trainer.train()
    metrics = trainer.evaluate()
    return np.array([e["loss"] for e in trainer.state.log_history if "loss" in e]), metrics["eval_loss"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_trainer_trains_a_torch_model_in_mixed_precision(tmp_path, precision):
    torch.manual_seed(0)
    model = WithLoss()
    same_start = copy.deepcopy(model)
    full, full_eval = trainer_losses(tmp_path, "fp32", model)
    mixed, mixed_eval = trainer_losses(tmp_path, precision, same_start, **{precision: True})
    assert len(mixed) == len(full) == 16
    assert 0 < np.max(np.abs(mixed - full) / full) < 1e-2
    assert 0 < abs(mixed_eval - full_eval) / full_eval < 1e-2
    for role in ("training", "eval"):
        m = onnx.load(str(tmp_path / precision / "artifacts" / f"{role}_model.onnx"))
        assert {p.key: p.value for p in m.metadata_props}["kiln.mixed_precision"] == precision, role


def test_mixed_precision_errors(tmp_path):
    torch.manual_seed(0)
    path = export_forward(ResidualMLP(), {"input": np.zeros((2, 20), np.float32)}, tmp_path / "m.onnx",
                          output_names=["logits"])
    with pytest.raises(ValueError, match="mixed precision 'int8': expected 'no' \\(float32\\), 'bf16' or 'fp16'"):
        artifacts.generate_artifacts(str(path), loss=artifacts.LossType.CrossEntropyLoss,
                                     artifact_directory=str(tmp_path / "a"), mixed_precision="int8")
    with pytest.raises(TypeError, match="mixed_precision must be a str"):
        artifacts.generate_artifacts(str(path), loss=artifacts.LossType.CrossEntropyLoss,
                                     artifact_directory=str(tmp_path / "a"), mixed_precision=True)
    assert not (tmp_path / "a").exists()

    # The command line: --mixed-precision bf16 / fp16 write mixed-precision artifacts; fp16's
    # training model also takes the loss scale.
    for name in ("bf16", "fp16"):
        proc = run_kiln("artifacts", path, "--loss", "CrossEntropyLoss", "--optimizer", "AdamW", "--out",
                        tmp_path / name, "--mixed-precision", name)
        assert proc.returncode == 0, proc.stderr
        training = onnx.load(str(tmp_path / name / "training_model.onnx"))
        assert sum(n.name.endswith(f"/autocast_{name}") for n in training.graph.node) >= 8
        assert ("kiln.loss_scale" in [i.name for i in training.graph.input]) == (name == "fp16")
    proc = run_kiln("artifacts", path, "--loss", "CrossEntropyLoss", "--optimizer", "AdamW", "--out",
                    tmp_path / "int8", "--mixed-precision", "int8")
    assert_cli_error(proc, "mixed precision 'int8'")
    # How products run: natively where oneDNN has bfloat16 instructions to use, else emulated; always
    # emulated when asked.
    assert re.search(r"bfloat16 products \(mixed precision\): (native \(oneDNN \S*(bf16|amx)|float32 \(emulated)",
                     run_kiln("ops").stdout)
    emulated = run_kiln("ops", env={"KILN_BF16": "emulate"})
    assert "bfloat16 products (mixed precision): float32 (emulated" in emulated.stdout, emulated.stderr
    assert_cli_error(run_kiln("ops", env={"KILN_BF16": "fast"}), "KILN_BF16='fast': expected auto, native or emulate")

    # bf16=True with artifacts generated in float32.
    float_artifacts = tmp_path / "f32"
    artifacts.generate_artifacts(str(path), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(float_artifacts),
                                 additional_output_names=["logits"])
    proc = run_kiln("train", "--model", float_artifacts, "--output_dir", tmp_path / "out", "--bf16", "true",
                    "--max_steps", 1)
    assert_cli_error(proc, "bf16=True, but the artifacts in", "were generated in float32",
                     "--mixed-precision bf16")
    proc = run_kiln("train", "--model", tmp_path / "bf16", "--output_dir", tmp_path / "out", "--fp16", "true",
                    "--max_steps", 1)
    assert_cli_error(proc, "fp16=True, but the artifacts in", "were generated with bf16")
    with pytest.raises(ValueError, match="At most one of fp16 and bf16 can be True"):
        kiln.TrainingArguments(output_dir=str(tmp_path), fp16=True, bf16=True)
    with pytest.raises(ValueError, match="half_precision_backend 'apex'"):
        kiln.TrainingArguments(output_dir=str(tmp_path), half_precision_backend="apex")
