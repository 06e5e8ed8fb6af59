"""If, Loop and Scan in graphs exported from PyTorch (torch.jit.script'ed control flow inside a
traced module, as torch.onnx exports it):

- If: forward and every gradient (input and parameters) through ORTModule against torch autograd,
  both branches taken, float64 within 1e-12 and float32 within 1e-5 relative to the largest
  element; artifacts from a model whose loss passes an If train 20 AdamW steps as torch does.
- Loop (a `for` over range(n), its trip count fixed by n): the exported model's outputs in a Kiln
  Session equal torch's for several trip counts, and through ORTModule the forward and gradients
  equal torch autograd's (float64, 1e-12). A loop its condition may stop early is not
  differentiated: tests/python/test_ortmodule_calls.py checks that fallback.
ONNX's If / Loop / Scan node cases run in the conformance suite; the If, Loop and Scan gradients
are checked by finite differences in tests/autodiff/control_flow_rules_test.cpp (torch exports no
Scan)."""
import copy
import warnings

import numpy as np
import pytest
import torch
from kiln_package import import_kiln
from training_parity import (
    export_forward,
    generate_artifacts,
    load_initializers_into,
    perturb,
    read_safetensors,
    run_train_steps,
    torch_train,
    weight_error,
    write_manifest,
)

kiln = import_kiln()
from kiln.training.ortmodule import ORTModule  # noqa: E402

pytestmark = pytest.mark.usefixtures("ortmodule_in_kiln")


@torch.jit.script
def gate(h):
    if bool(h.sum() > 0):
        return torch.tanh(h) * 2.0 + h
    else:
        return h * h


@torch.jit.script
def repeat(h, n):
    for _ in range(int(n)):
        h = torch.tanh(h) + 0.5 * h
    return h


class Gated(torch.nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.fc = torch.nn.Linear(5, 8)
        self.head = torch.nn.Linear(8, classes)

    def forward(self, x):
        return self.head(gate(self.fc(x)))


class Repeated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 8)

    def forward(self, x, n):
        return repeat(self.fc(x), n)


def relative(got, want):
    return float((got - want).abs().max()) / max(float(want.abs().max()), 1e-30)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_if_forward_and_gradients_match_torch(sign, dtype, tol):
    torch.manual_seed(0)
    plain = Gated().to(dtype)
    with torch.no_grad():  # the sign of fc's output picks the branch
        plain.fc.bias.fill_(sign * 3.0)
    ours = ORTModule(copy.deepcopy(plain))
    x = torch.rand(3, 5, dtype=dtype)
    results = []
    for module in (plain, ours):
        xi = x.clone().requires_grad_()
        y = module(xi)
        (y * torch.arange(y.numel(), dtype=dtype).reshape(y.shape)).sum().backward()
        results.append([y.detach(), xi.grad] + [p.grad for _, p in sorted(module.named_parameters())])
    for i, (got, want) in enumerate(zip(results[1], results[0])):
        assert relative(got, want) <= tol, f"tensor {i}: {relative(got, want):.2e}"


def test_if_model_trains_through_artifacts_like_torch(tmp_path):
    """20 AdamW steps of an exported classifier whose hidden layer passes an If; batches flip
    between the branches (the first feature's sign decides), losses within 1e-5 of torch's."""
    torch.manual_seed(0)
    module = perturb(Gated())

    def batch(i):
        rng = np.random.default_rng(9000 + i)
        x = rng.standard_normal((6, 5)).astype(np.float32) + (2.0 if i % 2 else -2.0)
        return {"input": x, "labels": rng.integers(0, 4, size=(6,), dtype=np.int64)}
    batches = [batch(i) for i in range(20)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_path = export_forward(module, {"input": batches[0]["input"]}, tmp_path / "model.onnx",
                                    output_names=["logits"])
    load_initializers_into(module, model_path)
    artifacts = generate_artifacts(model_path, tmp_path / "artifacts", "--loss", "CrossEntropyLoss", "--optimizer",
                                   "AdamW", "--lr", "0.01")
    saved = tmp_path / "trained.safetensors"
    steps, _, _ = run_train_steps(artifacts, "--batches", write_manifest(tmp_path / "data", batches), "--steps", 20,
                                  "--threads", 2, "--save", saved)
    torch_losses, _ = torch_train(module, batches, lambda p: torch.optim.AdamW(p, lr=0.01),
                                  torch.nn.functional.cross_entropy)
    kiln_losses = [s["loss"] for s in steps]
    bad = [(i, k, t) for i, (k, t) in enumerate(zip(kiln_losses, torch_losses)) if not abs(k - t) <= 1e-5 * abs(t)]
    assert not bad, bad
    tensors, _ = read_safetensors(saved)
    state = module.state_dict()
    assert max(weight_error(tensors[n], state[n].numpy()) for n, _ in module.named_parameters()) <= 1e-5


def test_loop_outputs_match_torch(tmp_path):
    torch.manual_seed(0)
    module = Repeated().eval()
    x = torch.rand(3, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x, torch.tensor(2)), str(tmp_path / "loop.onnx"), input_names=["x", "n"],
                          output_names=["y"], opset_version=17)
    session = kiln._kiln.Session(str(tmp_path / "loop.onnx"))
    for n in (0, 1, 4, 7):
        got = session.run({"x": x.numpy(), "n": np.array(n, np.int64)})["y"]
        want = module(x, torch.tensor(n)).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_loop_gradients_match_torch(trips):
    torch.manual_seed(0)
    plain = Repeated().double()
    ours = ORTModule(copy.deepcopy(plain))
    x = torch.rand(3, 5, dtype=torch.float64)
    n = torch.tensor(trips)
    results = []
    for module in (plain, ours):
        xi = x.clone().requires_grad_()
        y = module(xi, n)
        (y * torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape)).sum().backward()
        results.append([y.detach(), xi.grad] + [p.grad for _, p in sorted(module.named_parameters())])
    for i, (got, want) in enumerate(zip(results[1], results[0])):
        assert relative(got, want) <= 1e-12, f"tensor {i}: {relative(got, want):.2e}"
