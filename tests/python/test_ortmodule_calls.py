"""ORTModule's calls beyond positional tensors, against the same module in plain PyTorch: keyword,
None, number, bool and string arguments and nested tuples / lists / dicts of tensors (constants of
a plan: a new value is a new signature), an argument the forward does not read, ModelOutput-like
dataclass and namedtuple outputs, a forward that returns no tensor, the wrapped module's forward
hooks, the rest of the nn.Module surface, DebugOptions' log levels, torchvision's ResNet-18
trained 20 steps (per-step losses within 1e-4 relative, parameters and BatchNorm statistics within
1e-4), the DLPack crossing without copies, Dropout seeded from torch with its gradient through the
forward's mask, the fallback on an export failure and on an op Kiln cannot differentiate, and an
input on another device."""
import copy
import dataclasses
import warnings
from collections import OrderedDict, namedtuple
from typing import Optional

import numpy as np
import pytest
import torch
from kiln_package import import_kiln

import_kiln()
from kiln.training.ortmodule import DebugOptions, LogLevel, ORTModule  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-6)


class Mixed(torch.nn.Module):
    """A forward with every kind of argument ORTModule plans for."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.side = torch.nn.Linear(2, 3)

    def forward(self, x, pair, *, scale=1.0, mask=None, relu=True, mode="sum", extra=None, unused=None):
        h = self.fc(x) * scale + self.side(pair[0]) - pair[1]["shift"]
        if relu:
            h = torch.relu(h)
        if mask is not None:
            h = h * mask
        return h.sum(-1) if mode == "sum" else h


def call_args(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 4, generator=g)
    pair = [torch.randn(5, 2, generator=g), {"shift": torch.randn(3, generator=g)}]
    mask = (torch.rand(5, 3, generator=g) > 0.3).float()
    return x, pair, mask


def test_keywords_constants_none_and_nested_inputs_match_pytorch():
    torch.manual_seed(11)
    plain = Mixed()
    ours = ORTModule(copy.deepcopy(plain))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback
        for kwargs in ({"scale": 0.5, "mask": None, "relu": True, "mode": "sum"},
                       {"scale": 2.0, "mask": "mask", "relu": False, "mode": "each", "unused": "unused"}):
            results = []
            for model in (plain, ours):
                x, pair, mask = call_args(3)
                x.requires_grad_(True)
                pair[1]["shift"].requires_grad_(True)
                kw = dict(kwargs, mask=mask if kwargs["mask"] == "mask" else None)
                if kw.get("unused"):
                    kw["unused"] = torch.ones(2)  # a tensor the forward never reads
                out = model(x, pair, **kw)
                out.pow(2).sum().backward()
                results.append((out, x.grad, pair[1]["shift"].grad, {n: p.grad for n, p in model.named_parameters()}))
            (want, want_dx, want_ds, want_g), (got, got_dx, got_ds, got_g) = results
            torch.testing.assert_close(got, want, **TOL)
            torch.testing.assert_close(got_dx, want_dx, **TOL)
            torch.testing.assert_close(got_ds, want_ds, **TOL)
            for name, grad in want_g.items():
                torch.testing.assert_close(got_g[name], grad, **TOL)
    assert ours._fallback_reason is None
    assert len(ours._plans) == 2  # each set of constants is its own plan
    x, pair, _ = call_args(4)
    x.requires_grad_(True)
    pair[1]["shift"].requires_grad_(True)
    ours(x, pair, scale=0.5, mask=None, relu=True, mode="sum")
    assert len(ours._plans) == 2  # the same constants again: the first plan, reused


@dataclasses.dataclass
class CausalLMOutput(OrderedDict):
    """Shaped like Hugging Face's ModelOutput: a dataclass that is an OrderedDict of its set fields."""
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if getattr(self, field.name) is not None:
                self[field.name] = getattr(self, field.name)


Pair = namedtuple("Pair", ["first", "second"])


class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x, labels=None, as_pair=False):
        logits = self.fc(x)
        if as_pair:
            return Pair(logits, logits.argmax(-1))
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return CausalLMOutput(loss=loss, logits=logits)


def test_model_output_and_namedtuple_outputs():
    torch.manual_seed(12)
    plain = WithLoss()
    ours = ORTModule(copy.deepcopy(plain))
    x, labels = torch.randn(8, 6), torch.randint(0, 4, (8,))
    want, got = plain(x, labels=labels), ours(x, labels=labels)
    assert type(got) is CausalLMOutput and list(got.keys()) == ["loss", "logits"] and got.hidden_states is None
    torch.testing.assert_close(got.loss, want.loss, **TOL)
    got.loss.backward()
    want.loss.backward()
    torch.testing.assert_close(ours.module.fc.weight.grad, plain.fc.weight.grad, **TOL)
    no_loss = ours(x)  # labels None: another plan, whose output has no loss
    assert no_loss.loss is None and list(no_loss.keys()) == ["logits"]
    pair = ours(x, as_pair=True)
    assert type(pair) is Pair and pair.second.dtype == torch.int64 and not pair.second.requires_grad
    assert torch.equal(pair.second, plain(x, as_pair=True).second)


class Nothing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x):
        return {"ready": True, "note": None}


def test_a_forward_that_returns_no_tensor(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    with pytest.raises(RuntimeError, match="forward returned no tensor \\(dict\\)"):
        ORTModule(Nothing())(torch.randn(3, 2))
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY")
    with pytest.warns(RuntimeWarning, match="falls back to PyTorch.*returned no tensor"):
        assert ORTModule(Nothing())(torch.randn(3, 2)) == {"ready": True, "note": None}


def test_the_wrapped_modules_forward_hooks_run_once_per_call():
    torch.manual_seed(13)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    ours = ORTModule(copy.deepcopy(plain))
    calls = {"pre": 0, "post": 0}

    def pre(module, args):
        calls["pre"] += 1
        return (args[0] * 2,)

    def post(module, args, out):
        calls["post"] += 1
        return out + 1

    for model in (plain, ours.module):
        model.register_forward_pre_hook(pre)
        model.register_forward_hook(post)
    x = torch.randn(3, 4)
    want = plain(x)
    calls.update(pre=0, post=0)
    got = ours(x)
    torch.testing.assert_close(got, want, **TOL)  # applied once: not also traced into the graph
    assert calls == {"pre": 1, "post": 1}
    ours(x)
    assert calls == {"pre": 2, "post": 2}


def test_the_rest_of_the_module_surface():
    inner = torch.nn.Sequential(OrderedDict(fc=torch.nn.Linear(3, 3), bn=torch.nn.BatchNorm1d(3)))
    model = ORTModule(inner)
    assert [n for n, _ in model.named_modules()] == [n for n, _ in inner.named_modules()]
    assert model.get_submodule("fc") is inner.fc
    assert model.get_parameter("fc.weight") is inner.fc.weight
    assert model.get_buffer("bn.running_mean") is inner.bn.running_mean
    with pytest.raises(NotImplementedError, match="does not support adding modules"):
        model.add_module("extra", torch.nn.ReLU())
    model.requires_grad_(False)
    assert not inner.fc.weight.requires_grad
    model.train(False)
    assert not inner.training and not inner.bn.training


def test_log_levels(capsys, monkeypatch):
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY", raising=False)
    model = ORTModule(torch.nn.Linear(3, 2), DebugOptions(log_level=LogLevel.INFO))
    model(torch.randn(4, 3))
    assert "exported and planned the training graph of a new input signature in" in capsys.readouterr().err
    model(torch.randn(4, 3))
    assert capsys.readouterr().err == ""  # the plan is reused: nothing to report
    quiet = ORTModule(Nothing(), DebugOptions(log_level=LogLevel.ERROR))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # ERROR: the fallback's warning is not shown
        assert quiet(torch.randn(2, 2)) == {"ready": True, "note": None}
    assert quiet._fallback_reason is not None
    ORTModule(torch.nn.Linear(3, 2))(torch.randn(4, 3))  # WARNING, the default: no export line
    assert capsys.readouterr().err == ""


def test_torchvision_resnet18_trains_as_in_pytorch():
    """20 SGD steps in float64, batch 8: ResNet-18 at 32x32 with small batches is chaotic in float32
    (layer4's BatchNorms normalise over one value per sample), so rounding alone moves the
    trajectory: PyTorch's own float32 and float64 runs of this loop at batch 4 and lr 0.01 differ by
    48% in loss within 20 steps. In float64 the two sides stay together. The float32 graph's first
    gradients are compared too (within 1e-3 of each parameter's largest)."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(14)
    plain32 = torchvision.models.resnet18(num_classes=10)
    g = torch.Generator().manual_seed(15)
    data = [(torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(20)]
    ours32 = ORTModule(copy.deepcopy(plain32))
    for model in (plain32, ours32):
        torch.nn.functional.cross_entropy(model(data[0][0]), data[0][1]).backward()
    grads = dict(plain32.named_parameters())
    for name, p in ours32.named_parameters():
        scale = grads[name].grad.abs().max().item()
        assert (p.grad - grads[name].grad).abs().max().item() <= 1e-3 * scale + 1e-7, name
    plain = copy.deepcopy(plain32).double()
    ours = ORTModule(copy.deepcopy(plain))
    opt_plain = torch.optim.SGD(plain.parameters(), lr=0.002, momentum=0.9)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.002, momentum=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for step, (x, y) in enumerate(data):
            losses = []
            for model, opt in ((plain, opt_plain), (ours, opt_ours)):
                loss = torch.nn.functional.cross_entropy(model(x.double()), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            assert abs(losses[1] - losses[0]) <= 1e-4 * abs(losses[0]), f"step {step}: {losses}"
    theirs = ours.state_dict()
    for name, value in plain.state_dict().items():
        diff = (value.double() - theirs[name].double()).abs().max().item()
        assert diff <= 1e-4, f"{name}: max difference {diff}"


def test_tensors_cross_through_dlpack_without_copies():
    from kiln.training.ortmodule import _numpy, _tensor
    t = torch.randn(3, 4, requires_grad=True)
    view = _numpy(t)
    assert view.__array_interface__["data"][0] == t.data_ptr()  # the parameter's own storage
    with torch.no_grad():
        t.add_(1)  # an optimizer's in-place step is seen without a new view
    assert view[0, 0] == t[0, 0].item()
    mask = torch.tensor([True, False])
    assert _numpy(mask).__array_interface__["data"][0] == mask.data_ptr()
    strided = torch.randn(4, 3).t()  # not contiguous: the one case with a copy
    assert _numpy(strided).__array_interface__["data"][0] != strided.data_ptr()
    np.testing.assert_array_equal(_numpy(strided), strided.numpy())
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    back = _tensor(array)
    assert back.data_ptr() == array.__array_interface__["data"][0]


class Dropping(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


def test_dropout_is_seeded_from_torch_and_its_gradient_follows_the_mask():
    x = torch.randn(32, 64)

    def run(seed):
        torch.manual_seed(seed)
        model = ORTModule(Dropping())
        xi = x.clone().requires_grad_(True)
        first = model(xi)
        first.sum().backward()
        return model, xi.grad, first, model(x)

    model, grad, first, second = run(7)
    _, grad_again, first_again, second_again = run(7)
    assert torch.equal(first, first_again) and torch.equal(second, second_again)  # torch.manual_seed repeats
    assert not torch.equal(first == 0, second == 0)  # each call draws a new mask
    kept = first != 0
    assert 0.4 < kept.float().mean().item() < 0.6
    with torch.no_grad():  # kept units are scaled by 1 / (1 - p), dropped ones are 0
        torch.testing.assert_close(first[kept], (model.module.fc(x) * 2)[kept], **TOL)
    # d(sum y)/dx = W^T (2 * mask): the gradient goes through the forward's own mask
    torch.testing.assert_close(grad, (2 * kept.float()) @ model.module.fc.weight, **TOL)


class Eigenvalues(torch.nn.Module):  # torch.onnx cannot export linalg_eigvalsh at opset 17
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc(x)
        return torch.linalg.eigvalsh(h.T @ h)


@torch.jit.script
def _double_until_large(h):
    i = 0
    while bool(h.abs().sum() < 100.0) and i < 50:
        h = h * 2.0
        i += 1
    return h


# Exports to a Loop its condition stops: Kiln runs it but differentiates only loops M fixes.
class UntilLarge(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return _double_until_large(self.fc(x))


@pytest.mark.parametrize("make, x, cause", [
    (Eigenvalues, (5, 3), "torch.onnx.export failed: UnsupportedOperatorError"),
    (UntilLarge, (6, 4), "Kiln cannot differentiate the exported graph: .*node '.*' \\(Loop\\)"),
])
def test_an_export_failure_and_an_op_kiln_cannot_differentiate_fall_back(monkeypatch, make, x, cause):
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY", raising=False)
    torch.manual_seed(16)
    inner = make()
    model = ORTModule(inner)
    inputs = torch.randn(*x)
    with pytest.warns(RuntimeWarning, match="falls back to PyTorch for this module: " + cause):
        out = model(inputs)
    torch.testing.assert_close(out, inner(inputs))
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    with pytest.raises(RuntimeError, match="cannot run this module: " + cause):
        ORTModule(make())(inputs)


def test_an_input_on_another_device_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    with pytest.raises(RuntimeError, match="input tensor 0 is on meta; Kiln's ORTModule runs on the CPU"):
        ORTModule(torch.nn.Linear(3, 2))(torch.empty(4, 3, device="meta"))


class NamedLikeAnInput(torch.nn.Module):  # a parameter named as ORTModule's first graph input
    def __init__(self):
        super().__init__()
        self.input_0 = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return (x * self.input_0).sum()


def test_names_of_parameters_and_graph_values_never_clash(monkeypatch):
    """A parameter called like a graph input trains as in PyTorch (the input is named around it);
    an export whose values clash with the parameters' names anyway falls back, naming them."""
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    torch.manual_seed(17)
    inner = NamedLikeAnInput()
    reference = copy.deepcopy(inner)
    x = torch.randn(4, 3)
    ORTModule(inner)(x).backward()
    reference(x).backward()
    torch.testing.assert_close(inner.input_0.grad, reference.input_0.grad, rtol=1e-6, atol=1e-6)

    import onnx
    from onnx import helper

    from kiln.training.ortmodule._calls import _Fallback
    from kiln.training.ortmodule._graphs import _strip_prefix
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["fc.weight"]),
                               helper.make_node("Add", ["fc.weight", "inner.fc.weight"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor("inner.fc.weight", onnx.TensorProto.FLOAT, [2], [1.0, 2.0])])
    with pytest.raises(_Fallback, match=r"names values \['fc.weight'\] like the module's parameters"):
        _strip_prefix(graph, "inner.")
    assert graph.initializer[0].name == "inner.fc.weight"  # nothing renamed
