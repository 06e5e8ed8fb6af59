"""RNN, GRU and LSTM against torch.nn.RNN / GRU / LSTM, exported by torch.onnx (opset 17).

- Forward and every gradient (input, initial states, each weight and bias of each layer and
  direction) through ORTModule against torch autograd: float64 within 1e-10, float32 within 1e-5
  (relative to the largest element), for one and two layers, both directions, batch_first, no
  biases, tanh and relu RNNs, with and without initial states, and packed variable-length batches
  (pack_padded_sequence, which the exporter turns into sequence_lens).
- The issue's models: an LSTM language model and a bidirectional GRU sequence classifier exported
  from PyTorch, turned into training artifacts by `kiln artifacts` and trained 20 AdamW steps by
  kiln-train-steps: every step's loss within 1e-4 of torch's and every final weight within 1e-4.
The ONNX semantics themselves (sequence_lens, activations, clip, layout, peepholes, input_forget)
are checked by finite differences in tests/autodiff/rnn_rules_test.cpp and ONNX's node cases."""
import copy
import warnings

import numpy as np
import pytest
import torch
from kiln_package import import_kiln
from torch import nn
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

import_kiln()
from kiln.training.ortmodule import ORTModule  # noqa: E402

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


pytestmark = pytest.mark.usefixtures("ortmodule_in_kiln")


class Recurrent(nn.Module):
    """The layer with its outputs as a flat tuple (Y, then each state)."""

    def __init__(self, layer, packed=False):
        super().__init__()
        self.layer = layer
        self.packed = packed

    def forward(self, x, *state):
        if self.packed:
            lengths, *state = state
            total = x.shape[1 if self.layer.batch_first else 0]
            x = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=self.layer.batch_first,
                                                  enforce_sorted=False)
        if isinstance(self.layer, nn.LSTM) and state:
            y, (h, c) = self.layer(x, tuple(state))
            out = (y, h, c)
        else:
            y, h = self.layer(x, *state)
            out = (y, *h) if isinstance(h, tuple) else (y, h)
        if self.packed:
            y, _ = nn.utils.rnn.pad_packed_sequence(out[0], batch_first=self.layer.batch_first, total_length=total)
            out = (y, *out[1:])
        return out


LAYERS = {"RNN": nn.RNN, "GRU": nn.GRU, "LSTM": nn.LSTM}
CONFIGS = [
    dict(num_layers=1),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=2, batch_first=True),
    dict(num_layers=1, bidirectional=True, bias=False),
]


def relative(got, want):
    scale = max(float(want.abs().max()), 1e-30)
    return float((got - want).abs().max()) / scale


def run(module, x, states, weights, lengths=None):
    """Loss = sum of each output times fixed random weights; returns (outputs, input and state
    gradients, parameter gradients by name)."""
    x = x.detach().clone().requires_grad_()
    states = [s.detach().clone().requires_grad_() for s in states]
    outs = module(x, *([] if lengths is None else [lengths]), *states)
    loss = sum((o * w).sum() for o, w in zip(outs, weights))
    loss.backward()
    params = {n.split("layer.")[-1]: p.grad for n, p in module.named_parameters()}
    return outs, [x.grad] + [s.grad for s in states], params


def check(kind, config, dtype, with_state=True, nonlinearity=None, lengths=None):
    """`lengths`: a packed batch of these lengths (padded to the longest)."""
    torch.manual_seed(0)
    kw = dict(config)
    if nonlinearity:
        kw["nonlinearity"] = nonlinearity
    layer = LAYERS[kind](input_size=4, hidden_size=5, **kw).to(dtype)
    plain = Recurrent(layer, packed=lengths is not None)
    ours = ORTModule(copy.deepcopy(plain))
    batch, seq = 3, 6
    dirs = 2 if config.get("bidirectional") else 1
    x = torch.randn((batch, seq, 4) if config.get("batch_first") else (seq, batch, 4), dtype=dtype)
    states = []
    if with_state:
        states = [torch.randn(config["num_layers"] * dirs, batch, 5, dtype=dtype)
                  for _ in range(2 if kind == "LSTM" else 1)]
    extra = [] if lengths is None else [lengths]
    want_out = plain(x, *extra, *states)
    weights = [torch.randn(o.shape, dtype=dtype) for o in want_out]
    want = run(plain, x, states, weights, lengths)
    got = run(ours, x, states, weights, lengths)
    tol = TOL[dtype]
    for i, (g, w) in enumerate(zip(got[0], want[0])):
        assert relative(g, w) <= tol, f"output {i}: {relative(g, w):.2e}"
    for i, (g, w) in enumerate(zip(got[1], want[1])):
        assert relative(g, w) <= tol, f"gradient of input {i}: {relative(g, w):.2e}"
    assert set(got[2]) == set(want[2])
    for name, w in want[2].items():
        assert relative(got[2][name], w) <= tol, f"gradient of {name}: {relative(got[2][name], w):.2e}"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("kind", list(LAYERS))
def test_layers_match_torch_float64(kind, config):
    check(kind, config, torch.float64)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_layers_match_torch_float32_without_initial_state(kind):
    check(kind, dict(num_layers=2, bidirectional=True), torch.float32, with_state=False)


def test_relu_rnn():
    check("RNN", dict(num_layers=2, bidirectional=True), torch.float64, nonlinearity="relu")


@pytest.mark.parametrize("kind", list(LAYERS))
def test_packed_variable_lengths(kind):
    """pack_padded_sequence exports as sequence_lens: rows stop early, the padded Y rows are zero,
    the states are each row's last valid step, and no gradient reaches the padding."""
    lengths = torch.tensor([6, 2, 4])
    check(kind, dict(num_layers=2, bidirectional=True, batch_first=True), torch.float64, lengths=lengths)
    check(kind, dict(num_layers=1), torch.float64, with_state=False, lengths=lengths)


# ------------------------------------------------------------------------- the two models

STEPS = 20
LOSS_TOL = 1e-4    # relative, per step
WEIGHT_TOL = 1e-4  # max |kiln - torch| / max(1, max |torch|), per parameter
LR = 1e-2          # AdamW's (torch's other defaults)


class LstmLanguageModel(nn.Module):
    """Embedding, a two-layer LSTM, a linear head; the output is the next-token loss."""

    def __init__(self, vocab=40, dim=16, hidden=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids):
        y, _ = self.lstm(self.embed(input_ids))
        logits = self.head(y)
        vocab = logits.shape[-1]
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), input_ids[:, 1:].reshape(-1))


class GruClassifier(nn.Module):
    """Embedding, a bidirectional GRU over a packed batch of variable lengths, the two final
    states into a linear head: the sequence's class logits."""

    def __init__(self, vocab=40, dim=16, hidden=20, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, input_ids, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(input_ids), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, h = self.gru(packed)
        return self.head(torch.cat([h[0], h[1]], dim=1))


def lm_batch(i):
    """Counting sequences (start + step * t, mod 40): learnable, so the loss falls."""
    rng = np.random.default_rng(7000 + i)
    start, step = rng.integers(0, 40, size=(4, 1)), rng.integers(1, 4, size=(4, 1))
    return {"input_ids": ((start + step * np.arange(12)) % 40).astype(np.int64)}


def classifier_batch(i):
    rng = np.random.default_rng(8000 + i)
    lengths = rng.integers(3, 11, size=(6,)).astype(np.int64)
    lengths[0] = 10  # the longest row fills the padded length, as a data collator pads
    ids = rng.integers(1, 40, size=(6, 10), dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
    labels = ids[:, 0] % 4  # the class is in the first token, which the backward direction reads last
    return {"input_ids": ids, "lengths": lengths, "labels": labels.astype(np.int64)}


@pytest.mark.parametrize("name", ["lstm_language_model", "gru_classifier"])
def test_exported_models_train_like_torch(tmp_path, name):
    torch.manual_seed(0)
    if name == "lstm_language_model":
        module, batch, loss, out = perturb(LstmLanguageModel()), lm_batch, "none", "loss"
    else:
        module, batch, loss, out = perturb(GruClassifier()), classifier_batch, "CrossEntropyLoss", "logits"
    batches = [batch(i) for i in range(STEPS)]
    feeds = {k: v for k, v in batches[0].items() if k != "labels"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_path = export_forward(module, feeds, tmp_path / "model.onnx", output_names=[out])
    load_initializers_into(module, model_path)
    artifacts = generate_artifacts(model_path, tmp_path / "artifacts", "--loss", loss, "--optimizer", "AdamW",
                                   "--lr", repr(LR))
    _, initial = read_safetensors(artifacts / "checkpoint")
    names = [n for n, _ in module.named_parameters()]
    assert sorted(initial["kiln.trainable"]) == sorted(names)

    saved = tmp_path / "trained.safetensors"
    steps, _, _ = run_train_steps(artifacts, "--batches", write_manifest(tmp_path / "data", batches), "--steps",
                                  STEPS, "--threads", 2, "--save", saved)
    kiln_losses = [s["loss"] for s in steps]
    torch_losses, _ = torch_train(module, batches, lambda p: torch.optim.AdamW(p, lr=LR),
                                  None if loss == "none" else nn.functional.cross_entropy)
    bad = [(i, k, t) for i, (k, t) in enumerate(zip(kiln_losses, torch_losses)) if not abs(k - t) <= LOSS_TOL * abs(t)]
    assert not bad, f"losses beyond {LOSS_TOL} relative (step, kiln, torch): {bad}"
    assert np.mean(torch_losses[-5:]) < np.mean(torch_losses[:5]) - 0.05, torch_losses  # it learns
    tensors, _ = read_safetensors(saved)
    state = module.state_dict()
    errors = {n: weight_error(tensors[n], state[n].numpy()) for n in names}
    assert max(errors.values()) <= WEIGHT_TOL, errors
