"""Parity of kiln::nn's MultiheadAttention, TransformerEncoderLayer and TransformerDecoderLayer with
torch.nn's (python3-torch 1.13), in eval mode, with torch's state_dict loaded into Kiln.

Each case: a seeded torch module with perturbed parameters (non-zero biases, non-unit LayerNorm
weights) saves its state_dict as safetensors; `kiln-nn-export transformer-layers SPEC`
(tools/nn_export/transformer_layers.cpp) builds the Kiln module from the same arguments, loads the
weights strictly and exports ONNX with dynamic batch and sequence dims; `kiln run` runs it and the
outputs are compared with torch's. Every exported file passes onnx.checker (full check).

Tolerance: max |kiln - torch| <= 1e-5 * max(1, max |torch|) for every output (float32 on both
sides; the layers' outputs are O(1) after LayerNorm, attention weights are in [0, 1]).

The gradient check generates Kiln's training artifacts for an exported encoder layer with an MSE
loss and compares one SGD step (lr 1, so the update is the gradient) with torch's gradients within
1e-4 of each tensor's largest gradient, then checks that the loss falls over a few steps.
"""
import json

import numpy as np
import onnx
import pytest
import torch
from kiln_cli import run_nn_export, run_onnx
from torch import nn
from training_parity import generate_artifacts, read_safetensors, run_train_steps, write_manifest, write_safetensors

TOL = 1e-5
GRAD_TOL = 1e-4

# ------------------------------------------------------------------------------------- helpers

def perturb(module, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return module


def export_with_kiln(spec_path):
    run_nn_export("transformer-layers", spec_path, timeout=600)


def scaled_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shapes differ: kiln {got.shape}, torch {want.shape}"
    return float(np.max(np.abs(got - want), initial=0.0) / max(1.0, float(np.max(np.abs(want), initial=0.0))))


def causal_bool(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def causal_float(n):
    return nn.Transformer.generate_square_subsequent_mask(n)


def padding_mask(batch, length, seed):
    """bool [batch, length], True = padded; the first position of every row stays unpadded."""
    rng = np.random.default_rng(seed)
    mask = rng.random((batch, length)) < 0.3
    mask[:, 0] = False
    return torch.from_numpy(mask)


# -------------------------------------------------------------------------------------- the cases
#
# A case: the torch module, its Kiln spec (module, options, flags), the named inputs at forward
# positions (slots), the torch call, and the output names. Inputs are exported with every dim
# dynamic except the embedding; `sizes` lists the input sets the one exported file is run on.

class Case:
    def __init__(self, name, module_type, options, torch_module, inputs, call, outputs, flags=None):
        self.name, self.module_type, self.options = name, module_type, options
        self.torch_module, self.inputs, self.call = torch_module, inputs, call
        self.outputs, self.flags = outputs, flags or {}


def rand(seed, *shape):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def mha_cases():
    cases = []
    e, h = 16, 4

    def make(**kw):
        torch.manual_seed(0)
        return perturb(nn.MultiheadAttention(e, h, **kw), 1)

    # self-attention, sequence first, head-averaged weights
    x = rand(1, 5, 3, e)
    cases.append(Case("mha_self_seq_first", "MultiheadAttention", {"embed_dim": e, "num_heads": h}, make(),
                      [("x", x, [0, 1, 2])], lambda m, x: m(x, x, x), ["attn_output", "attn_weights"]))
    # self-attention, batch first, bool causal mask + key padding, per-head weights
    x = rand(2, 3, 6, e)
    kpm = padding_mask(3, 6, 3)
    cases.append(Case("mha_self_bf_masks", "MultiheadAttention", {"embed_dim": e, "num_heads": h, "batch_first": True},
                      make(batch_first=True), [("x", x, [0, 1, 2]), ("kpm", kpm, [3]), ("mask", causal_bool(6), [4])],
                      lambda m, x, kpm, mask: m(x, x, x, key_padding_mask=kpm, attn_mask=mask,
                                                average_attn_weights=False),
                      ["attn_output", "attn_weights"], {"average_attn_weights": False}))
    # cross-attention (key is value), sequence first, float [N*H, L, S] mask + key padding
    q, kv = rand(4, 4, 2, e), rand(5, 7, 2, e)
    mask = rand(6, 2 * h, 4, 7)
    kpm = padding_mask(2, 7, 7)
    cases.append(Case("mha_cross_float_mask", "MultiheadAttention", {"embed_dim": e, "num_heads": h}, make(),
                      [("q", q, [0]), ("kv", kv, [1, 2]), ("kpm", kpm, [3]), ("mask", mask, [4])],
                      lambda m, q, kv, kpm, mask: m(q, kv, kv, key_padding_mask=kpm, attn_mask=mask),
                      ["attn_output", "attn_weights"]))
    # distinct q, k, v, no bias, batch first, need_weights=False
    q, k, v = rand(8, 2, 3, e), rand(9, 2, 5, e), rand(10, 2, 5, e)
    cases.append(Case("mha_qkv_no_bias", "MultiheadAttention",
                      {"embed_dim": e, "num_heads": h, "batch_first": True, "bias": False},
                      make(batch_first=True, bias=False), [("q", q, [0]), ("k", k, [1]), ("v", v, [2])],
                      lambda m, q, k, v: m(q, k, v, need_weights=False), ["attn_output"], {"need_weights": False}))
    # is_causal (Kiln builds the mask) against torch with the explicit float subsequent mask
    x = rand(11, 2, 6, e)
    cases.append(Case("mha_is_causal", "MultiheadAttention", {"embed_dim": e, "num_heads": h, "batch_first": True},
                      make(batch_first=True), [("x", x, [0, 1, 2])],
                      lambda m, x: m(x, x, x, attn_mask=causal_float(x.shape[1])),
                      ["attn_output", "attn_weights"], {"is_causal": True}))
    # unbatched [L, E]
    x = rand(12, 5, e)
    cases.append(Case("mha_unbatched", "MultiheadAttention", {"embed_dim": e, "num_heads": h}, make(),
                      [("x", x, [0, 1, 2])], lambda m, x: m(x, x, x), ["attn_output", "attn_weights"]))
    return cases


def layer_options(batch_first, norm_first, activation):
    return {"d_model": 16, "nhead": 4, "dim_feedforward": 32, "activation": activation, "batch_first": batch_first,
            "norm_first": norm_first}


def torch_layer(cls, options, seed):
    torch.manual_seed(seed)
    return perturb(cls(**options), seed + 1)


def seq(x, batch_first):
    """[N, L, E] data in the layer's layout."""
    return x if batch_first else x.transpose(0, 1).contiguous()


def call_with_names(names):
    """Calls the torch layer with the case's inputs as keyword arguments."""
    return lambda m, *args: m(**dict(zip(names, args)))


def encoder_cases():
    cases = []
    variants = [(b, n, a) for b in (False, True) for n in (False, True) for a in ("relu", "gelu")]
    for i, (bf, nf, act) in enumerate(variants):
        o = layer_options(bf, nf, act)
        n, length = 3, 6
        src = seq(rand(20 + i, n, length, 16), bf)
        kpm = padding_mask(n, length, 30 + i)
        mask = causal_bool(length) if i % 2 == 0 else causal_float(length)
        cases.append(Case(f"encoder_bf{int(bf)}_nf{int(nf)}_{act}", "TransformerEncoderLayer", o,
                          torch_layer(nn.TransformerEncoderLayer, o, 40 + i),
                          [("src", src, [0]), ("src_mask", mask, [1]), ("src_key_padding_mask", kpm, [2])],
                          lambda m, src, mask, kpm: m(src, src_mask=mask, src_key_padding_mask=kpm), ["output"]))
    o = layer_options(True, False, "gelu")
    src = rand(50, 2, 5, 16)
    cases.append(Case("encoder_is_causal", "TransformerEncoderLayer", o, torch_layer(nn.TransformerEncoderLayer, o, 51),
                      [("src", src, [0])], lambda m, src: m(src, src_mask=causal_float(src.shape[1])), ["output"],
                      {"is_causal": True}))
    o = layer_options(False, False, "relu")
    src = rand(52, 7, 2, 16)
    cases.append(Case("encoder_no_mask", "TransformerEncoderLayer", o, torch_layer(nn.TransformerEncoderLayer, o, 53),
                      [("src", src, [0])], lambda m, src: m(src), ["output"]))
    return cases


def decoder_cases():
    cases = []
    variants = [(b, n, a) for b in (False, True) for n in (False, True) for a in ("relu", "gelu")]
    for i, (bf, nf, act) in enumerate(variants):
        o = layer_options(bf, nf, act)
        n, t, s = 2, 5, 7
        tgt, memory = seq(rand(60 + i, n, t, 16), bf), seq(rand(70 + i, n, s, 16), bf)
        tgt_mask = causal_bool(t) if i % 2 == 0 else causal_float(t)
        inputs = [("tgt", tgt, [0]), ("memory", memory, [1]), ("tgt_mask", tgt_mask, [2]),
                  ("tgt_key_padding_mask", padding_mask(n, t, 80 + i), [4]),
                  ("memory_key_padding_mask", padding_mask(n, s, 90 + i), [5])]
        if i % 4 == 1:
            inputs.append(("memory_mask", rand(95 + i, t, s), [3]))
        order = ["tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"]
        inputs.sort(key=lambda item: order.index(item[0]))
        names = [name for name, _, _ in inputs]
        cases.append(Case(f"decoder_bf{int(bf)}_nf{int(nf)}_{act}", "TransformerDecoderLayer", o,
                          torch_layer(nn.TransformerDecoderLayer, o, 100 + i), inputs,
                          call_with_names(names), ["output"]))
    o = layer_options(True, True, "relu")
    tgt, memory = rand(110, 2, 4, 16), rand(111, 2, 6, 16)
    cases.append(Case("decoder_tgt_is_causal", "TransformerDecoderLayer", o,
                      torch_layer(nn.TransformerDecoderLayer, o, 112), [("tgt", tgt, [0]), ("memory", memory, [1])],
                      lambda m, tgt, memory: m(tgt, memory, tgt_mask=causal_float(tgt.shape[1])), ["output"],
                      {"tgt_is_causal": True}))
    return cases


def all_cases():
    return mha_cases() + encoder_cases() + decoder_cases()


def torch_outputs(case):
    """The reference: eval mode with autograd on and parameters requiring grad, which keeps torch
    on its documented math path (not the fused inference fast path)."""
    m = case.torch_module.eval()
    with torch.enable_grad():
        out = case.call(m, *[value for _, value, _ in case.inputs])
    out = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() for o in out if o is not None]


def input_spec(name, value, slots):
    dtype = "bool" if value.dtype == torch.bool else "float"
    # Every dim dynamic but the embedding (the last dim of a [.., E] activation).
    activation = name in ("x", "q", "k", "v", "kv", "src", "tgt", "memory")
    shape = [-1] * value.dim()
    if activation:
        shape[-1] = int(value.shape[-1])
    return {"name": name, "dtype": dtype, "shape": shape, "slots": slots}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case's ONNX file, exported by Kiln in one run of the gtest."""
    folder = tmp_path_factory.mktemp("nn_transformer")
    cases = all_cases()
    spec = []
    for case in cases:
        weights = folder / f"{case.name}.safetensors"
        write_safetensors(weights, {k: v.detach().numpy() for k, v in case.torch_module.state_dict().items()})
        spec.append({"module": case.module_type, "options": case.options, "weights": str(weights),
                     "onnx": str(folder / f"{case.name}.onnx"), "flags": case.flags, "outputs": case.outputs,
                     "inputs": [input_spec(n, v, s) for n, v, s in case.inputs]})
    (folder / "spec.json").write_text(json.dumps({"cases": spec}))
    export_with_kiln(folder / "spec.json")
    return folder, {c.name: c for c in cases}


CASE_NAMES = [c.name for c in all_cases()]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_matches_torch(exported, name):
    folder, cases = exported
    case = cases[name]
    path = folder / f"{name}.onnx"
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    want = torch_outputs(case)
    assert len(want) == len(case.outputs)
    got, _ = run_onnx(path, {n: v.numpy() for n, v, _ in case.inputs}, folder / f"run_{name}", "-t", "2")
    errors = {out: scaled_error(got(out), w) for out, w in zip(case.outputs, want)}
    assert all(err <= TOL for err in errors.values()), f"{name}: errors beyond {TOL}: {errors}"


def test_initializers_are_state_dict_keys(exported):
    folder, cases = exported
    for name in ("mha_self_seq_first", "encoder_bf0_nf0_relu", "decoder_bf1_nf1_gelu"):
        model = onnx.load(str(folder / f"{name}.onnx"))
        inits = sorted(t.name for t in model.graph.initializer)
        assert inits == sorted(cases[name].torch_module.state_dict()), name


def test_one_export_runs_at_other_sizes(exported):
    """The same exported files at batch and sequence sizes other than the ones above."""
    folder, cases = exported
    for name, make_inputs in [
        ("encoder_bf1_nf0_relu", lambda: {"src": rand(200, 5, 9, 16), "src_mask": causal_bool(9),
                                          "src_key_padding_mask": padding_mask(5, 9, 201)}),
        ("decoder_bf0_nf1_gelu", lambda: {"tgt": rand(202, 3, 1, 16), "memory": rand(203, 8, 1, 16),
                                          "tgt_mask": causal_float(3),
                                          "tgt_key_padding_mask": padding_mask(1, 3, 204),
                                          "memory_key_padding_mask": padding_mask(1, 8, 205)}),
        ("mha_is_causal", lambda: {"x": rand(206, 4, 9, 16)}),
    ]:
        case = cases[name]
        feeds = make_inputs()
        call_case = Case(name, case.module_type, case.options, case.torch_module,
                         [(n, v, []) for n, v in feeds.items()], case.call, case.outputs)
        want = torch_outputs(call_case)
        got, _ = run_onnx(folder / f"{name}.onnx", {n: v.numpy() for n, v in feeds.items()}, folder / f"resized_{name}",
                          "-t", "2")
        for out, w in zip(case.outputs, want):
            assert scaled_error(got(out), w) <= TOL, f"{name} {out} at new sizes"


# ---------------------------------------------------------------------------------- gradients

def test_encoder_layer_gradients_and_training(tmp_path):
    o = dict(layer_options(True, False, "gelu"), dropout=0.0)
    module = torch_layer(nn.TransformerEncoderLayer, o, 300)
    src = rand(301, 4, 6, 16)
    kpm = padding_mask(4, 6, 302)
    target = rand(303, 4, 6, 16)

    weights = tmp_path / "w.safetensors"
    write_safetensors(weights, {k: v.detach().numpy() for k, v in module.state_dict().items()})
    spec = {"cases": [{"module": "TransformerEncoderLayer", "options": o, "weights": str(weights),
                       "onnx": str(tmp_path / "encoder.onnx"), "outputs": ["output"],
                       "inputs": [input_spec("src", src, [0]), input_spec("src_key_padding_mask", kpm, [2])]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    export_with_kiln(tmp_path / "spec.json")

    artifacts = generate_artifacts(tmp_path / "encoder.onnx", tmp_path / "artifacts", "--loss", "MSELoss",
                                   "--optimizer", "SGD", "--lr", "1.0")
    initial, meta = read_safetensors(artifacts / "checkpoint")
    assert sorted(meta["kiln.trainable"]) == sorted(n for n, _ in module.named_parameters()), meta["kiln.trainable"]
    manifest = write_manifest(tmp_path / "data", [{"src": src.numpy(), "src_key_padding_mask": kpm.numpy(),
                                                   "labels": target.numpy()}])
    saved = tmp_path / "step1.safetensors"
    steps, _, _ = run_train_steps(artifacts, "--batches", manifest, "--steps", 1, "--threads", 2, "--save", saved)
    after, _ = read_safetensors(saved)

    module.train()  # dropout 0: the same math as eval; autograd on
    loss = nn.functional.mse_loss(module(src, src_key_padding_mask=kpm), target)
    module.zero_grad()
    loss.backward()
    assert abs(steps[0]["loss"] - loss.item()) <= 1e-5 * abs(loss.item()), (steps[0]["loss"], loss.item())
    bad = {}
    for name, p in module.named_parameters():
        kiln_grad = initial[name].astype(np.float64) - after[name].astype(np.float64)  # SGD, lr 1
        want = p.grad.numpy().astype(np.float64)
        err = float(np.max(np.abs(kiln_grad - want)) / np.max(np.abs(want)))
        if not err <= GRAD_TOL:
            bad[name] = err
    assert not bad, f"gradients beyond {GRAD_TOL} of each tensor's largest: {bad}"

    steps, _, _ = run_train_steps(artifacts, "--batches", manifest, "--steps", 5, "--threads", 2, "--lr", "0.05")
    losses = [s["loss"] for s in steps]
    assert all(b < a for a, b in zip(losses, losses[1:])), f"loss does not fall: {losses}"
