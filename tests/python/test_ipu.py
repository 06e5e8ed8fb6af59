"""optimum-graphcore's names over Kiln (kiln.graphcore): IPUConfig as JSON in and out with its checks,
IPUTrainingArguments' defaults, LAMB through the on-device API against a torch implementation of the
paper, IPUTrainer with device_iterations (the same training, the callbacks of output_mode), with
pad_on_batch_axis (the same losses as an unpadded run), compile_only, the example script and the
`kiln train` flags, and the clear errors of what Kiln does not run (serialized splits per stage,
generation). The LM-head serialization: test_serialized_head.py. Pipelined stages: test_pipeline.py."""
import json

import numpy as np
import onnx
import pytest
import torch
from kiln_package import import_kiln
from test_python_trainer import N_CLASSES, SmallMLP, blobs
from test_python_trainer import export_mlp as export_small_mlp
from torch_lamb import TorchLamb

kiln = import_kiln()

from kiln.graphcore import (  # noqa: E402 (after the package is on the path)
    IPUConfig,
    IPUSeq2SeqTrainingArguments,
    IPUTrainer,
    IPUTrainingArguments,
)


def export_mlp(path, seed=0):
    """test_python_trainer's MLP as ONNX, and the torch module it was exported from (the same seed
    gives the same weights)."""
    exported = export_small_mlp(path, seed)
    torch.manual_seed(seed)
    return SmallMLP().eval(), exported


def ipu_args(tmp_path, name, **kwargs):
    base = dict(report_to="none", disable_tqdm=True, save_strategy="no", per_device_train_batch_size=16,
                per_device_eval_batch_size=16, fp32=True, logging_steps=1)
    base.update(kwargs)
    return IPUTrainingArguments(output_dir=str(tmp_path / name), **base)


class StepLosses(kiln.TrainerCallback):
    def __init__(self):
        self.losses, self.step_ends = [], 0

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ends += 1

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append((state.global_step, logs["loss"]))


# ---- IPUConfig ------------------------------------------------------------------------------------
def test_ipu_config_json_round_trip_and_overrides(tmp_path):
    c = IPUConfig(layers_per_ipu=[2, 2], matmul_proportion=[0.1, 0.2], device_iterations=4, seed=7)
    assert c.ipus_per_replica == 2 and c.inference_ipus_per_replica == 2 and c.replication_factor == 1
    c.save_pretrained(tmp_path / "cfg")
    back = IPUConfig.from_pretrained(tmp_path / "cfg")
    assert back == c and back.to_dict() == json.loads((tmp_path / "cfg" / "ipu_config.json").read_text())
    assert IPUConfig.from_pretrained(str(tmp_path / "cfg" / "ipu_config.json")) == c
    assert IPUConfig.from_dict(c.to_dict()) == c
    c.update_from_string("device_iterations=16,gradient_accumulation_steps=8,inference_layers_per_ipu=[4],"
                         "inference_ipus_per_replica=1,inference_matmul_proportion=0.2")
    assert c.device_iterations == 16 and c.gradient_accumulation_steps == 8
    assert c.eval()._layers_per_ipu == [4] and c.train()._layers_per_ipu == [2, 2]
    assert c.layers_per_stage(4) == [2, 2]
    assert IPUConfig(layers_per_ipu=[1, -1, -1]).layers_per_stage(5) == [1, 2, 2]


def test_ipu_config_errors_name_the_field(tmp_path):
    with pytest.raises(kiln.InvalidArgument, match="unknown arguments: layer_per_ipu"):
        IPUConfig(layer_per_ipu=[1])
    with pytest.raises(kiln.InvalidArgument, match="`device_iterations` must be >= 1"):
        IPUConfig(device_iterations=0)
    with pytest.raises(kiln.InvalidArgument, match=r"layers_per_ipu=\[1, 2\] should use the same number of stages"):
        IPUConfig(layers_per_ipu=[1, 2], ipus_per_replica=3)
    with pytest.raises(kiln.InvalidArgument, match="isn't in the original config dict"):
        IPUConfig().update_from_string("device_iteration=2")
    with pytest.raises(AttributeError, match="no field 'bogus'"):
        IPUConfig().bogus = 1
    with pytest.raises(kiln.InvalidArgument, match="do not divide evenly"):
        IPUConfig(layers_per_ipu=[-1, -1]).layers_per_stage(5)
    (tmp_path / "bad.json").write_text('{"seed": ')
    with pytest.raises(kiln.InvalidArgument, match="is not valid JSON"):
        IPUConfig.from_pretrained(tmp_path / "bad.json")


def test_ipu_training_arguments_default_to_16_bits():
    assert IPUTrainingArguments(output_dir="x").fp16 is True  # optimum trains in half precision
    assert IPUTrainingArguments(output_dir="x", fp32=True).fp16 is False
    assert IPUTrainingArguments(output_dir="x", bf16=True).fp16 is False
    assert kiln.TrainingArguments(output_dir="x").fp32 is None
    with pytest.raises(kiln.InvalidArgument, match="fp32=True asks for float32"):
        IPUTrainingArguments(output_dir="x", fp32=True, fp16=True)
    args = IPUSeq2SeqTrainingArguments(output_dir="x", generation_max_length=32)
    assert args.to_dict()["generation_max_length"] == 32 and args.predict_with_generate is False
    assert IPUSeq2SeqTrainingArguments(output_dir="x", predict_with_generate=True).predict_with_generate


# ---- LAMB -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias_correction", [True, False])
def test_lamb_through_the_on_device_api_matches_torch(tmp_path, bias_correction):
    """Artifacts with OptimType.Lamb, 8 steps of the on-device API against the torch MLP under
    TorchLamb (the paper's algorithm, tests/python/torch_lamb.py) with the same batches: weights
    within 1e-5 relative after every step (the norms are summed in another order)."""
    from kiln.training import api, artifacts
    module, path = export_mlp(tmp_path / "mlp.onnx")
    artifacts.generate_artifacts(onnx.load(path), requires_grad=[n for n, _ in module.named_parameters()],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.Lamb,
                                 artifact_directory=tmp_path / "art")
    opt_model = onnx.load(tmp_path / "art" / "optimizer_model.onnx")
    assert {n.op_type for n in opt_model.graph.node} == {"LambStep"}
    if not bias_correction:  # lamb_no_bias_correction: the attribute, as the Trainer writes it
        for node in opt_model.graph.node:
            for a in node.attribute:
                if a.name == "bias_correction":
                    a.i = 0
        onnx.save(opt_model, tmp_path / "art" / "optimizer_model.onnx")
    state = api.CheckpointState.load_checkpoint(tmp_path / "art" / "checkpoint")
    model = api.Module(tmp_path / "art" / "training_model.onnx", state, tmp_path / "art" / "eval_model.onnx")
    optimizer = api.Optimizer(tmp_path / "art" / "optimizer_model.onnx", model)
    optimizer.set_learning_rate(0.01)
    reference = TorchLamb(module.parameters(), lr=0.01, eps=1e-8, weight_decay=0.01, bias_correction=bias_correction)
    data = blobs(8 * 16, 3)
    for step in range(8):
        batch = data[step * 16:(step + 1) * 16]
        x = np.stack([d["input"] for d in batch])
        y = np.array([d["labels"] for d in batch], dtype=np.int64)
        model.train()
        model(x, y)
        optimizer.step()
        model.lazy_reset_grad()
        reference.zero_grad()
        torch.nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        reference.step()
        got = dict(zip([n for n, _ in module.named_parameters()], np.split(
            model.get_contiguous_parameters(trainable_only=True),
            np.cumsum([p.numel() for p in module.parameters()])[:-1])))
        for name, p in module.named_parameters():
            want = p.detach().numpy().ravel()
            err = np.abs(got[name] - want).max() / max(1.0, np.abs(want).max())
            assert err <= 1e-5, f"{name} step {step + 1}: {err:.3g}"


def test_trainer_lamb_flags_write_lamb_artifacts(tmp_path):
    _, path = export_mlp(tmp_path / "mlp.onnx")
    for flag, correction in (("lamb", 1), ("lamb_no_bias_correction", 0)):
        args = ipu_args(tmp_path, flag, max_steps=30, learning_rate=0.02, **{flag: True})
        trainer = IPUTrainer(model=path, ipu_config=IPUConfig(), args=args, train_dataset=blobs(256, 1))
        out = trainer.train()
        opt = onnx.load(tmp_path / flag / "artifacts" / "optimizer_model.onnx")
        attrs = {a.name: a for a in opt.graph.node[0].attribute}
        assert opt.graph.node[0].op_type == "LambStep" and attrs["bias_correction"].i == correction
        assert out.training_loss < 1.0, out


# ---- device_iterations, output_mode ---------------------------------------------------------
def train_mlp(tmp_path, name, path, ipu_config, n=200, **kwargs):
    args = ipu_args(tmp_path, name, num_train_epochs=2, **kwargs)
    record = StepLosses()
    trainer = IPUTrainer(model=path, ipu_config=ipu_config, args=args, train_dataset=blobs(n, 1),
                         eval_dataset=blobs(40, 2), callbacks=[record])
    out = trainer.train()
    return trainer, out, record


def test_device_iterations_train_the_same_and_callbacks_follow_output_mode(tmp_path):
    _, path = export_mlp(tmp_path / "mlp.onnx")
    _, one, r1 = train_mlp(tmp_path, "one", path, IPUConfig())
    _, final, rf = train_mlp(tmp_path, "final", path, IPUConfig(device_iterations=4))
    _, every, ra = train_mlp(tmp_path, "all", path, IPUConfig(device_iterations=4, output_mode="all"))
    steps = one.global_step  # 2 epochs of ceil(200 / 16) = 13 batches
    assert steps == 26 and final.global_step == steps and every.global_step == steps
    assert final.training_loss == one.training_loss and every.training_loss == one.training_loss
    assert r1.step_ends == steps and ra.step_ends == steps and ra.losses == r1.losses
    # "final": the callbacks hear of each call's last update: 4 updates per call, the epoch's end cuts one.
    assert rf.step_ends == 2 * 4  # 13 updates per epoch: calls of 4, 4, 4, 1
    assert [s for s, _ in rf.losses] == [4, 8, 12, 13, 17, 21, 25, 26]


# ---- pad_on_batch_axis --------------------------------------------------------------------------
def test_pad_on_batch_axis_equals_the_unpadded_run(tmp_path):
    """200 examples in batches of 16: the last of each epoch has 8 real rows. Padded to 16 (labels
    -100, inputs the last row repeated) the losses, the weights and the metrics equal the unpadded
    run's (the same operations on the real rows; the padded rows' loss terms are ignored): 1e-6."""
    _, path = export_mlp(tmp_path / "mlp.onnx")
    plain, out_plain, rp = train_mlp(tmp_path, "plain", path, IPUConfig())
    padded, out_pad, rq = train_mlp(tmp_path, "pad", path, IPUConfig(), pad_on_batch_axis=True)
    assert len(rp.losses) == len(rq.losses) == out_plain.global_step
    for (s1, a), (s2, b) in zip(rp.losses, rq.losses):
        assert s1 == s2 and abs(a - b) <= 1e-6 * max(1.0, abs(a)), (s1, a, b)
    w1, w2 = plain._core.parameter_values(), padded._core.parameter_values()
    for k in w1:
        assert np.abs(np.asarray(w1[k]) - np.asarray(w2[k])).max() <= 1e-6, k
    eval_data = blobs(40, 2)  # 40 in batches of 16: the last has 8
    m1, m2 = plain.evaluate(eval_data), padded.evaluate(eval_data)
    assert abs(m1["eval_loss"] - m2["eval_loss"]) <= 1e-6
    p1, p2 = plain.predict(eval_data), padded.predict(eval_data)
    assert p2.predictions.shape == (40, N_CLASSES)
    np.testing.assert_allclose(p2.predictions, p1.predictions, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(p2.label_ids, p1.label_ids)


def test_pad_on_batch_axis_refuses_batch_norm(tmp_path):
    args = ipu_args(tmp_path, "bn", max_steps=2, pad_on_batch_axis=True)
    data = [{"input": np.zeros((1, 28, 28), np.float32), "labels": np.int64(i % 10)} for i in range(20)]
    with pytest.raises(kiln.Unsupported, match="pad_on_batch_axis: .*BatchNormalization"):
        IPUTrainer(model="lenet", ipu_config=IPUConfig(), args=args, train_dataset=data)


# ---- compile_only, and what Kiln does not run -----------------------------------------------
def test_compile_only_plans_and_takes_no_step(tmp_path):
    _, path = export_mlp(tmp_path / "mlp.onnx")
    args = ipu_args(tmp_path, "compile", compile_only=True, eval_strategy="steps", eval_steps=5, max_steps=10)
    trainer = IPUTrainer(model=path, ipu_config=IPUConfig(), args=args, train_dataset=blobs(64, 1),
                         eval_dataset=blobs(32, 2))
    out = trainer.train()
    assert out.global_step == 0 and trainer.state.global_step == 0
    for key in ("train_plan_bytes", "eval_plan_bytes"):
        assert out.metrics[key] > 0, key
    # The plans the steps run: the optimizer's binds every parameter and slot, which its updates
    # write in place, so it needs no arena at all.
    assert out.metrics["optimizer_plan_bytes"] == 0
    assert not list((tmp_path / "compile").glob("checkpoint-*"))


def test_executable_cache_reuses_checked_artifacts(tmp_path, capfd):
    """executable_cache_dir: the first run stores its artifacts; a later run links them (the same
    files) and trains the same; a corrupted entry is ignored with a warning and stored again; other
    options make another entry."""
    import os
    _, path = export_mlp(tmp_path / "mlp.onnx")
    cache = tmp_path / "cache"

    def run(name, **more):
        args = ipu_args(tmp_path, name, max_steps=4, logging_steps=1, **more)
        trainer = IPUTrainer(model=path, ipu_config=IPUConfig(executable_cache_dir=str(cache)), args=args,
                             train_dataset=blobs(64, 1))
        trainer.train()
        return [e["loss"] for e in trainer.state.log_history if "loss" in e]

    first = run("a")
    entries = [p for p in cache.iterdir() if not p.name.startswith(".") and p.name != "plans"]
    assert len(entries) == 1 and (entries[0] / "manifest.json").is_file()
    entry = entries[0]
    assert run("b") == first
    for name in ("training_model.onnx", "checkpoint"):  # linked from the cache, not built again
        assert os.stat(tmp_path / "b" / "artifacts" / name).st_ino == os.stat(entry / name).st_ino
    with open(entry / "checkpoint", "r+b") as f:
        f.truncate(100)
    capfd.readouterr()
    assert run("c") == first
    assert "ignoring the cache entry" in capfd.readouterr().err
    assert os.stat(entry / "checkpoint").st_size > 100  # written again
    run("d", learning_rate=0.5)  # the optimizer model holds the learning rate: another entry
    assert len([p for p in cache.iterdir() if not p.name.startswith(".") and p.name != "plans"]) == 2


def test_executable_cache_holds_the_plans(tmp_path, capfd):
    """executable_cache_dir also holds the plans (the fused graphs, each signature's memory plan):
    compile_only fills it, a later compile_only and a later training run load every graph's plan
    from it and train as a run without any cache does; a corrupt plan is ignored with a warning."""
    _, path = export_mlp(tmp_path / "mlp.onnx")
    cache = tmp_path / "cache"

    def run(name, cached=True, **more):
        args = ipu_args(tmp_path, name, max_steps=4, logging_steps=1, eval_strategy="steps", eval_steps=2, **more)
        capfd.readouterr()
        config = IPUConfig(**({"executable_cache_dir": str(cache)} if cached else {}))
        trainer = IPUTrainer(model=path, ipu_config=config, args=args, train_dataset=blobs(64, 1),
                             eval_dataset=blobs(32, 2))
        trainer.train()
        err = capfd.readouterr().err
        return [e["loss"] for e in trainer.state.log_history if "loss" in e], err

    _, err = run("fill", compile_only=True)
    assert "compile_only: training model planned" in err and "from the plan cache" not in err, err
    _, err = run("again", compile_only=True)
    for graph in ("training", "eval", "optimizer"):
        assert f"{graph} model planned" in err and err.count("(from the plan cache: graph, memory plan)") == 3, err
    plans = sorted((cache / "plans").rglob("*.kplan"))
    assert len(plans) == 6, plans  # three graphs, one memory plan each
    uncached, _ = run("plain", cached=False)
    assert run("cached")[0] == uncached
    assert len(sorted((cache / "plans").rglob("*.kplan"))) == 6  # the steps ran the plans compile_only made
    graph = next(p for p in plans if p.name == "graph.kplan")
    data = bytearray(graph.read_bytes())
    data[-50] ^= 1
    graph.write_bytes(bytes(data))
    losses, err = run("corrupt")
    assert losses == uncached
    assert "plan cache: ignoring" in err and "changed or truncated" in err, err


def test_a_session_takes_the_plan_cache(tmp_path):
    """kiln._kiln.Session(plan_cache_dir=...): the second Session of a model plans from the cache and
    computes what an uncached one does; plan() plans without running."""
    _, path = export_mlp(tmp_path / "mlp.onnx")
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    want = kiln._kiln.Session(path).run({"input": x})
    cache = str(tmp_path / "plans")
    first = kiln._kiln.Session(path, plan_cache_dir=cache)
    stats = first.plan({"input": [5, 8]})
    assert not stats["graph_from_cache"] and not stats["memory_plan_from_cache"] and stats["num_steps"] > 0
    second = kiln._kiln.Session(path, plan_cache_dir=cache)
    assert second.plan({"input": [5, 8]})["memory_plan_from_cache"]
    got = second.run({"input": x})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_rank_counts_and_what_kiln_does_not_run_are_clear_errors(tmp_path):
    _, path = export_mlp(tmp_path / "mlp.onnx")
    args = ipu_args(tmp_path, "pipe", max_steps=2)
    with pytest.raises(kiln.InvalidArgument, match=r"replication_factor=1 x 2 stage\(s\) = 2 ranks, but the run has 1"):
        IPUTrainer(model=path, ipu_config=IPUConfig(layers_per_ipu=[1, 1]), args=args, train_dataset=blobs(32, 1))
    with pytest.raises(kiln.Unsupported, match="serialized_.*_splits_per_ipu place chunks on pipeline stages"):
        IPUTrainer(model=path, ipu_config=IPUConfig(serialized_projection_splits_per_ipu=[1]), args=args,
                   train_dataset=blobs(32, 1))
    with pytest.raises(kiln.InvalidArgument, match="replication_factor=2 x 1 stage"):
        IPUTrainer(model=path, ipu_config=IPUConfig(replication_factor=2), args=args, train_dataset=blobs(32, 1))
    with pytest.raises(kiln.InvalidArgument, match="loss_scaling scales the loss of float16"):
        IPUTrainer(model=path, ipu_config=IPUConfig(loss_scaling=128.0), args=args, train_dataset=blobs(32, 1))


# ---- The optimum-graphcore example, and the flags of `kiln train` ---------------------------------
def test_the_example_script_runs_with_its_imports_changed(tmp_path):
    import importlib.util
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "examples" / "ipu"
    spec = importlib.util.spec_from_file_location("ipu_example", example / "run_image_classification.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    metrics = module.main(["--output_dir", str(tmp_path / "run"), "--num_train_epochs", "3", "--ipu_config_name",
                           str(example), "--lamb", "--fp32", "--learning_rate", "0.01", "--report_to", "none",
                           "--disable_tqdm", "true", "--save_strategy", "no"])
    assert metrics["eval_accuracy"] > 0.9, metrics  # sklearn's digits, 297 held out
    assert (tmp_path / "run" / "model.onnx").exists()


def test_kiln_train_takes_the_ipu_flags(tmp_path):
    from kiln_cli import run_kiln
    (tmp_path / "cfg").mkdir()
    IPUConfig(device_iterations=4).save_pretrained(tmp_path / "cfg")
    proc = run_kiln("train", "--output_dir", tmp_path / "run", "--max_steps", "8", "--save_strategy", "no",
                    "--ipu_config_name", tmp_path / "cfg", "--ipu_config_overrides", "gradient_accumulation_steps=2",
                    "--lamb_no_bias_correction", "--fp32", "--n_ipu", "1", "--dataloader_mode", "async",
                    "--compile_only", "--disable_tqdm", "true")
    assert proc.returncode == 0, proc.stderr
    assert "compile_only: training model planned" in proc.stderr
    opt = onnx.load(tmp_path / "run" / "artifacts" / "optimizer_model.onnx")
    assert opt.graph.node[0].op_type == "LambStep"
    proc = run_kiln("train", "--output_dir", tmp_path / "bad", "--n_ipu", "2", "--ipu_config_overrides",
                    "device_iterations=2", "--fp32")
    assert proc.returncode != 0 and "n_ipu=2 but the run has 1 ranks" in proc.stderr
