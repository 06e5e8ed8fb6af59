"""Real-model architectures for the parity tests (test_model_parity.py) and bench/bench.py:
ResNet-18 (torchvision), a ViT, a BERT-style encoder and a GPT-2-style decoder, each seeded, in eval
mode, and exported with opset 17 and dynamic batch (and sequence) axes.

Every model is described by a `ZooModel`: how to build it at a given size, what its inputs look
like, and how to export it. Sizes: "test" is small enough for CI; "bench" is what a user would run
on a CPU (see bench/README.md).
"""
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
import torchvision
from torch import nn

# --------------------------------------------------------------------------------------- ResNet-18

def resnet18(num_classes=1000):
    """torchvision's ResNet-18 with random weights (weights=None: nothing is downloaded)."""
    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


def calibrate_batchnorm(model, example, steps=2):
    """Gives BatchNorm layers running statistics of real activations (a cumulative average over a few
    training-mode forward passes), as training would; with the defaults (mean 0, var 1) a randomly
    initialised ResNet's activations grow layer by layer and the test would exercise odd ranges."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average
    model.train()
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn(example.shape, generator=gen))
    model.eval()


# --------------------------------------------------------------------------------------------- ViT

class ViT(nn.Module):
    """Vision Transformer: patch embedding (Conv2d with stride = patch), a class token, learned
    position embeddings, a pre-LayerNorm nn.TransformerEncoder with GELU, a final LayerNorm and a
    linear head on the class token."""

    def __init__(self, image=32, patch=4, channels=3, dim=64, heads=4, layers=2, mlp=128, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        # enable_nested_tensor=False: keeps TransformerEncoder off its nested-tensor fast path,
        # which the ONNX exporter cannot export (the layers' own fast path: see export()).
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)        # [B, tokens, dim]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.encoder(x))
        return self.head(x[:, 0])


# -------------------------------------------------------------------------------------------- BERT

class Bert(nn.Module):
    """BERT-style encoder for sequence classification: token + position + token-type embeddings,
    LayerNorm, a post-LayerNorm nn.TransformerEncoder with GELU whose src_key_padding_mask comes
    from `attention_mask` (1 = token, 0 = padding), a tanh pooler on [CLS] and a linear classifier."""

    def __init__(self, vocab=1000, max_len=64, dim=64, heads=4, layers=2, ff=128, classes=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.typ = nn.Embedding(2, dim)
        self.emb_norm = nn.LayerNorm(dim, eps=1e-12)
        layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, activation="gelu",
                                           batch_first=True, layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, classes)

    def forward(self, input_ids, attention_mask):
        seq = input_ids.shape[1]
        positions = torch.arange(seq, device=input_ids.device).unsqueeze(0)
        types = torch.zeros_like(input_ids)  # one segment
        x = self.emb_norm(self.tok(input_ids) + self.pos(positions) + self.typ(types))
        x = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


# ------------------------------------------------------------------------------------------- GPT-2

class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written out, as GPT-2 (and nanoGPT) do."""

    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        # A registered buffer, sliced to the sequence length at run time (a Slice of a constant).
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def forward(self, x):
        b, t, c = x.shape
        hd = self.head_dim  # a Python int, so the scale below is a constant, not a traced value
        q = self.q(x).view(b, t, self.heads, hd).transpose(1, 2)  # [B, H, T, hd]
        k = self.k(x).view(b, t, self.heads, hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, max_len)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    """GPT-2-style decoder: token + position embeddings, pre-LayerNorm blocks, a final LayerNorm and
    an LM head tied to the token embedding. Initialised as GPT-2 is (normal, std 0.02)."""

    def __init__(self, vocab=512, max_len=64, dim=64, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, max_len) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.normal_(p, std=0.02)  # non-zero, so that biases are checked too

    def forward(self, input_ids):
        t = input_ids.shape[1]
        positions = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# ------------------------------------------------------------------------------------------ the zoo

@dataclass
class ZooModel:
    """A model of the zoo: `make()` builds it (unseeded, in train mode); `inputs(batch, seq, rng)`
    returns the named numpy inputs; `dynamic` names the dynamic axes of each input and
    `output_dynamic` those of the output."""
    make: Callable[[], nn.Module]
    inputs: Callable[[int, int, np.random.Generator], Dict[str, np.ndarray]]
    dynamic: Dict[str, Dict[int, str]]
    output_dynamic: Dict[int, str]
    output: str = "logits"
    image: int = 0  # the image models' input side (0: a token model)


SIZES = {
    # name -> size -> constructor keyword arguments (the vocabularies are named: inputs draw from them)
    "resnet18": {"test": {}, "bench": {}},
    "vit": {"test": {}, "bench": {}},
    "bert": {"test": dict(vocab=1000),
             # BERT-mini (L4, H256), the size people fine-tune on CPUs; 128 positions.
             "bench": dict(vocab=8192, max_len=128, dim=256, heads=4, layers=4, ff=1024, classes=2)},
    "gpt2": {"test": dict(vocab=512),
             # A small GPT-2 (L4, H256) whose forward fits a CPU bench round; a 512-token context, so
             # that bench/bench.py's scaling table runs it at 128, 256 and 512 tokens.
             "bench": dict(vocab=8192, max_len=512, dim=256, heads=4, layers=4)},
}


def _image_inputs(channels, size):
    def inputs(batch, seq, rng):
        return {"input": rng.standard_normal((batch, channels, size, size)).astype(np.float32)}
    return inputs


def _token_ids(batch, seq, rng, vocab):
    return rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)


def _bert_inputs(size):
    vocab = SIZES["bert"][size]["vocab"]

    def inputs(batch, seq, rng):
        ids = _token_ids(batch, seq, rng, vocab)
        mask = np.ones((batch, seq), dtype=np.int64)
        # Right padding of varying length (row 0 unpadded): at most seq-1 positions, so [CLS] stays.
        for row in range(1, batch):
            pad = int(rng.integers(1, max(2, seq // 2)))
            mask[row, seq - pad:] = 0
            ids[row, seq - pad:] = 0  # the [PAD] token
        return {"input_ids": ids, "attention_mask": mask}
    return inputs


def _gpt2_inputs(size):
    vocab = SIZES["gpt2"][size]["vocab"]
    return lambda batch, seq, rng: {"input_ids": _token_ids(batch, seq, rng, vocab)}


def zoo(size="test", image=None):
    """name -> ZooModel at `size` ("test" or "bench"). `image`: ResNet-18's input side (default 224;
    its adaptive average pooling takes any side from 32 up, such as CIFAR's 32x32); the ViT's side
    is fixed by its position embeddings."""
    kw = {name: sizes[size] for name, sizes in SIZES.items()}
    tokens = {0: "batch", 1: "seq"}
    side = image or 224
    return {
        "resnet18": ZooModel(lambda: resnet18(**kw["resnet18"]), _image_inputs(3, side),
                             {"input": {0: "batch"}}, {0: "batch"}, image=side),
        "vit": ZooModel(lambda: ViT(**kw["vit"]), _image_inputs(3, 32), {"input": {0: "batch"}}, {0: "batch"},
                        image=32),
        "bert": ZooModel(lambda: Bert(**kw["bert"]), _bert_inputs(size),
                         {"input_ids": tokens, "attention_mask": tokens}, {0: "batch"}),
        "gpt2": ZooModel(lambda: GPT2(**kw["gpt2"]), _gpt2_inputs(size), {"input_ids": tokens}, tokens),
    }


def build(name, size="test", seed=0, image=None) -> Tuple[nn.Module, ZooModel]:
    """The zoo model `name`, seeded and in eval mode (ResNet's BatchNorm statistics calibrated on
    images of its input side; `image`: see zoo())."""
    spec = zoo(size, image)[name]
    torch.manual_seed(seed)
    model = spec.make()
    if name == "resnet18":
        calibrate_batchnorm(model, torch.zeros(4, 3, spec.image, spec.image))
    return model.eval(), spec


def forward(model, feeds: Dict[str, np.ndarray]) -> np.ndarray:
    """PyTorch's output for numpy inputs, in inference mode (no_grad, eval: the fast paths it takes)."""
    with torch.no_grad():
        return model(*(torch.from_numpy(v) for v in feeds.values())).numpy()


def export(model, spec: ZooModel, path, batch=2, seq=16) -> List[str]:
    """Exports with opset 17 and the spec's dynamic axes; returns the input names.

    Runs the exporter with autograd enabled (and parameters requiring grad): that keeps
    nn.TransformerEncoderLayer off its inference fast path (torch._transformer_encoder_layer_fwd,
    taken only when grad is off or nothing requires grad), which torch 1.13 cannot export. The
    graph is the same math (dropout is 0 and the module is in eval mode)."""
    feeds = spec.inputs(batch, seq, np.random.default_rng(7))
    names = list(feeds)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    axes = {**spec.dynamic, spec.output: spec.output_dynamic}
    with torch.enable_grad(), warnings.catch_warnings():
        # The tracer warns where a shape becomes a Python number inside torch's own attention code;
        # the tests run the exported graphs at other batch sizes and sequence lengths than traced.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(model, args, str(path), opset_version=17, input_names=names,
                          output_names=[spec.output], dynamic_axes=axes)
    return names
