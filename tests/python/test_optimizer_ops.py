"""PyTorch parity of Kiln's optimizer ops: a one-node ONNX graph with ai.kiln.AdamWStep, SGDStep or
AdagradStep is
run with `kiln run` for 10 steps (step = 1..10, each step's outputs fed back as the next inputs, a
fresh gradient each step) and compared after every step with torch.optim.AdamW / SGD / Adagrad
(foreach=False) given the same hyperparameters and p.grad set to the same gradient.

Tolerance: max |kiln - torch| <= 1e-6 * max(1, max |torch|) for every tensor (parameter and
optimizer state) after every step. The kernels reproduce torch 1.13's CPU arithmetic, so the
observed difference is 0; the tolerance leaves room for a torch build whose kernels fuse
multiply-adds differently.
"""
import math

import numpy as np
import onnx
import pytest
import torch
from kiln_cli import run_kiln
from onnx import TensorProto, helper
from torch_lamb import TorchLamb

KILN_DOMAIN = "ai.kiln"
STEPS = 10


def optimizer_model(op, dtype, shape, attrs, with_buffer=False):
    """A model with one `op` node: inputs lr, step, X, G (and M, V or momentum_buffer); outputs the
    updated tensors."""
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    if op in ("AdamWStep", "LambStep"):
        state_in, state_out = ["X", "G", "M", "V"], ["X_new", "M_new", "V_new"]
    elif op == "AdagradStep":
        state_in, state_out = ["X", "G", "sum"], ["X_new", "sum_new"]
    else:
        state_in = ["X", "G"] + (["momentum_buffer"] if with_buffer else [])
        state_out = ["X_new"] + (["momentum_buffer_new"] if with_buffer else [])
    inputs = [helper.make_tensor_value_info("lr", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("step", TensorProto.INT64, [])]
    inputs += [helper.make_tensor_value_info(n, elem, list(shape)) for n in state_in]
    outputs = [helper.make_tensor_value_info(n, elem, list(shape)) for n in state_out]
    node = helper.make_node(op, ["lr", "step"] + state_in, state_out, domain=KILN_DOMAIN, **attrs)
    graph = helper.make_graph([node], f"{op}_parity", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(KILN_DOMAIN, 1)])


def run_steps(kiln, tmp_path, model, feeds, grads, lr, carry):
    """Runs the model once per gradient; `carry` maps each output to the input it becomes.
    Returns, per step, the outputs as numpy arrays."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    np.save(tmp_path / "lr.npy", np.array(lr, dtype=np.float32))
    history = []
    for t, g in enumerate(grads, start=1):
        feeds = dict(feeds, G=g)
        np.save(tmp_path / "step.npy", np.array(t, dtype=np.int64))
        args = ["run", path, "--input", f"lr={tmp_path / 'lr.npy'}", "--input", f"step={tmp_path / 'step.npy'}"]
        for name, value in feeds.items():
            np.save(tmp_path / f"{name}.npy", value)
            args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
        out_dir = tmp_path / f"out{t}"
        proc = run_kiln(*args, "--output-dir", out_dir)
        assert proc.returncode == 0, proc.stderr
        outs = {name: np.load(out_dir / f"{name}.npy") for name in carry}
        history.append(outs)
        feeds = dict(feeds, **{carry[name]: outs[name] for name in carry})
    return history


def assert_close(got, want, what):
    """Kiln's loops do torch's arithmetic in torch's order (optimizer_kiln.cpp), so the results are
    equal bit for bit, on whichever instruction set Kiln's loops run."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
    assert np.array_equal(got, want), f"{what}: max |kiln - torch| = {diff:.3g}, expected equal bits"


def random_problem(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    grads = [rng.standard_normal(shape).astype(dtype) for _ in range(STEPS)]
    return x, grads


# The learning rate reaches Kiln as float32; torch gets the decimal it was written as, which the
# kernels recover from the float (see src/kernels/cpu/optimizer_common.h).
ADAMW_CASES = [
    # (name, dtype, shape, lr, node attributes, torch keyword arguments)
    ("defaults", np.float32, (64, 1031), 1e-3, {}, {}),
    ("custom", np.float32, (37, 19), 1e-2,
     dict(beta1=0.8, beta2=0.99, epsilon=1e-6, weight_decay=0.1, maximize=1),
     dict(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, maximize=True)),
    ("no_decay_f64", np.float64, (5, 7, 3), 3e-3,
     dict(beta1=0.95, beta2=0.9, weight_decay=0.0), dict(betas=(0.95, 0.9), weight_decay=0.0)),
]


@pytest.mark.parametrize("name,dtype,shape,lr,attrs,kwargs", ADAMW_CASES, ids=[c[0] for c in ADAMW_CASES])
def test_adamw_step_matches_torch(kiln, tmp_path, name, dtype, shape, lr, attrs, kwargs):
    x, grads = random_problem(dtype, shape, seed=len(name))
    model = optimizer_model("AdamWStep", dtype, shape, attrs)
    zeros = np.zeros(shape, dtype=dtype)
    history = run_steps(kiln, tmp_path, model, {"X": x, "M": zeros, "V": zeros}, grads, lr,
                        carry={"X_new": "X", "M_new": "M", "V_new": "V"})

    p = torch.nn.Parameter(torch.from_numpy(x.copy()))
    opt = torch.optim.AdamW([p], lr=lr, foreach=False, **kwargs)
    for t, g in enumerate(grads, start=1):
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        state = opt.state[p]
        outs = history[t - 1]
        assert_close(outs["X_new"], p.detach().numpy(), f"{name} step {t} X")
        assert_close(outs["M_new"], state["exp_avg"].numpy(), f"{name} step {t} M")
        assert_close(outs["V_new"], state["exp_avg_sq"].numpy(), f"{name} step {t} V")


SGD_CASES = [
    ("defaults", np.float32, (64, 1031), 0.1, {}, {}),
    ("momentum_dampening", np.float32, (37, 19), 0.05,
     dict(momentum=0.9, dampening=0.1, weight_decay=1e-4), dict(momentum=0.9, dampening=0.1, weight_decay=1e-4)),
    ("nesterov", np.float32, (37, 19), 0.02,
     dict(momentum=0.9, nesterov=1, weight_decay=0.01), dict(momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("nesterov_maximize_f64", np.float64, (5, 7, 3), 0.02,
     dict(momentum=0.8, nesterov=1, maximize=1), dict(momentum=0.8, nesterov=True, maximize=True)),
]


@pytest.mark.parametrize("name,dtype,shape,lr,attrs,kwargs", SGD_CASES, ids=[c[0] for c in SGD_CASES])
def test_sgd_step_matches_torch(kiln, tmp_path, name, dtype, shape, lr, attrs, kwargs):
    x, grads = random_problem(dtype, shape, seed=len(name))
    with_buffer = attrs.get("momentum", 0) != 0
    model = optimizer_model("SGDStep", dtype, shape, attrs, with_buffer)
    feeds = {"X": x}
    carry = {"X_new": "X"}
    if with_buffer:
        # Nonzero on purpose: at step 1 the kernel must start the buffer from the gradient, as torch.
        feeds["momentum_buffer"] = np.full(shape, 7.0, dtype=dtype)
        carry["momentum_buffer_new"] = "momentum_buffer"
    history = run_steps(kiln, tmp_path, model, feeds, grads, lr, carry)

    p = torch.nn.Parameter(torch.from_numpy(x.copy()))
    opt = torch.optim.SGD([p], lr=lr, foreach=False, **kwargs)
    for t, g in enumerate(grads, start=1):
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        outs = history[t - 1]
        assert_close(outs["X_new"], p.detach().numpy(), f"{name} step {t} X")
        if with_buffer:
            assert_close(outs["momentum_buffer_new"], opt.state[p]["momentum_buffer"].numpy(), f"{name} step {t} buf")


ADAGRAD_CASES = [
    ("defaults", np.float32, (64, 1031), 1e-2, {}, {}),
    ("decays", np.float32, (37, 19), 0.05,
     dict(lr_decay=0.1, weight_decay=0.01, initial_accumulator_value=0.5, epsilon=1e-6),
     dict(lr_decay=0.1, weight_decay=0.01, initial_accumulator_value=0.5, eps=1e-6)),
    ("maximize_f64", np.float64, (5, 7, 3), 0.02, dict(maximize=1, weight_decay=0.1),
     dict(maximize=True, weight_decay=0.1)),
]


@pytest.mark.parametrize("name,dtype,shape,lr,attrs,kwargs", ADAGRAD_CASES, ids=[c[0] for c in ADAGRAD_CASES])
def test_adagrad_step_matches_torch(kiln, tmp_path, name, dtype, shape, lr, attrs, kwargs):
    x, grads = random_problem(dtype, shape, seed=len(name))
    model = optimizer_model("AdagradStep", dtype, shape, attrs)
    # Nonzero on purpose: at step 1 the kernel starts from initial_accumulator_value, as torch.
    history = run_steps(kiln, tmp_path, model, {"X": x, "sum": np.full(shape, 3.0, dtype=dtype)}, grads, lr,
                        carry={"X_new": "X", "sum_new": "sum"})
    p = torch.nn.Parameter(torch.from_numpy(x.copy()))
    opt = torch.optim.Adagrad([p], lr=lr, foreach=False, **kwargs)
    for t, g in enumerate(grads, start=1):
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        outs = history[t - 1]
        assert_close(outs["X_new"], p.detach().numpy(), f"{name} step {t} X")
        assert_close(outs["sum_new"], opt.state[p]["sum"].numpy(), f"{name} step {t} sum")


@pytest.mark.parametrize("attrs,message", [(dict(lr_decay=-0.1), "lr_decay = -0.1"),
                                           (dict(initial_accumulator_value=-1.0), "initial_accumulator_value = -1"),
                                           (dict(weight_decay=-1.0), "weight_decay = -1")])
def test_adagrad_step_rejects_torch_s_invalid_values(kiln, tmp_path, attrs, message):
    model = optimizer_model("AdagradStep", np.float32, (3,), attrs)
    onnx.save(model, tmp_path / "m.onnx")
    feeds = {"lr": np.array(0.1, np.float32), "step": np.array(1, np.int64), "X": np.zeros(3, np.float32),
             "G": np.zeros(3, np.float32), "sum": np.zeros(3, np.float32)}
    args = ["run", tmp_path / "m.onnx"]
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    proc = run_kiln(*args, "--output-dir", tmp_path / "out")
    assert proc.returncode != 0 and "AdagradStep" in proc.stderr and message in proc.stderr, proc.stderr


def hf_adamw(x, grads, lr, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0):
    """transformers.AdamW.step (optimization.py, correct_bias=True) re-typed with torch tensor ops,
    one parameter: the reference for AdamWStep's variant "hf"."""
    p = torch.from_numpy(x.copy())
    exp_avg, exp_avg_sq = torch.zeros_like(p), torch.zeros_like(p)
    history = []
    for step, g in enumerate(grads, start=1):
        grad = torch.from_numpy(g.copy())
        exp_avg.mul_(beta1).add_(grad, alpha=(1.0 - beta1))
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = exp_avg_sq.sqrt().add_(eps)
        step_size = lr * math.sqrt(1.0 - beta2 ** step) / (1.0 - beta1 ** step)
        p.addcdiv_(exp_avg, denom, value=-step_size)
        if weight_decay > 0.0:
            p.add_(p, alpha=(-lr * weight_decay))
        history.append((p.numpy().copy(), exp_avg.numpy().copy(), exp_avg_sq.numpy().copy()))
    return history


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adamw_step_hf_variant_matches_transformers_adamw(kiln, tmp_path, weight_decay):
    shape = (31, 17)
    x, grads = random_problem(np.float32, shape, seed=7)
    attrs = dict(epsilon=1e-6, weight_decay=weight_decay, variant="hf")
    model = optimizer_model("AdamWStep", np.float32, shape, attrs)
    zeros = np.zeros(shape, dtype=np.float32)
    history = run_steps(kiln, tmp_path, model, {"X": x, "M": zeros, "V": zeros}, grads, 1e-3,
                        carry={"X_new": "X", "M_new": "M", "V_new": "V"})
    for t, (px, m, v) in enumerate(hf_adamw(x, grads, 1e-3, eps=1e-6, weight_decay=weight_decay), start=1):
        assert_close(history[t - 1]["X_new"], px, f"hf step {t} X")
        assert_close(history[t - 1]["M_new"], m, f"hf step {t} M")
        assert_close(history[t - 1]["V_new"], v, f"hf step {t} V")


@pytest.mark.parametrize("bias_correction,max_weight_norm,wd", [(True, None, 0.01), (False, None, 0.1),
                                                                (True, 2.0, 0.0)])
def test_lamb_matches_a_torch_implementation_of_the_paper(kiln, tmp_path, bias_correction, max_weight_norm, wd):
    """ai.kiln.LambStep over 10 steps against TorchLamb (above). Kiln sums the norms in double over
    fixed blocks and torch in its own order, and the elementwise arithmetic rounds in a different
    order: max |kiln - torch| <= 1e-5 * max(1, max |torch|) after every step (observed ~1e-7)."""
    shape, lr = (33, 17), 0.02
    x, grads = random_problem(np.float32, shape, 7)
    attrs = dict(beta1=0.9, beta2=0.999, epsilon=1e-6, weight_decay=wd,
                 bias_correction=int(bias_correction))
    if max_weight_norm is not None:
        attrs["max_weight_norm"] = max_weight_norm
    model = optimizer_model("LambStep", np.float32, shape, attrs)
    zeros = np.zeros(shape, np.float32)
    history = run_steps(kiln, tmp_path, model, dict(X=x, M=zeros, V=zeros), grads, lr,
                        {"X_new": "X", "M_new": "M", "V_new": "V"})
    p = torch.nn.Parameter(torch.from_numpy(x.copy()))
    opt = TorchLamb([p], lr=lr, eps=1e-6, weight_decay=wd, bias_correction=bias_correction,
                    max_weight_norm=max_weight_norm)
    for t, g in enumerate(grads):
        p.grad = torch.from_numpy(g)
        opt.step()
        want = {"X_new": p.detach().numpy(), "M_new": opt.state[p]["m"].numpy(), "V_new": opt.state[p]["v"].numpy()}
        for name, w in want.items():
            got = history[t][name]
            tol = 1e-5 * max(1.0, float(np.abs(w).max()))
            assert float(np.abs(got - w).max()) <= tol, f"{name} step {t + 1}"
