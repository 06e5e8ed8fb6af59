"""kiln.training.ortmodule.ORTModule against plain PyTorch: the same module, weights and batches
trained 20 steps with torch optimizers (per-step losses within 1e-4 relative, final parameters within
1e-4), input gradients, nested outputs with a non-differentiable one, gradient accumulation, the
signature cache, the fallback policy and its errors, DebugOptions, and the nn.Module surface.
test_ortmodule_calls.py has the calls' shapes (keywords, constants, nesting, ModelOutput-like
outputs), hooks, log levels and torchvision's ResNet-18."""
import copy
import os
import warnings

import pytest
import torch
from kiln_package import import_kiln

import_kiln()
from kiln.training.ortmodule import MAX_CACHED_SIGNATURES, DebugOptions, LogLevel, ORTModule  # noqa: E402

STEPS = 20
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 5))


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.AvgPool2d(2), torch.nn.Flatten(),
                               torch.nn.Linear(16 * 5 * 5, 10))


def train_both(make, optimizer, batches, wrap=ORTModule):
    """Per-step losses of the plain module and the wrapped copy, and both modules."""
    torch.manual_seed(0)
    plain = make()
    ours = wrap(copy.deepcopy(plain))
    opt_plain, opt_ours = optimizer(plain.parameters()), optimizer(ours.parameters())
    losses = []
    for x, y in batches:
        row = []
        for model, opt in ((plain, opt_plain), (ours, opt_ours)):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            row.append(loss.item())
        losses.append(row)
    return losses, plain, ours


def batches(shape, classes, seed=1, steps=STEPS):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g))
            for _ in range(steps)]


def assert_parity(losses, plain, ours):
    for step, (want, got) in enumerate(losses):
        assert abs(got - want) <= LOSS_TOL * abs(want), f"step {step}: PyTorch {want}, Kiln {got}"
    theirs = dict(ours.named_parameters())
    for name, p in plain.named_parameters():
        diff = (p - theirs[name]).abs().max().item()
        assert diff <= PARAM_TOL, f"{name}: max difference {diff}"


def test_mlp_with_sgd_momentum_matches_pytorch():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to PyTorch
        losses, plain, ours = train_both(mlp, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                                         batches((32, 20), 5))
    assert ours._fallback_reason is None
    assert_parity(losses, plain, ours)


def test_cnn_with_adamw_matches_pytorch():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        losses, plain, ours = train_both(cnn, lambda p: torch.optim.AdamW(p, lr=1e-3), batches((8, 1, 28, 28), 10))
    assert_parity(losses, plain, ours)


def bn_cnn():
    # Convolutions before BatchNorm without bias, as ResNet's: such a bias's gradient is zero in exact
    # arithmetic, and AdamW turns the rounding noise of either side into steps of its learning rate.
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, bias=False),
                               torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 12 * 12, 10))


def test_batchnorm_in_training_mode_updates_the_running_statistics():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        losses, plain, ours = train_both(bn_cnn, lambda p: torch.optim.AdamW(p, lr=1e-3),
                                         batches((8, 1, 28, 28), 10))
    assert_parity(losses, plain, ours)
    theirs = dict(ours.named_buffers())
    for name, b in plain.named_buffers():
        if name.endswith("num_batches_tracked"):
            assert theirs[name].item() == b.item() == STEPS, name
        else:
            torch.testing.assert_close(theirs[name], b, rtol=1e-4, atol=1e-5, msg=name)
    x = torch.randn(4, 1, 28, 28)
    plain.eval()
    ours.eval()  # inference mode: the running statistics normalise
    with torch.no_grad():
        torch.testing.assert_close(ours(x), plain(x), rtol=1e-4, atol=1e-5)


class TwoHeads(torch.nn.Module):
    """A frozen encoder, two heads, outputs as a dict with a tuple and an integer tensor."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(6, 8)
        self.encoder.requires_grad_(False)
        self.a = torch.nn.Linear(8, 3)
        self.b = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.encoder(x))
        a = self.a(h)
        return {"heads": (a, self.b(h)), "label": a.argmax(dim=-1)}


def test_input_gradients_nested_outputs_and_a_frozen_module():
    torch.manual_seed(3)
    plain = TwoHeads()
    ours = ORTModule(copy.deepcopy(plain))
    x = torch.randn(4, 6)
    results = []
    for model in (plain, ours):
        xi = x.clone().requires_grad_(True)
        out = model(xi)
        assert set(out) == {"heads", "label"} and isinstance(out["heads"], tuple)
        assert out["label"].dtype == torch.int64 and not out["label"].requires_grad
        (out["heads"][0].pow(2).sum() + 3 * out["heads"][1].sum()).backward()
        grads = {n: p.grad for n, p in model.named_parameters()}
        results.append((out, xi.grad, grads))
    (want, want_dx, want_g), (got, got_dx, got_g) = results
    torch.testing.assert_close(got["heads"][0], want["heads"][0], rtol=1e-5, atol=1e-6)
    assert torch.equal(got["label"], want["label"])
    torch.testing.assert_close(got_dx, want_dx, rtol=1e-5, atol=1e-6)
    assert got_g["encoder.weight"] is None and want_g["encoder.weight"] is None
    for name in ("a.weight", "a.bias", "b.weight", "b.bias"):
        torch.testing.assert_close(got_g[name], want_g[name], rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_and_only_one_output_used():
    torch.manual_seed(4)
    plain = TwoHeads()
    ours = ORTModule(copy.deepcopy(plain))
    xs = [torch.randn(5, 6) for _ in range(3)]
    for model in (plain, ours):
        model.zero_grad(set_to_none=False)
        for x in xs:  # three backward passes into the same .grad; head b unused (its gradient input is None)
            model(x)["heads"][0].sum().backward()
    for (name, p), (_, q) in zip(plain.named_parameters(), ours.named_parameters()):
        if p.grad is None:
            assert q.grad is None or not q.grad.any(), name
        else:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)


def test_a_new_input_signature_is_planned_and_the_cache_is_bounded():
    model = ORTModule(mlp())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for batch in range(1, MAX_CACHED_SIGNATURES + 1):
            assert model(torch.randn(batch, 20)).shape == (batch, 5)
    assert len(model._plans) == MAX_CACHED_SIGNATURES
    with pytest.warns(RuntimeWarning, match="more than 8 input signatures"):
        model(torch.randn(MAX_CACHED_SIGNATURES + 1, 20))
    assert len(model._plans) == MAX_CACHED_SIGNATURES
    model.eval()  # eval mode is another signature: exported again in inference mode
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="input signatures"):
        assert model(torch.randn(3, 20)).shape == (3, 5)
    assert list(model._plans)[-1][-1] is False  # the newest plan is the inference one


class Opaque:
    """An argument ORTModule cannot put in a plan."""


class TakesAnything(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x, extra=None):
        return self.fc(x)


def test_unsupported_calls_fall_back_to_pytorch_with_one_warning(monkeypatch):
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY", raising=False)
    torch.manual_seed(5)
    inner = TakesAnything()
    model = ORTModule(inner)
    x = torch.randn(3, 4)
    with pytest.warns(RuntimeWarning, match="falls back to PyTorch.*the call holds a Opaque"):
        out = model(x, extra=Opaque())
    torch.testing.assert_close(out, inner(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the fallback is decided once
        model(x, extra=Opaque())


def test_fallback_disabled_raises(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    model = ORTModule(TakesAnything())
    with pytest.raises(RuntimeError, match="cannot run this module: the call holds a Opaque"):
        model(torch.randn(3, 4), Opaque())


def test_debug_options_save_the_graphs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="onnx_prefix"):
        DebugOptions(save_onnx=True)
    model = ORTModule(mlp(), DebugOptions(log_level=LogLevel.WARNING, save_onnx=True, onnx_prefix="run"))
    model(torch.randn(2, 20)).sum().backward()
    assert sorted(os.listdir(tmp_path)) == ["run_torch_exported_training.onnx", "run_training_training.onnx"]


def test_the_module_surface_is_the_wrapped_modules():
    inner = mlp()
    model = ORTModule(inner)
    assert model.module is inner
    assert list(model.state_dict()) == list(inner.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in inner.named_parameters()]
    state = {k: v + 1 for k, v in inner.state_dict().items()}
    model.load_state_dict(state)
    torch.testing.assert_close(inner[0].weight, state["0.weight"])
    model.eval()
    assert not inner.training
    with pytest.raises(RuntimeError, match="runs on the CPU"):
        model.to("cuda")
    assert model.to(torch.float32) is model
    with pytest.raises(TypeError, match="wraps a torch.nn.Module"):
        ORTModule(lambda x: x)


def test_importable_from_onnxruntimes_paths():
    import kiln.training
    from kiln.training.ortmodule import ORTModule as same

    assert kiln.training.ORTModule is same is ORTModule


def transformer_case(name):
    """(module, batches, loss of the module's output and a batch) for the zoo's BERT-style encoder
    (rows right-padded: attention_mask has zeros; cross-entropy outside) and GPT-style decoder (tied
    embeddings, its language-model loss inside the module)."""
    import numpy as np
    import zoo_models
    from training_models import WithLoss
    from training_parity import perturb

    torch.manual_seed(0)
    spec = zoo_models.zoo("test")[name]
    if name == "bert":
        module = perturb(zoo_models.Bert(**zoo_models.SIZES["bert"]["test"]))
        batches_ = []
        for i in range(STEPS):
            rng = np.random.default_rng(4000 + i)
            feeds = spec.inputs(2, 16, rng)
            labels = torch.from_numpy(rng.integers(0, 3, size=(2,), dtype=np.int64))
            batches_.append(([torch.from_numpy(v) for v in feeds.values()], labels))
        return module, batches_, lambda out, labels: torch.nn.functional.cross_entropy(out, labels)
    module = WithLoss(zoo_models.GPT2(**zoo_models.SIZES["gpt2"]["test"]), "lm")
    batches_ = []
    for i in range(STEPS):
        ids = torch.from_numpy(spec.inputs(2, 16, np.random.default_rng(5000 + i))["input_ids"])
        batches_.append(([ids, ids.clone()], None))
    return module, batches_, lambda out, _: out


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformers_match_pytorch(name):
    # SGD with momentum: the attention key bias's gradient is zero in exact arithmetic (softmax ignores
    # a shift common to all keys), and AdamW would turn either side's rounding noise into full steps.
    plain, data, loss_of = transformer_case(name)
    plain.train()
    ours = ORTModule(copy.deepcopy(plain))
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (plain, ours)]
        for inputs, labels in data:
            row = []
            for model, opt in zip((plain, ours), opts):
                loss = loss_of(model(*inputs), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                row.append(loss.item())
            losses.append(row)
    assert_parity(losses, plain, ours)


def test_clipping_and_a_scheduler_work_unchanged():
    torch.manual_seed(6)
    plain = mlp()
    ours = ORTModule(copy.deepcopy(plain))
    data = batches((16, 20), 5, seed=7, steps=8)
    losses = []
    runs = []
    for model in (plain, ours):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        run = []
        for x, y in data:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            run.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5).item())
            opt.step()
            sched.step()
            losses.append(loss.item())
        runs.append(run)
    for want, got in zip(*runs):  # the gradient norms before clipping
        assert abs(got - want) <= 1e-4 * want
    assert_parity(list(zip(losses[:8], losses[8:])), plain, ours)


def test_a_second_backward_through_one_graph_is_a_clear_error():
    model = ORTModule(mlp())
    loss = model(torch.randn(3, 20)).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="retain_graph=True is not supported"):
        loss.backward()


class WithConstants(torch.nn.Module):
    """A non-persistent buffer (not in state_dict: the export makes it a Constant node of the plan)
    and a float64 forward."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 3).double()
        self.register_buffer("scale", torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.scale


def test_a_non_persistent_buffer_and_float64():
    torch.manual_seed(8)
    plain = WithConstants()
    ours = ORTModule(copy.deepcopy(plain))
    x = torch.randn(4, 5, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for model in (plain, ours):
            model(x).pow(2).sum().backward()
    for (name, p), (_, q) in zip(plain.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_run_bound_writes_in_place_and_refuses_bad_arguments():
    import numpy as np
    from onnx import TensorProto, helper

    from kiln._core import core

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    session = core.Session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    y = np.empty((2, 3), np.float32)
    (out,) = session.run_bound([x], [y])
    assert out is y and y.tolist() == [[0, 2, 0], [4, 0, 6]]
    (fresh,) = session.run_bound([x], [None])
    assert fresh.tolist() == y.tolist()
    with pytest.raises(Exception, match="run_bound: 2 inputs and 1 outputs given; the model has 1 and 1"):
        session.run_bound([x, x], [None])
    with pytest.raises(Exception, match="output 'y': the array must be C-contiguous and writeable"):
        session.run_bound([x], [np.empty((3, 2), np.float32).T])
