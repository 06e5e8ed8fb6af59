"""Kiln's learning-rate schedulers and clip_grad_norm against PyTorch and Hugging Face's formulas.

The lambdas below are re-typed from transformers/src/transformers/optimization.py (Hugging Face is not
installed here); each names the function it copies. Step-driven schedules run through
torch.optim.lr_scheduler.LambdaLR, reduce_lr_on_plateau is torch's ReduceLROnPlateau, clipping is
torch.nn.utils.clip_grad_norm_. Kiln's side is the gtest LRSchedulerDump.Request, run with
KILN_LR_DUMP=<dir>: it reads <dir>/request.json and writes <dir>/response.json.

Tolerances: rates 1e-12 relative (and in fact bit-identical, checked separately); clip norms 1e-12
relative for float64, 1e-6 for float32 (torch sums float32 norms in float32, Kiln in double).
"""
import json
import math
import os
import subprocess
from functools import partial

import kiln_cli
import numpy as np
import pytest
import torch

STEPS = 100  # every rate of a 100-step schedule, and 20 steps past its end


# --- transformers/optimization.py, re-typed ---------------------------------------------------------

def _get_constant_lambda(_=None):
    return 1


def _get_constant_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def _get_linear_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps, num_training_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


# HF defines _get_cosine_schedule_with_warmup_lr_lambda twice; the second definition (with
# min_lr_rate) is the one get_cosine_schedule_with_warmup ends up using.
def _get_cosine_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps, num_training_steps, num_cycles,
                                               min_lr_rate=0.0):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - min_lr_rate) + min_lr_rate
    return max(0, factor)


def _get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps,
                                                                  num_training_steps, num_cycles):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def _get_polynomial_decay_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps, num_training_steps,
                                                         lr_end, power, lr_init):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    elif current_step > num_training_steps:
        return lr_end / lr_init
    else:
        lr_range = lr_init - lr_end
        decay_steps = num_training_steps - num_warmup_steps
        pct_remaining = 1 - (current_step - num_warmup_steps) / decay_steps
        decay = lr_range * pct_remaining**power + lr_end
        return decay / lr_init


def _get_inverse_sqrt_schedule_lr_lambda(current_step, *, num_warmup_steps, timescale=None):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    shift = timescale - num_warmup_steps
    decay = 1.0 / math.sqrt((current_step + shift) / timescale)
    return decay


def hf_lambda(type_, base_lr, warmup, total, kwargs):
    """get_scheduler's dispatch (TYPE_TO_SCHEDULER_FUNCTION and the get_*_schedule* wrappers)."""
    if type_ == "constant":
        return _get_constant_lambda
    if type_ == "constant_with_warmup":
        return partial(_get_constant_schedule_with_warmup_lr_lambda, num_warmup_steps=warmup)
    if type_ == "inverse_sqrt":  # get_inverse_sqrt_schedule
        timescale = kwargs.get("timescale")
        if timescale is None:
            timescale = warmup or 10_000
        return partial(_get_inverse_sqrt_schedule_lr_lambda, num_warmup_steps=warmup, timescale=timescale)
    common = dict(num_warmup_steps=warmup, num_training_steps=total)
    if type_ == "linear":
        return partial(_get_linear_schedule_with_warmup_lr_lambda, **common)
    if type_ == "cosine":
        return partial(_get_cosine_schedule_with_warmup_lr_lambda, **common, num_cycles=kwargs.get("num_cycles", 0.5))
    if type_ == "cosine_with_restarts":
        return partial(_get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda, **common,
                       num_cycles=kwargs.get("num_cycles", 1))
    if type_ == "polynomial":  # get_polynomial_decay_schedule_with_warmup
        lr_end = kwargs.get("lr_end", 1e-7)
        assert base_lr > lr_end
        return partial(_get_polynomial_decay_schedule_with_warmup_lr_lambda, **common, lr_end=lr_end,
                       power=kwargs.get("power", 1.0), lr_init=base_lr)
    raise AssertionError(type_)


# --- the cases ----------------------------------------------------------------------------------------

SCHEDULES = [
    # (type, base_lr, num_warmup_steps, num_training_steps, kwargs)
    ("linear", 5e-5, 10, STEPS, {}),
    ("linear", 3e-4, 0, STEPS, {}),
    ("linear", 1e-3, 30, 20, {}),  # warmup longer than training
    ("linear", 1e-3, STEPS, STEPS, {}),
    ("cosine", 5e-5, 10, STEPS, {}),
    ("cosine", 2e-3, 0, STEPS, {"num_cycles": 2}),
    ("cosine", 1e-3, 7, STEPS, {"num_cycles": 0.3}),
    ("cosine_with_restarts", 5e-5, 10, STEPS, {}),
    ("cosine_with_restarts", 1e-3, 10, STEPS, {"num_cycles": 3}),
    ("cosine_with_restarts", 1e-3, 3, STEPS, {"num_cycles": 2.5}),
    ("polynomial", 5e-5, 10, STEPS, {}),
    ("polynomial", 1e-3, 10, STEPS, {"lr_end": 1e-4, "power": 2.0}),
    ("polynomial", 1e-3, 0, STEPS, {"lr_end": 0.0, "power": 0.5}),
    ("constant", 5e-5, 10, STEPS, {}),
    ("constant_with_warmup", 5e-5, 10, STEPS, {}),
    ("constant_with_warmup", 5e-5, 0, STEPS, {}),
    ("inverse_sqrt", 5e-5, 10, STEPS, {}),
    ("inverse_sqrt", 5e-5, 0, STEPS, {}),
    ("inverse_sqrt", 1e-3, 10, STEPS, {"timescale": 37}),
]

PLATEAUS = [
    # (kwargs, metrics): torch's ReduceLROnPlateau(optimizer, **kwargs) stepped with each metric
    ({}, [1.0] * 30 + [0.5] * 5 + [0.49999] * 15),
    ({"patience": 2, "factor": 0.5}, [1.0, 0.99995, 1.0, 1.0, 0.5, 0.6, 0.6, 0.6, 0.4, float("nan"), 0.4, 0.4, 0.4]),
    ({"mode": "max", "threshold_mode": "abs", "threshold": 0.1, "patience": 0, "cooldown": 2, "min_lr": 0.03,
      "factor": 0.5}, [0.1 * math.sin(0.4 * i) + 0.001 * i for i in range(40)]),
    ({"mode": "min", "threshold_mode": "rel", "threshold": 0.05, "patience": 1, "eps": 1e-3, "factor": 0.3},
     [2.0 / (1 + 0.1 * i) for i in range(40)]),
]

CLIPS = [
    # (name, dtype, shapes, max_norm, special)
    ("f32_clipped", np.float32, [(64, 32), (32,), (10, 64), (3, 5, 7)], 0.5, None),
    ("f32_not_clipped", np.float32, [(64, 32), (32,)], 1e6, None),
    ("f64_clipped", np.float64, [(200, 300), (1,), (70000,)], 1.0, None),
    ("f32_inf", np.float32, [(4, 4), (8,)], 1.0, "inf"),
    ("f64_nan", np.float64, [(4, 4), (8,)], 1.0, "nan"),
]


def kiln_tests_path():
    return kiln_cli.build_dir() / "bin" / "kiln_tests"


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """Runs Kiln on every case once: (response, {clip name: (inputs, outputs)})."""
    exe = kiln_tests_path()
    assert exe.exists(), f"{exe} does not exist: build the kiln_tests target or set KILN_BUILD_DIR"
    d = tmp_path_factory.mktemp("lr_dump")
    rng = np.random.default_rng(20240607)
    clips, clip_arrays = [], {}
    for name, dtype, shapes, max_norm, special in CLIPS:
        arrays = [(rng.standard_normal(s) * 0.05).astype(dtype) for s in shapes]
        if special:
            arrays[1].reshape(-1)[3] = float(special)
        ins = [str(d / f"{name}_{i}.npy") for i in range(len(arrays))]
        outs = [str(d / f"{name}_{i}_out.npy") for i in range(len(arrays))]
        for path, a in zip(ins, arrays):
            np.save(path, a)
        clips.append({"grads": ins, "out": outs, "max_norm": max_norm})
        clip_arrays[name] = (arrays, outs)
    schedules = [{"type": t, "base_lr": lr, "num_warmup_steps": w, "num_training_steps": n, "kwargs": kw,
                  "steps": STEPS + 20} for t, lr, w, n, kw in SCHEDULES]
    schedules += [{"type": "reduce_lr_on_plateau", "base_lr": 0.1, "num_warmup_steps": 5, "num_training_steps": 50,
                   "kwargs": kw, "metrics": [m if math.isfinite(m) else str(m) for m in ms]} for kw, ms in PLATEAUS]
    (d / "request.json").write_text(json.dumps({"schedules": schedules, "clips": clips}))
    proc = subprocess.run([str(exe), "--gtest_filter=LRSchedulerDump.Request"], capture_output=True, text=True,
                          env={**os.environ, "KILN_LR_DUMP": str(d)}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    response = json.loads((d / "response.json").read_text())
    return response, clip_arrays


def as_float(v):
    return float(v)  # "inf" / "nan" strings too


def torch_lambda_rates(type_, base_lr, warmup, total, kwargs, steps):
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.SGD([param], lr=base_lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, hf_lambda(type_, base_lr, warmup, total, kwargs))
    rates = []
    for _ in range(steps + 1):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


@pytest.mark.parametrize("index", range(len(SCHEDULES)),
                         ids=[f"{t}-w{w}-n{n}-{json.dumps(kw, sort_keys=True)}" for t, _, w, n, kw in SCHEDULES])
def test_schedule_matches_hf_lambda_lr(dump, index):
    type_, base_lr, warmup, total, kwargs = SCHEDULES[index]
    got = dump[0]["schedules"][index]
    assert "error" not in got, got
    expected = torch_lambda_rates(type_, base_lr, warmup, total, kwargs, STEPS + 20)
    lr = [as_float(v) for v in got["lr"]]
    stepped = [as_float(v) for v in got["stepped"]]
    assert len(lr) == len(expected) == STEPS + 21
    for step, (k, s, e) in enumerate(zip(lr, stepped, expected)):
        assert abs(k - e) <= 1e-12 * abs(e), f"step {step}: kiln {k!r} vs HF/torch {e!r}"
        assert k == s, f"step {step}: lr(step) {k!r} != current_lr() after {step} steps {s!r}"
    # Same expression order in double: the rates are bit-identical, not only close.
    mismatches = [(i, k, e) for i, (k, e) in enumerate(zip(lr, expected)) if k != e]
    assert not mismatches, f"not bit-identical at {mismatches[:5]}"


@pytest.mark.parametrize("index", range(len(PLATEAUS)), ids=[json.dumps(kw) for kw, _ in PLATEAUS])
def test_plateau_matches_torch(dump, index):
    kwargs, metrics = PLATEAUS[index]
    got = dump[0]["schedules"][len(SCHEDULES) + index]
    assert "error" not in got, got
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.SGD([param], lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
    expected = []
    for m in metrics:
        sched.step(m)
        expected.append(opt.param_groups[0]["lr"])
    assert len(set(expected)) > 1, "the case must reduce at least once"
    stepped = [as_float(v) for v in got["stepped"]]
    assert stepped == expected
    # lr(k) is the rate after k evaluations: the base rate, then the trace.
    assert [as_float(v) for v in got["lr"]] == [0.1] + expected


@pytest.mark.parametrize("index", range(len(CLIPS)), ids=[c[0] for c in CLIPS])
def test_clip_grad_norm_matches_torch(dump, index):
    name, dtype, _, max_norm, special = CLIPS[index]
    arrays, outs = dump[1][name]
    params = []
    for a in arrays:
        p = torch.nn.Parameter(torch.from_numpy(a.copy()))
        p.grad = torch.from_numpy(a.copy())
        params.append(p)
    total = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    got = as_float(dump[0]["clips"][index]["total_norm"])
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    if special == "nan":
        assert math.isnan(got) and math.isnan(total)
    elif special == "inf":
        assert got == total == math.inf
    else:
        assert abs(got - total) <= rtol * total, f"kiln {got!r} vs torch {total!r}"
    for p, out in zip(params, outs):
        k = np.load(out)
        assert k.dtype == dtype and k.shape == tuple(p.grad.shape)
        np.testing.assert_allclose(k, p.grad.numpy(), rtol=2 * rtol, atol=0, equal_nan=True)
    if max_norm >= 1e6:  # no clipping: untouched bit for bit
        for a, out in zip(arrays, outs):
            assert np.array_equal(np.load(out), a)


def test_errors_reach_the_dump(tmp_path):
    """Unknown kwargs are errors in Kiln, as they are TypeErrors in HF's get_scheduler for these types."""
    exe = kiln_tests_path()
    assert exe.exists(), f"{exe} does not exist"
    request = {"schedules": [{"type": "cosine", "base_lr": 1e-3, "num_training_steps": 10, "kwargs": {"cycles": 1},
                              "steps": 1},
                             {"type": "reduce_lr_on_plateau", "base_lr": 1e-3, "kwargs": {"factor": 1.5},
                              "metrics": [1.0]}]}
    (tmp_path / "request.json").write_text(json.dumps(request))
    proc = subprocess.run([str(exe), "--gtest_filter=LRSchedulerDump.Request"], capture_output=True, text=True,
                          env={**os.environ, "KILN_LR_DUMP": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    response = json.loads((tmp_path / "response.json").read_text())["schedules"]
    assert "'cycles'" in response[0]["error"] and "num_cycles" in response[0]["error"]
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0),
                                                   factor=1.5)
    assert "factor should be < 1.0" in response[1]["error"]
