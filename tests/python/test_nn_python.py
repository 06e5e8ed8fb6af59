"""kiln.nn from Python (python/kiln/nn, python/src/nn_*.cpp) against torch.nn (python3-torch 1.13):
outputs, state_dict keys and load_state_dict's reports, hooks, export, the zoo and backbones, and
kiln.Trainer(model=<kiln.nn.Module>).

Tolerances: outputs max |kiln - torch| <= 1e-5 * max(1, max |torch|) (float32 both sides, values of
order 1); frozen weights bit-identical after training.
"""
import math
from collections import OrderedDict

import numpy as np
import onnx
import pytest
import torch
from kiln_package import import_kiln

kiln = import_kiln()
import kiln.nn as nn  # noqa: E402
import kiln.nn.functional as F  # noqa: E402

TOL = 1e-5


def close(got, want, tol=TOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want).max()
    assert err <= tol * max(1.0, np.abs(want).max()), f"max error {err}"


def copy_torch_to_kiln(kmodel, tmodel):
    assert kmodel.load_state_dict(tmodel.state_dict()) == ([], [])


# ---- The brief's Net and its torch twin ----------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 28 * 28, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(x.flatten(1))


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 28 * 28, 10)

    def forward(self, x):
        x = torch.nn.functional.relu(self.bn(self.conv(x)))
        return self.fc(x.flatten(1))


def images(n, seed):
    return np.random.RandomState(seed).randn(n, 1, 28, 28).astype(np.float32)


def test_net_matches_torch_in_eval_and_train_mode():
    torch.manual_seed(0)
    tnet = TorchNet()
    nn.manual_seed(0)
    net = Net()
    assert list(net.state_dict()) == list(tnet.state_dict())
    copy_torch_to_kiln(net, tnet)
    x = images(4, 1)
    # Training mode: batch statistics, and the running statistics updated as torch updates them.
    close(net(x), tnet(torch.from_numpy(x)).detach().numpy())
    close(net.bn.running_mean, tnet.bn.running_mean.numpy())
    close(net.bn.running_var, tnet.bn.running_var.numpy())
    assert int(net.bn.num_batches_tracked) == 1
    net.eval(), tnet.eval()
    assert not net.training and not net.conv.training
    x = images(3, 2)
    close(net(x), tnet(torch.from_numpy(x)).detach().numpy())


def test_export_is_valid_onnx_with_state_dict_names_and_a_dynamic_batch(tmp_path):
    nn.manual_seed(0)
    net = Net().eval()
    path = tmp_path / "net.onnx"
    net.export(path, {"input": (1, 1, 28, 28)}, dynamic_axes={"input": {0: "batch"}})
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    inits = {i.name for i in model.graph.initializer}
    assert {"conv.weight", "conv.bias", "bn.weight", "bn.running_mean", "fc.weight"} <= inits
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    import kiln.backend
    x = images(5, 3)
    (got,) = kiln.backend.prepare(str(path)).run([x])
    close(got, net(x))


# ---- state_dict and load_state_dict --------------------------------------------------------------

class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = nn.Parameter(np.ones(4, np.float32))
        self.register_buffer("shift", np.zeros(4, np.float32))
        self.register_buffer("scratch", np.zeros(2, np.float32), persistent=False)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.blocks = nn.ModuleList([Inner(), Inner()])
        self.heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)})
        self.named = nn.Sequential(OrderedDict(norm=nn.LayerNorm(4), drop=nn.Dropout(0.1)))


class TorchInner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("shift", torch.zeros(4))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)


class TorchOuter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
        self.blocks = torch.nn.ModuleList([TorchInner(), TorchInner()])
        self.heads = torch.nn.ModuleDict({"cls": torch.nn.Linear(4, 2), "reg": torch.nn.Linear(4, 1)})
        self.named = torch.nn.Sequential(OrderedDict(norm=torch.nn.LayerNorm(4), drop=torch.nn.Dropout(0.1)))


def test_nested_state_dict_and_traversal_match_torch():
    k, t = Outer(), TorchOuter()
    assert list(k.state_dict()) == list(t.state_dict())
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in k.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in k.named_modules()] == [n for n, _ in t.named_modules()]
    assert [type(m).__name__ for _, m in k.named_modules()] == \
        [type(m).__name__.replace("Torch", "") for _, m in t.named_modules()]
    assert k.get_submodule("blocks.1.lin") is k.blocks[1].lin
    assert k.get_submodule("heads.cls") is k.heads["cls"]
    assert k.num_parameters() == sum(p.numel() for p in t.parameters())
    with pytest.raises(AttributeError, match="ModuleList has no attribute `7`"):
        k.get_submodule("blocks.7")
    with pytest.raises(AttributeError, match="`scale` is not an nn.Module"):
        k.get_submodule("blocks.0.scale")
    # Parameters read as arrays sharing the module's memory.
    k.blocks[0].scale[:] = 3.0
    assert (k.state_dict()["blocks.0.scale"] == 3.0).all()
    assert repr(k.named) == repr(t.named)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 2)
        self.b = nn.Linear(2, 1)


class TorchSmall(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 2)
        self.b = torch.nn.Linear(2, 1)


Small.__name__ = TorchSmall.__name__ = "Small"  # torch's message names the class


def test_load_state_dict_reports_as_torch():
    t, k = TorchSmall(), Small()
    state = OrderedDict(t.state_dict())
    del state["b.bias"]
    state["extra.weight"] = torch.zeros(1)
    want = t.load_state_dict(state, strict=False)
    got = k.load_state_dict(state, strict=False)
    assert got.missing_keys == want.missing_keys == ["b.bias"]
    assert got.unexpected_keys == want.unexpected_keys == ["extra.weight"]
    assert got == tuple(want)
    close(k.a.weight, t.a.weight.detach().numpy())  # the keys present were loaded
    with pytest.raises(RuntimeError) as torch_error:
        t.load_state_dict(state)
    with pytest.raises(RuntimeError) as kiln_error:
        k.load_state_dict(state)
    assert str(kiln_error.value) == str(torch_error.value)
    assert isinstance(kiln_error.value, nn.StateDictError)
    # Size mismatches raise whatever strict says, and nothing is loaded.
    before = k.a.weight.copy()
    bad = dict(t.state_dict(), **{"a.weight": torch.zeros(5, 5)})
    with pytest.raises(RuntimeError, match=r"size mismatch for a.weight"):
        k.load_state_dict(bad, strict=False)
    assert (k.a.weight == before).all()
    assert repr(k.load_state_dict(t.state_dict())) == repr(t.load_state_dict(t.state_dict()))


# ---- Hooks -----------------------------------------------------------------------------------------

def test_hooks_see_the_tensors_torch_computes():
    torch.manual_seed(1)
    tnet = TorchNet().eval()
    net = Net().eval()
    copy_torch_to_kiln(net, tnet)
    x = images(2, 4)
    want = {}
    tnet.conv.register_forward_hook(lambda m, i, o: want.update(conv_in=i[0].numpy(), conv_out=o.detach().numpy()))
    tnet.fc.register_forward_pre_hook(lambda m, i: want.update(fc_in=i[0].numpy()))
    with torch.no_grad():
        tnet(torch.from_numpy(x))
    got, order = {}, []

    def conv_hook(module, inputs, output):
        assert module is net.conv and isinstance(inputs, tuple) and len(inputs) == 1
        order.append("conv")
        got.update(conv_in=inputs[0].copy(), conv_out=output.copy())

    def fc_pre_hook(module, inputs):
        assert module is net.fc
        order.append("fc-pre")
        got.update(fc_in=inputs[0].copy())

    h1 = net.conv.register_forward_hook(conv_hook)
    h2 = net.fc.register_forward_pre_hook(fc_pre_hook)
    net(x)
    assert order == ["conv", "fc-pre"]
    close(got["conv_in"], x)
    close(got["conv_out"], want["conv_out"])
    close(got["fc_in"], want["fc_in"])
    h1.remove(), h2.remove()
    net(x)
    assert order == ["conv", "fc-pre"]  # removed hooks stay silent
    with pytest.raises(NotImplementedError, match="hooks observe"):
        net.conv.register_forward_hook(lambda m, i, o: o * 2)
        net(x)


# ---- A custom forward over kiln.nn.functional ------------------------------------------------------

class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 8)
        self.gain = nn.Parameter(np.linspace(0.5, 1.5, 8).astype(np.float32))
        self.register_buffer("offset", np.full(8, 0.25, np.float32))
        self.block = nn.Sequential(nn.Linear(8, 8), nn.GELU())

    def forward(self, x):  # [B, 4, 6]
        h = F.gelu(self.proj(x))
        h = F.layer_norm(h, (8,), self.gain, None) + self.offset
        a = F.softmax(h @ h.transpose(1, 2) / math.sqrt(8.0), dim=-1)
        h = a @ h
        h = F.silu(self.block(h)) - F.sigmoid(h) * F.tanh(h)
        pooled = h.mean(1)
        s = h.sum(dim=-1, keepdim=True).permute(0, 2, 1).flatten(1)
        out = F.cat([pooled, s], dim=1)
        out = out.view(out.size(0), 3, 4).reshape(x.shape[0], -1)
        return F.log_softmax(F.dropout(out, 0.1, training=self.training), dim=-1)


class TorchCustom(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 8)
        self.gain = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.register_buffer("offset", torch.full((8,), 0.25))
        self.block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())

    def forward(self, x):
        tf = torch.nn.functional
        h = tf.gelu(self.proj(x))
        h = tf.layer_norm(h, (8,), self.gain, None) + self.offset
        a = tf.softmax(h @ h.transpose(1, 2) / math.sqrt(8.0), dim=-1)
        h = a @ h
        h = tf.silu(self.block(h)) - torch.sigmoid(h) * torch.tanh(h)
        pooled = h.mean(1)
        s = h.sum(dim=-1, keepdim=True).permute(0, 2, 1).flatten(1)
        out = torch.cat([pooled, s], dim=1)
        out = out.view(out.size(0), 3, 4).reshape(x.shape[0], -1)
        return tf.log_softmax(tf.dropout(out, 0.1, training=self.training), dim=-1)


def test_custom_forward_exports_valid_onnx_and_matches_torch(tmp_path):
    torch.manual_seed(2)
    t = TorchCustom().eval()
    k = Custom().eval()
    assert list(k.state_dict()) == list(t.state_dict())
    copy_torch_to_kiln(k, t)
    x = np.random.RandomState(5).randn(3, 4, 6).astype(np.float32)
    want = t(torch.from_numpy(x)).detach().numpy()
    close(k(x), want)
    for mode in ("eval", "train"):
        k.train(mode == "train")
        path = tmp_path / f"custom_{mode}.onnx"
        k.export(path, {"x": (1, 4, 6)}, dynamic_axes={"x": {0: "batch"}, "output": {0: "batch"}})
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
        assert [i.name for i in model.graph.input] == ["x"]
        assert {"proj.weight", "gain", "offset", "block.0.weight"} <= {i.name for i in model.graph.initializer}
    # The eval file at another batch size than traced (the view/reshape follow the batch).
    import kiln.backend
    (got,) = kiln.backend.prepare(str(tmp_path / "custom_eval.onnx")).run([x])
    close(got, want)


def test_var_errors_are_clear():
    with pytest.raises(ValueError, match="only while a module's forward is traced"):
        F.relu(_fake_var())

    class Bad(nn.Module):
        def forward(self, x):
            return x @ np.ones((3, 3), np.float32)

    with pytest.raises(ValueError, match=r"matmul: shapes \[2, 4\] and \[3, 3\]"):
        Bad()(np.zeros((2, 4), np.float32))


def _fake_var():
    class V:
        name, dtype, shape = "x", "float", [2]
    return nn.Var(V())


# ---- Zoo and backbones -----------------------------------------------------------------------------

def test_zoo_models_from_python():
    assert {"mlp", "lenet", "resnet18", "bert", "gpt2"} <= set(nn.zoo.model_names())
    nn.manual_seed(0)
    lenet = nn.zoo.create_model("lenet", num_labels=7).eval()
    assert lenet(np.zeros((3, 1, 28, 28), np.float32)).shape == (3, 7)
    assert nn.zoo.config_for("lenet", num_labels=7)["num_labels"] == 7
    assert nn.zoo.example_inputs("lenet") == [("input", (2, 1, 28, 28))]
    assert "conv1.weight" in lenet.state_dict()
    with pytest.raises(ValueError, match="nope"):
        nn.zoo.create_model("lenet", nope=1)


def test_backbone_from_python_has_hf_shapes():
    bb = kiln.AutoBackbone.from_config("resnet50", out_indices=(0, 1, 2, 3, 4)).eval()
    assert bb.stage_names == ["stem", "stage1", "stage2", "stage3", "stage4"]
    assert bb.out_features == bb.stage_names and bb.out_indices == (0, 1, 2, 3, 4)
    assert bb.channels == [64, 256, 512, 1024, 2048]
    assert bb.out_feature_channels == {"stem": 64, "stage1": 256, "stage2": 512, "stage3": 1024, "stage4": 2048}
    maps = bb(np.zeros((1, 3, 224, 224), np.float32))
    assert isinstance(maps, list)
    assert [m.shape for m in maps] == [(1, 64, 56, 56), (1, 256, 56, 56), (1, 512, 28, 28), (1, 1024, 14, 14),
                                       (1, 2048, 7, 7)]
    last = kiln.AutoBackbone.from_config("resnet18", num_channels=1)
    assert last.out_features == ["stage4"] and last.channels == [512]
    with pytest.raises(ValueError):
        kiln.AutoBackbone.from_config("resnet18", out_indices=(9,))


def test_backbone_inside_a_python_module():
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = kiln.AutoBackbone.from_config("resnet18", num_channels=1, out_indices=(3, 4))
            self.head = nn.Linear(sum(self.backbone.channels), 10)

        def forward(self, x):
            c3, c4 = self.backbone(x)
            return self.head(F.cat([c3.mean((2, 3)), c4.mean((2, 3))], dim=1))

    net = Classifier().eval()
    assert net(np.zeros((2, 1, 64, 64), np.float32)).shape == (2, 10)
    assert any(k.startswith("backbone.") for k in net.state_dict())


# ---- kiln.Trainer(model=<kiln.nn.Module>) ----------------------------------------------------------

class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.fc = nn.Linear(4 * 8 * 8, 4)

    def forward(self, input):  # noqa: A002 (the dataset's column)
        return self.fc(self.features(input).flatten(1))


def blobs(n, seed):
    """Four classes told apart by which image quadrant is bright."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 4, n)
    x = rng.randn(n, 1, 8, 8).astype(np.float32) * 0.3
    for i, c in enumerate(labels):
        r, q = divmod(int(c), 2)
        x[i, 0, 4 * r:4 * r + 4, 4 * q:4 * q + 4] += 1.0
    return [{"input": x[i], "labels": np.int64(labels[i])} for i in range(n)]


def trainer_args(tmp_path):
    return kiln.TrainingArguments(output_dir=str(tmp_path / "run"), num_train_epochs=3, learning_rate=1e-2,
                                  per_device_train_batch_size=16, logging_steps=4, save_strategy="no",
                                  report_to="none", disable_tqdm=True)


def test_trainer_trains_a_kiln_nn_module_and_loads_the_weights_back(tmp_path):
    nn.manual_seed(3)
    net = Tiny().eval()
    before = {k: v.copy() for k, v in net.state_dict().items()}
    trainer = kiln.Trainer(model=net, args=trainer_args(tmp_path), train_dataset=blobs(192, 1))
    assert not net.training  # the export in training mode left the module's mode alone
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) >= 4 and losses[-1] < 0.5 * losses[0], losses
    after = net.state_dict()
    for key in ("features.0.weight", "fc.weight", "fc.bias"):
        assert not np.array_equal(after[key], before[key]), key
    # The module now predicts what it learnt.
    test = blobs(64, 2)
    x = np.stack([e["input"] for e in test])
    y = np.array([e["labels"] for e in test])
    assert (net(x).argmax(-1) == y).mean() > 0.9


def test_frozen_submodule_stays_unchanged_in_the_trainer(tmp_path):
    nn.manual_seed(4)
    net = Tiny()
    net.features.requires_grad_(False)
    assert net.frozen_parameters() == ["features.0.weight", "features.0.bias", "features.1.weight",
                                       "features.1.bias"]
    before = {k: v.copy() for k, v in net.state_dict().items()}
    kiln.Trainer(model=net, args=trainer_args(tmp_path), train_dataset=blobs(96, 5)).train()
    after = net.state_dict()
    for key in ("features.0.weight", "features.0.bias", "features.1.weight", "features.1.bias"):
        assert np.array_equal(after[key], before[key]), key
    assert not np.array_equal(after["fc.weight"], before["fc.weight"])


# ---- Attention layers with torch's keywords --------------------------------------------------------

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, ids):
        h = self.layer(self.emb(ids))
        out, weights = self.mha(h, h, h, need_weights=False)
        assert weights is None
        return out.mean(1)


class TorchEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, ids):
        h = self.layer(self.emb(ids))
        out, _ = self.mha(h, h, h, need_weights=False)
        return out.mean(1)


def test_attention_layers_from_python_match_torch(tmp_path):
    torch.manual_seed(5)
    t, k = TorchEncoder().eval(), Encoder().eval()
    copy_torch_to_kiln(k, t)
    ids = np.random.RandomState(0).randint(0, 50, (2, 7)).astype(np.int64)
    close(k(ids), t(torch.from_numpy(ids)).detach().numpy())
    path = tmp_path / "enc.onnx"
    k.export(path, {"ids": (2, 7)}, {"ids": {0: "batch", 1: "seq"}}, input_dtypes=[np.int64])
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


def test_trainer_trains_a_zoo_model(tmp_path):
    """A zoo ResNet-18 (1 channel, 4 classes) from Python, trained by kiln.Trainer on a toy task whose
    class is the quadrant holding a bright square: the loss falls by more than 10x in 30 steps."""
    nn.manual_seed(0)
    net = nn.zoo.create_model("resnet18", num_channels=1, num_labels=4)
    rng = np.random.default_rng(0)
    data = []
    for _ in range(256):
        y = int(rng.integers(0, 4))
        x = rng.standard_normal((1, 28, 28)).astype(np.float32) * 0.1
        x[0, (y // 2) * 14:(y // 2) * 14 + 14, (y % 2) * 14:(y % 2) * 14 + 14] += 1.0
        data.append({"input": x, "labels": np.int64(y)})
    args = kiln.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=30, logging_steps=10,
                                  per_device_train_batch_size=16, report_to="none", disable_tqdm=True,
                                  save_strategy="no")
    trainer = kiln.Trainer(model=net, args=args, train_dataset=data)
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 3 and losses[-1] < losses[0] / 10, losses
