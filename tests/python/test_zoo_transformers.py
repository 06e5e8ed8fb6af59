"""Parity of the zoo's transformer entries with their PyTorch references (python3-torch 1.13):
"vit" with torchvision's VisionTransformer, "bert" with Hugging Face's BertForSequenceClassification
and "gpt2" with HF's GPT2LMHeadModel (transformers is not installed: the two HF models are written
out below with HF's module and parameter names and HF's eager computation), plus the ViT backbone's
feature maps against torchvision's intermediate outputs and a short `kiln train` run of a small BERT.

Each reference is seeded, its parameters perturbed (non-zero biases, non-unit LayerNorm weights, a
non-zero padding row) and its state_dict saved as .npz; `kiln-nn-export zoo-transformers SPEC`
(tools/nn_export/zoo_transformers.cpp) creates the zoo model, loads the weights by name (strict)
and exports ONNX in eval mode; `kiln run` runs the file and its outputs are compared with torch's.
Every exported file passes onnx.checker.

Tolerance: max |kiln - torch| <= 1e-5 * max |torch| over each output (float32 on both sides; the
issue asks for 1e-4, the models stay under 1e-6).
"""
import json
import math
import subprocess

import numpy as np
import onnx
import pytest
import torch
import torchvision
from kiln_cli import run_nn_export, run_onnx
from torch import nn

TOL = 1e-5
FLOAT32_MIN = torch.finfo(torch.float32).min

# ------------------------------------------------------------------------------ HF BERT in torch


class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"], padding_idx=0)
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.dropout = nn.Dropout(c["attention_probs_dropout_prob"])

    def forward(self, h, mask):
        b, s, d = h.shape
        split = lambda x: x.view(b, s, self.heads, d // self.heads).permute(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + mask
        probs = self.dropout(torch.softmax(scores, dim=-1))
        return (probs @ v).permute(0, 2, 1, 3).reshape(b, s, d)


class BertResidualOutput(nn.Module):  # HF's BertSelfOutput and BertOutput
    def __init__(self, c, inner):
        super().__init__()
        self.dense = nn.Linear(inner, c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])

    def forward(self, h, residual):
        return self.LayerNorm(self.dropout(self.dense(h)) + residual)


class BertAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertResidualOutput(c, c["hidden_size"])

    def forward(self, h, mask):
        return self.output(self.self(h, mask), h)


class BertIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.intermediate_act_fn = nn.GELU()  # HF's "gelu": the exact erf form

    def forward(self, h):
        return self.intermediate_act_fn(self.dense(h))


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertResidualOutput(c, c["intermediate_size"])

    def forward(self, h, mask):
        a = self.attention(h, mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c) for _ in range(c["num_hidden_layers"])])

    def forward(self, h, mask):
        for layer in self.layer:
            h = layer(h, mask)
        return h


class BertPooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.activation = nn.Tanh()

    def forward(self, h):
        return self.activation(self.dense(h[:, 0]))


class BertModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings, self.encoder, self.pooler = BertEmbeddings(c), BertEncoder(c), BertPooler(c)

    def forward(self, input_ids, attention_mask, token_type_ids):
        extended = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * FLOAT32_MIN
        return self.pooler(self.encoder(self.embeddings(input_ids, token_type_ids), extended))


class BertForSequenceClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = BertModel(c)
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])
        self.classifier = nn.Linear(c["hidden_size"], c["num_labels"])

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.classifier(self.dropout(self.bert(input_ids, attention_mask, token_type_ids)))


# ----------------------------------------------------------------------------- HF GPT-2 in torch


class Conv1D(nn.Module):
    """HF's pytorch_utils.Conv1D: a Linear with its weight stored transposed, [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(x.size()[:-1] + (self.nf,))


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.e, self.heads = c["n_embd"], c["n_head"]
        self.c_attn, self.c_proj = Conv1D(3 * self.e, self.e), Conv1D(self.e, self.e)
        self.attn_dropout, self.resid_dropout = nn.Dropout(c["attn_pdrop"]), nn.Dropout(c["resid_pdrop"])

    def forward(self, h):
        b, s, e = h.shape
        split = lambda x: x.view(b, s, self.heads, e // self.heads).permute(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(x) for x in self.c_attn(h).split(self.e, dim=2))
        w = q @ k.transpose(-1, -2) / torch.full([], v.size(-1) ** 0.5)
        causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
        w = torch.where(causal, w, torch.full([], FLOAT32_MIN))
        probs = self.attn_dropout(torch.softmax(w, dim=-1))
        out = (probs @ v).permute(0, 2, 1, 3).reshape(b, s, e)
        return self.resid_dropout(self.c_proj(out))


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        inner = c["n_inner"] or 4 * c["n_embd"]
        self.c_fc, self.c_proj = Conv1D(inner, c["n_embd"]), Conv1D(c["n_embd"], inner)
        self.act, self.dropout = NewGELU(), nn.Dropout(c["resid_pdrop"])

    def forward(self, h):
        return self.dropout(self.c_proj(self.act(self.c_fc(h))))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c["layer_norm_epsilon"]
        self.ln_1, self.attn = nn.LayerNorm(c["n_embd"], eps=eps), GPT2Attention(c)
        self.ln_2, self.mlp = nn.LayerNorm(c["n_embd"], eps=eps), GPT2MLP(c)

    def forward(self, x):
        h = self.attn(self.ln_1(x)) + x
        return h + self.mlp(self.ln_2(h))


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c["vocab_size"], c["n_embd"]), nn.Embedding(c["n_positions"], c["n_embd"])
        self.drop = nn.Dropout(c["embd_pdrop"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])

    def forward(self, input_ids):
        h = self.drop(self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1]).unsqueeze(0)))
        for block in self.h:
            h = block(h)
        return self.ln_f(h)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # HF's tie_weights

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


# ------------------------------------------------------------------------------------- configs

BERT = {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 32, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "num_labels": 3}
GPT2 = {"vocab_size": 100, "n_positions": 32, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": None,
        "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
        "layer_norm_epsilon": 1e-5}
VIT = {"image_size": 32, "patch_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64,
       "intermediate_size": 128, "num_labels": 10}


def torchvision_vit():
    return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64,
                                                mlp_dim=128, num_classes=10)


def perturbed(make, seed):
    """A seeded module plus N(0, 0.1) noise on its parameters (parameters() visits a tied matrix
    once), in eval mode."""
    torch.manual_seed(seed)
    module = make()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return module.eval()


def scaled_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shapes differ: kiln {got.shape}, torch {want.shape}"
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def kiln_export(tmp_path, cases):
    """Runs `kiln-nn-export zoo-transformers` on `cases` and returns each case's report."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cases": cases}))
    run_nn_export("zoo-transformers", spec)
    reports = [json.loads(open(c["report"]).read()) for c in cases]
    for c in cases:
        onnx.checker.check_model(onnx.load(c["onnx"]), full_check=True)
    return reports


def case(tmp_path, name, model, config, torch_module, **extra):
    weights = tmp_path / f"{name}.npz"
    np.savez(weights, **{k: v.detach().numpy() for k, v in torch_module.state_dict().items()})
    return dict(model=model, config=config, weights=str(weights), onnx=str(tmp_path / f"{name}.onnx"),
                report=str(tmp_path / f"{name}.json"), **extra)


def bert_inputs(batch, length, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, BERT["vocab_size"], size=(batch, length)).astype(np.int64)
    mask = np.ones((batch, length), np.int64)
    mask[-1, length // 2:] = 0  # the last row padded from the middle
    ids[mask == 0] = 0
    types = np.zeros((batch, length), np.int64)
    types[:, length // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


# --------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The three models and two backbones, exported once for the tests below."""
    tmp = tmp_path_factory.mktemp("zoo_transformers")
    refs = {"bert": perturbed(lambda: BertForSequenceClassification(BERT), 0),
            "gpt2": perturbed(lambda: GPT2LMHeadModel(GPT2), 1), "vit": perturbed(torchvision_vit, 2)}
    configs = {"bert": BERT, "gpt2": GPT2, "vit": VIT}
    cases = [case(tmp, name, name, configs[name], refs[name]) for name in ("bert", "gpt2", "vit")]
    cases.append(case(tmp, "vit_backbone", "vit", VIT, refs["vit"], strict=False, backbone={"out_indices": [0, 1, 2]}))
    cases.append(case(tmp, "vit_backbone_last", "vit", VIT, refs["vit"], strict=False, backbone={}))
    reports = kiln_export(tmp, cases)
    return tmp, refs, {c["onnx"].rsplit("/", 1)[1][:-5]: (c, r) for c, r in zip(cases, reports)}


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit"])
def test_state_dict_keys_and_shapes_equal_the_references(exported, name):
    _, refs, runs = exported
    want = [[k, list(v.shape)] for k, v in refs[name].state_dict().items()]
    assert runs[name][1]["state_dict"] == want  # keys, shapes and torch's order
    assert runs[name][1]["missing_keys"] == [] and runs[name][1]["unexpected_keys"] == []


@pytest.mark.parametrize("batch,length", [(2, 16), (3, 7)])
def test_bert_logits_match(exported, batch, length):
    tmp, refs, runs = exported
    feeds = bert_inputs(batch, length, seed=batch)
    got = run_onnx(runs["bert"][0]["onnx"], feeds, tmp / f"bert_run_{batch}", "-t", "2")[0]("logits")
    with torch.no_grad():
        want = refs["bert"](*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
    assert runs["bert"][1]["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert scaled_error(got, want.numpy()) <= TOL


@pytest.mark.parametrize("batch,length", [(2, 16), (1, 5)])
def test_gpt2_logits_match(exported, batch, length):
    tmp, refs, runs = exported
    ids = np.random.default_rng(batch).integers(0, GPT2["vocab_size"], size=(batch, length)).astype(np.int64)
    got = run_onnx(runs["gpt2"][0]["onnx"], {"input_ids": ids}, tmp / f"gpt2_run_{batch}", "-t", "2")[0]("logits")
    with torch.no_grad():
        want = refs["gpt2"](torch.from_numpy(ids)).numpy()
    assert got.shape == (batch, length, GPT2["vocab_size"])
    assert scaled_error(got, want) <= TOL
    # The tied head: one initializer serves the embedding and the head.
    inits = {i.name for i in onnx.load(runs["gpt2"][0]["onnx"]).graph.initializer}
    assert "transformer.wte.weight" in inits and "lm_head.weight" not in inits


def test_vit_logits_match(exported):
    tmp, refs, runs = exported
    x = np.random.default_rng(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
    got = run_onnx(runs["vit"][0]["onnx"], {"pixel_values": x}, tmp / "vit_run", "-t", "2")[0]("logits")
    with torch.no_grad():
        want = refs["vit"](torch.from_numpy(x)).numpy()
    assert scaled_error(got, want) <= TOL


def test_vit_backbone_feature_maps_match_torchvision_intermediates(exported):
    tmp, refs, runs = exported
    c, report = runs["vit_backbone"]
    assert report["stage_names"] == ["stem", "stage1", "stage2"]
    assert report["out_features"] == ["stem", "stage1", "stage2"] and report["channels"] == [64, 64, 64]
    # torchvision's weights load by name; the classifier's head and final LayerNorm are left over.
    assert report["missing_keys"] == []
    assert sorted(report["unexpected_keys"]) == ["encoder.ln.bias", "encoder.ln.weight", "heads.head.bias",
                                                 "heads.head.weight"]
    # Neither out_features nor out_indices: the last stage (HF's default).
    assert runs["vit_backbone_last"][1]["out_features"] == ["stage2"]
    assert runs["vit_backbone_last"][1]["outputs"] == ["stage2"]

    x = np.random.default_rng(4).standard_normal((2, 3, 32, 32)).astype(np.float32)
    read, _ = run_onnx(c["onnx"], {"pixel_values": x}, tmp / "vit_backbone_run", "-t", "2")
    vit = refs["vit"]
    tokens = []  # the stem (encoder input after the position embedding), then each layer's output
    hooks = [vit.encoder.dropout.register_forward_hook(lambda m, i, o: tokens.append(o))]
    hooks += [layer.register_forward_hook(lambda m, i, o: tokens.append(o)) for layer in vit.encoder.layers]
    with torch.no_grad():
        vit(torch.from_numpy(x))
    for h in hooks:
        h.remove()
    for stage, t in zip(report["out_features"], tokens):
        want = t[:, 1:].reshape(2, 4, 4, 64).permute(0, 3, 1, 2).numpy()  # HF's reshape_hidden_states
        got = read(stage)
        assert got.shape == (2, 64, 4, 4), stage
        assert scaled_error(got, want) <= TOL, stage


def test_kiln_train_fits_a_small_bert(kiln, tmp_path):
    """`kiln train` on the exported BERT (training mode, dropout 0.1): the label is which of two
    tokens stands first, where the pooler reads; the loss falls from chance to well below it."""
    config = dict(BERT, num_labels=2)
    torch.manual_seed(0)
    c = dict(model="bert", config=config, onnx=str(tmp_path / "bert_train.onnx"), report=str(tmp_path / "r.json"),
             train=True)
    kiln_export(tmp_path, [c])
    rng = np.random.default_rng(0)
    n, length = 64, 8
    feeds = bert_inputs(n, length, seed=5)
    labels = rng.integers(0, 2, size=n)
    feeds["input_ids"][:, 0] = 3 + labels
    np.savez(tmp_path / "data.npz", labels=labels.astype(np.int64), **feeds)
    proc = subprocess.run([str(kiln), "train", "--model", c["onnx"], "--loss", "CrossEntropyLoss",
                           "--train-data", str(tmp_path / "data.npz"), "--eval-data", str(tmp_path / "data.npz"),
                           "--output_dir", str(tmp_path / "out"),
                           "--max_steps", "40", "--learning_rate", "2e-3", "--per_device_train_batch_size", "16",
                           "--logging_steps", "1", "--save_strategy", "no", "--report_to", "jsonl",
                           "--disable_tqdm", "true"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = [json.loads(line) for line in (tmp_path / "out" / "logs.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in logs if "loss" in e]
    assert len(losses) == 40, logs
    first, last = np.mean(losses[:8]), np.mean(losses[-8:])
    assert abs(first - math.log(2)) < 0.25, losses
    assert last < 0.3 * first, losses
