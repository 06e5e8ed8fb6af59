"""16-bit features beyond the mixed-precision step (test_mixed_precision.py covers that):

- kiln.training.api.GradScaler (torch's GradScaler names) over fp16 artifacts: 20 AdamW steps of a
  residual MLP within 1% of float32's losses, an overflowing update skipped with the parameters
  untouched and the scale halved (a fixed scale stays), state_dict round trips, and its errors;
- export_model_for_inferencing(precision=...): "fp16" is the whole graph in float16 with float32
  inputs and outputs, "bf16" the parameters stored in bfloat16; ONNX Runtime 1.30 runs both and
  gives Kiln's outputs on them, each within its 16-bit type's error of the float32 export;
- full 16-bit evaluation (Module.set_eval_precision, the Trainer's bf16_full_eval / fp16_full_eval):
  logits and eval_loss within the 16-bit type's error of float32's, and different from them.
"""
import copy
import shutil
import subprocess

import numpy as np
import onnx
import pytest
import torch
from kiln_cli import REPO
from kiln_package import import_kiln
from test_mixed_precision import ResidualMLP, WithLoss, batches, items
from training_parity import export_forward

kiln = import_kiln()
from kiln.training import artifacts  # noqa: E402
from kiln.training.api import CheckpointState, GradScaler, Module, Optimizer  # noqa: E402

ORT_RUN = REPO / "tests" / "python" / "ort_run.js"


def make_artifacts(tmp_path, name, precision):
    torch.manual_seed(0)
    data = batches((16, 20), 7)
    path = tmp_path / "model.onnx"
    if not path.exists():
        export_forward(ResidualMLP(), {"input": data[0]["input"]}, path, output_names=["logits"], train=True)
    folder = tmp_path / name
    artifacts.generate_artifacts(str(path), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(folder),
                                 additional_output_names=["logits"], mixed_precision=precision)
    state = CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    module = Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"))
    return module, Optimizer(str(folder / "optimizer_model.onnx"), module), state, data


def test_grad_scaler_trains_fp16_artifacts_and_skips_an_overflowing_update(tmp_path):
    full_module, full_opt, _, data = make_artifacts(tmp_path, "fp32", "no")
    full = []
    for b in data:
        full.append(float(full_module(b["input"], b["labels"])[0]))
        full_opt.step()
        full_module.lazy_reset_grad()

    module, optimizer, state, data = make_artifacts(tmp_path, "fp16", "fp16")
    assert module.mixed_precision == "fp16"
    scaler = GradScaler(module)
    assert scaler.get_scale() == module.loss_scale == 65536.0
    mixed = []
    for b in data:
        mixed.append(float(module(b["input"], b["labels"])[0]))
        assert scaler.step(optimizer)
        scaler.update()
        module.lazy_reset_grad()
    full, mixed = np.array(full), np.array(mixed)
    assert 0 < np.max(np.abs(mixed - full) / full) < 1e-2
    assert scaler.state_dict()["_growth_tracker"] == len(data)

    # A scale of 2^40 overflows float16 in the backward pass: the update is skipped, the parameters
    # stay as they were, and the scale halves.
    scaler.update(new_scale=2.0**40)
    assert module.loss_scale == 2.0**40
    before = {name: p.data.copy() for name, p in state.parameters}
    module(data[0]["input"], data[0]["labels"])
    assert not scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**39 == module.loss_scale
    for name, p in state.parameters:
        assert np.array_equal(p.data, before[name]), name
    module.lazy_reset_grad()

    saved = scaler.state_dict()
    assert saved == {"scale": 2.0**39, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                     "_growth_tracker": 0}
    other = GradScaler(module, init_scale=8.0)
    assert module.loss_scale == 8.0
    other.load_state_dict(saved)
    assert other.get_scale() == module.loss_scale == 2.0**39

    # A fixed scale (IPUConfig's loss_scaling) skips the overflowing update and stays where it is.
    fixed = GradScaler(module, init_scale=2.0**40, dynamic=False)
    module(data[0]["input"], data[0]["labels"])
    assert not fixed.step(optimizer)
    fixed.update()
    assert fixed.get_scale() == module.loss_scale == 2.0**40
    module.lazy_reset_grad()
    other.load_state_dict(saved)

    # Errors, as torch raises them, and a float32 module without a loss scale.
    with pytest.raises(RuntimeError, match="call step\\(\\) or unscale_\\(\\) first"):
        scaler.update()
    scaler.unscale_()
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_()
    with pytest.raises(ValueError, match="takes no loss scale"):
        GradScaler(full_module)
    assert GradScaler(full_module, enabled=False).step(full_opt)
    with pytest.raises(ValueError, match="growth_factor must be > 1"):
        GradScaler(module, growth_factor=1.0)
    with pytest.raises(ValueError, match="'scale' is missing"):
        other.load_state_dict({k: v for k, v in saved.items() if k != "scale"})
    with pytest.raises(ValueError, match="loss scale must be finite and > 0"):
        module.loss_scale = 0.0


def run_ort(model, x, out_dir):
    node = shutil.which("node")
    assert node, "node is not installed: run scripts/setup.sh (it installs Node.js and onnxruntime-node)"
    np.save(out_dir.parent / "x.npy", x)
    proc = subprocess.run([node, str(ORT_RUN), str(model), str(out_dir), f"input={out_dir.parent / 'x.npy'}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.load(out_dir / "out_0.npy")


def test_16_bit_inference_exports_run_in_onnx_runtime(tmp_path):
    import kiln.backend
    module, _, _, data = make_artifacts(tmp_path, "fp32", "no")
    x = data[0]["input"]
    paths = {}
    for precision in ("fp32", "fp16", "bf16"):
        paths[precision] = tmp_path / f"inference_{precision}.onnx"
        module.export_model_for_inferencing(str(paths[precision]), ["logits"], precision=precision)
    (want,) = kiln.backend.prepare(str(paths["fp32"])).run({"input": x})
    scale = np.max(np.abs(want))
    # float16 rounds each op's result (2^-11 relative), bfloat16 only the weights (2^-8 relative).
    for precision, tolerance, stored in (("fp16", 1e-2, onnx.TensorProto.FLOAT16),
                                         ("bf16", 2e-2, onnx.TensorProto.BFLOAT16)):
        model = onnx.load(str(paths[precision]))
        onnx.checker.check_model(model)
        assert [i.type.tensor_type.elem_type for i in model.graph.input] == [onnx.TensorProto.FLOAT]
        assert [o.type.tensor_type.elem_type for o in model.graph.output] == [onnx.TensorProto.FLOAT]
        assert {i.data_type for i in model.graph.initializer if i.data_type != onnx.TensorProto.INT64} == {stored}
        assert not [p.key for p in model.metadata_props if p.key.startswith("kiln.")]
        assert paths[precision].stat().st_size < 0.6 * paths["fp32"].stat().st_size
        from_ort = run_ort(paths[precision], x, tmp_path / f"ort_{precision}")
        (from_kiln,) = kiln.backend.prepare(str(paths[precision])).run({"input": x})
        assert from_ort.dtype == from_kiln.dtype == np.float32
        # ORT computes float16 ops in float32 after its own casts too, but rounds in other places.
        assert np.max(np.abs(from_ort - from_kiln)) <= (5e-3 if precision == "fp16" else 1e-5) * scale, precision
        error = np.max(np.abs(from_kiln - want)) / scale
        assert 0 < error <= tolerance, (precision, error)
    with pytest.raises(ValueError, match="mixed precision 'int8'"):
        module.export_model_for_inferencing(str(tmp_path / "bad.onnx"), ["logits"], precision="int8")
    assert not (tmp_path / "bad.onnx").exists()


def test_full_16_bit_evaluation(tmp_path):
    module, _, _, data = make_artifacts(tmp_path, "fp32", "no")
    b = data[0]
    module.eval()
    loss32, logits32 = module(b["input"], b["labels"])
    for precision, tolerance in (("bf16", 3e-2), ("fp16", 5e-3)):
        module.set_eval_precision(precision)
        loss, logits = module(b["input"], b["labels"])
        assert logits.dtype == np.float32 and loss.dtype == np.float32
        error = np.max(np.abs(logits - logits32)) / np.max(np.abs(logits32))
        assert 0 < error <= tolerance, (precision, error)
        assert 0 < abs(loss - loss32) / loss32 <= tolerance, precision
    module.set_eval_precision("fp32")
    again_loss, again_logits = module(b["input"], b["labels"])
    assert np.array_equal(again_logits, logits32) and again_loss == loss32

    # The Trainer: bf16_full_eval / fp16_full_eval move eval_loss by 16-bit rounding only.
    torch.manual_seed(0)
    model = WithLoss()
    evals = {}
    for name, flags in (("fp32", {}), ("bf16", {"bf16_full_eval": True}), ("fp16", {"fp16_full_eval": True})):
        args = kiln.TrainingArguments(output_dir=str(tmp_path / f"trainer_{name}"), per_device_train_batch_size=8,
                                      num_train_epochs=1, save_strategy="no", report_to=[], disable_tqdm=True,
                                      **flags)
        trainer = kiln.Trainer(model=copy.deepcopy(model), args=args, train_dataset=items(),
                               eval_dataset=items(16, 4))
        trainer.train()
        evals[name] = trainer.evaluate()["eval_loss"]
    for name, tolerance in (("bf16", 3e-2), ("fp16", 5e-3)):
        assert 0 < abs(evals[name] - evals["fp32"]) / evals["fp32"] <= tolerance, (name, evals)
    with pytest.raises(ValueError, match="At most one of fp16 and bf16 can be True for full eval"):
        kiln.TrainingArguments(output_dir=str(tmp_path), bf16_full_eval=True, fp16_full_eval=True)
