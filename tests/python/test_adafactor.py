"""Adafactor against a torch reference written from transformers' published algorithm
(torch_adafactor.py):

- the op: a one-node ai.kiln.AdafactorStep graph run with `kiln run` for 10 steps, compared after
  every step (parameter and every state tensor) for vectors (a whole second moment), matrices and a
  rank-3 tensor (factored row / column moments), with each option: relative_step, scale_parameter,
  warmup_init, beta1, weight_decay, clip_threshold, float64. Tolerance: max |kiln - torch| <=
  2e-6 * max(1, max |torch|) (Kiln sums the means in double, torch in float32);
- the Trainer: optim="adafactor" (HF's: scale_parameter=False, relative_step=False, the Trainer's
  rate and weight decay groups) and `optimizers=` with an Adafactor object, each against a PyTorch
  loop with the reference (per-step losses within 1e-4 relative, weights within 1e-4); a resumed run
  gives the weights of an uninterrupted one (the factored slots reloaded)."""
import numpy as np
import onnx
import pytest
import torch
from kiln_package import import_kiln
from onnx import TensorProto, helper
from test_optimizer_ops import random_problem, run_steps
from test_trainer_optimizers import Net, arguments, hf_groups, items, torch_loop
from torch_adafactor import Adafactor
from training_parity import assert_trainer_matches

import_kiln()
import kiln  # noqa: E402

SLOTS = ["exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq", "exp_avg"]


def slot_shapes(shape, beta1):
    shape = list(shape)
    if len(shape) >= 2:
        out = {"exp_avg_sq_row": shape[:-1], "exp_avg_sq_col": shape[:-2] + shape[-1:]}
    else:
        out = {"exp_avg_sq": shape}
    if beta1:
        out["exp_avg"] = shape
    return out


def adafactor_model(dtype, shape, attrs):
    """lr, step, X, G and the slots the shape has, positionally (an absent slot is an empty name)."""
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    shapes = slot_shapes(shape, "beta1" in attrs)
    ins, outs = ["lr", "step", "X", "G"], ["X_new"]
    for s in SLOTS:
        ins.append(s if s in shapes else "")
        outs.append(s + "_new" if s in shapes else "")
    while not ins[-1]:
        ins.pop()
        outs.pop()
    inputs = [helper.make_tensor_value_info("lr", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("step", TensorProto.INT64, []),
              helper.make_tensor_value_info("X", elem, list(shape)),
              helper.make_tensor_value_info("G", elem, list(shape))]
    inputs += [helper.make_tensor_value_info(s, elem, shapes[s]) for s in SLOTS if s in shapes]
    outputs = [helper.make_tensor_value_info("X_new", elem, list(shape))]
    outputs += [helper.make_tensor_value_info(s + "_new", elem, shapes[s]) for s in SLOTS if s in shapes]
    node = helper.make_node("AdafactorStep", ins, outs, domain="ai.kiln", **attrs)
    graph = helper.make_graph([node], "adafactor", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.kiln", 1)])


CASES = [
    # (name, dtype, shape, lr, node attributes, reference keyword arguments)
    ("defaults-matrix", np.float32, (33, 70), 0.0, {}, {}),
    ("defaults-vector", np.float32, (101,), 0.0, {}, {}),
    ("trainer-matrix", np.float32, (16, 5), 1e-2,
     {"scale_parameter": 0, "relative_step": 0, "weight_decay": 0.01},
     {"lr": 1e-2, "scale_parameter": False, "relative_step": False, "weight_decay": 0.01}),
    ("beta1-rank3", np.float32, (3, 8, 6), 3e-3,
     {"scale_parameter": 0, "relative_step": 0, "beta1": 0.9, "clip_threshold": 0.5},
     {"lr": 3e-3, "scale_parameter": False, "relative_step": False, "beta1": 0.9, "clip_threshold": 0.5}),
    ("warmup-init-beta1-vector", np.float32, (40,), 0.0, {"warmup_init": 1, "beta1": 0.8, "decay_rate": -0.5},
     {"warmup_init": True, "beta1": 0.8, "decay_rate": -0.5}),
    ("float64-matrix", np.float64, (12, 9), 0.0, {"eps1": 1e-20, "eps2": 1e-2}, {"eps": (1e-20, 1e-2)}),
]


@pytest.mark.parametrize("name,dtype,shape,lr,attrs,kwargs", CASES, ids=[c[0] for c in CASES])
def test_adafactor_step_matches_the_reference(kiln, tmp_path, name, dtype, shape, lr, attrs, kwargs):
    x, grads = random_problem(dtype, shape, seed=len(name))
    shapes = slot_shapes(shape, "beta1" in attrs)
    feeds = {"X": x, **{s: np.zeros(v, dtype=dtype) for s, v in shapes.items()}}
    history = run_steps(kiln, tmp_path, adafactor_model(dtype, shape, attrs), feeds, grads, lr,
                        carry={"X_new": "X", **{s + "_new": s for s in shapes}})
    p = torch.nn.Parameter(torch.from_numpy(x.copy()))
    opt = Adafactor([p], **kwargs)
    for t, g in enumerate(grads, start=1):
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        outs = history[t - 1]
        want = {"X_new": p.detach().numpy(), **{s + "_new": opt.state[p][s].numpy() for s in shapes}}
        for key, value in want.items():
            scale = max(1.0, float(np.abs(value).max()))
            err = float(np.abs(outs[key].astype(np.float64) - value).max())
            assert outs[key].shape == value.shape and err <= 2e-6 * scale, f"{name} step {t} {key}: {err}"


def test_bad_adafactor_nodes_are_clear_errors(kiln, tmp_path):
    from kiln_cli import run_kiln

    def run(model, feeds):
        path = tmp_path / "bad.onnx"
        onnx.save(model, path)
        args = ["run", path]
        for name, value in feeds.items():
            np.save(tmp_path / f"{name}.npy", value)
            args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
        return run_kiln(*args)

    x = np.ones((4, 3), np.float32)
    feeds = {"lr": np.array(0.1, np.float32), "step": np.array(1, np.int64), "X": x, "G": x,
             "exp_avg_sq_row": np.zeros(4, np.float32), "exp_avg_sq_col": np.zeros(3, np.float32)}
    model = adafactor_model(np.float32, (4, 3), {})
    model.graph.node[0].input[4] = ""  # a matrix without its row statistics
    proc = run(model, feeds)
    assert proc.returncode != 0 and "exp_avg_sq_row) must be given for a parameter of shape [4, 3]" in proc.stderr, \
        proc.stderr
    model = adafactor_model(np.float32, (4, 3), {})
    model.graph.input[5].type.tensor_type.shape.dim[0].dim_value = 4  # exp_avg_sq_col declared [4]
    proc = run(model, dict(feeds, exp_avg_sq_col=np.zeros(4, np.float32)))
    assert proc.returncode != 0 and "exp_avg_sq_col has shape [4]" in proc.stderr, proc.stderr
    model = adafactor_model(np.float32, (4, 3), {"decay_rate": 0.5})
    proc = run(model, feeds)
    assert proc.returncode != 0 and "decay_rate = 0.5 must be < 0" in proc.stderr, proc.stderr


def test_optim_adafactor_is_hfs(tmp_path):
    model, reference = Net(), Net()
    args = arguments(tmp_path, optim="adafactor", weight_decay=0.05, lr_scheduler_type="constant")
    want = torch_loop(reference, Adafactor(hf_groups(reference, 0.05), lr=1e-2, scale_parameter=False,
                                           relative_step=False))
    trainer = kiln.Trainer(model=model, args=args, train_dataset=items())
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)
    assert trainer.optimizer_state_bytes() < 4 * sum(p.numel() for p in model.parameters())  # factored
    # v4's adafactor=True is optim="adafactor".
    assert arguments(tmp_path, adafactor=True).optim == "adafactor"


def test_an_adafactor_object_in_optimizers_with_relative_steps_and_beta1(tmp_path):
    model, reference = Net(), Net()
    options = dict(beta1=0.9, warmup_init=True, clip_threshold=0.8)
    want = torch_loop(reference, Adafactor(reference.parameters(), **options))
    trainer = kiln.Trainer(model=model, args=arguments(tmp_path, weight_decay=0.0), train_dataset=items(),
                           optimizers=(Adafactor(model.parameters(), **options), None))
    trainer.train()
    assert_trainer_matches(trainer, model, reference, want)


def test_a_resumed_adafactor_run_is_exact(tmp_path):
    def run(out, resume=None):
        model = Net()
        args = arguments(out, optim="adafactor", save_strategy="steps", save_steps=5, lr_scheduler_type="constant")
        trainer = kiln.Trainer(model=model, args=args, train_dataset=items())
        trainer.train(resume_from_checkpoint=resume)
        return model

    whole = run(tmp_path / "whole")
    resumed = run(tmp_path / "resumed", resume=str(tmp_path / "whole" / "run" / "checkpoint-5"))
    for (name, a), b in zip(whole.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), name


def test_generate_artifacts_with_adafactor_trains_as_the_reference(tmp_path):
    """OptimType.Adafactor in the on-device API: transformers' defaults (relative_step and
    scale_parameter), against the reference over 5 steps of a linear layer (weights within 1e-5)."""
    from kiln.training import artifacts
    from kiln.training.api import CheckpointState, Module, Optimizer
    torch.manual_seed(0)
    net = torch.nn.Linear(6, 3)
    reference = torch.nn.Linear(6, 3)
    reference.load_state_dict(net.state_dict())
    path = tmp_path / "linear.onnx"
    torch.onnx.export(net, torch.zeros(4, 6), path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}}, do_constant_folding=False, opset_version=17)
    artifacts.generate_artifacts(onnx.load(path), requires_grad=["weight", "bias"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.Adafactor,
                                 artifact_directory=tmp_path / "art")
    state = CheckpointState.load_checkpoint(str(tmp_path / "art" / "checkpoint"))
    module = Module(str(tmp_path / "art" / "training_model.onnx"), state)
    optimizer = Optimizer(str(tmp_path / "art" / "optimizer_model.onnx"), module)
    ref_opt = Adafactor(reference.parameters())
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        y = rng.integers(0, 3, 4).astype(np.int64)
        module.train()
        module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(reference(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        ref_opt.step()
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(state.parameters[name].data, p.detach().numpy(), atol=1e-5, err_msg=name)
