"""A GPT-2 in torch with Hugging Face's layer_past, attention_mask and position_ids
(modeling_gpt2.py's eager attention, tanh GELU, tied head), whose weights to_zoo() names for the
zoo's gpt2: the reference of tests/python/test_generation.py and the PyTorch side of
bench/generation.py. forward(input_ids, attention_mask, position_ids, *past) -> (logits, *present),
past and present [B, H, L, d] per layer, key then value."""
import math

import numpy as np
import torch
import torch.nn as nn

FLOAT32_MIN = torch.finfo(torch.float32).min


class Attention(nn.Module):
    def __init__(self, e, heads):
        super().__init__()
        self.e, self.heads = e, heads
        self.c_attn_w, self.c_attn_b = nn.Parameter(torch.randn(e, 3 * e) * 0.3), nn.Parameter(torch.randn(3 * e) * 0.1)
        self.c_proj_w, self.c_proj_b = nn.Parameter(torch.randn(e, e) * 0.3), nn.Parameter(torch.randn(e) * 0.1)

    def forward(self, h, mask, past_k, past_v):
        b, s, e = h.shape
        split = lambda x: x.view(b, s, self.heads, e // self.heads).permute(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(x) for x in (h @ self.c_attn_w + self.c_attn_b).split(self.e, dim=2))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        w = q @ k.transpose(-1, -2) / torch.full([], v.size(-1) ** 0.5)
        length = k.shape[2]
        causal = torch.tril(torch.ones(length, length, dtype=torch.bool))[length - s:length, :length]
        w = torch.where(causal, w, torch.full([], FLOAT32_MIN)) + mask
        out = (torch.softmax(w, dim=-1) @ v).permute(0, 2, 1, 3).reshape(b, s, e)
        return out @ self.c_proj_w + self.c_proj_b, k, v


class Block(nn.Module):
    def __init__(self, e, heads):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(e), Attention(e, heads), nn.LayerNorm(e)
        self.fc, self.proj = nn.Linear(e, 4 * e), nn.Linear(4 * e, e)

    def forward(self, x, mask, past_k, past_v):
        a, k, v = self.attn(self.ln_1(x), mask, past_k, past_v)
        h = a + x
        inner = self.fc(self.ln_2(h))
        gelu = 0.5 * inner * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (inner + 0.044715 * inner ** 3)))
        return h + self.proj(gelu), k, v


class TorchGPT2(nn.Module):
    """HF's GPT2LMHeadModel with layer_past, in torch; weights named for the zoo's keys by to_zoo."""

    def __init__(self, c):
        super().__init__()
        torch.manual_seed(0)
        self.c = c
        self.wte = nn.Parameter(torch.randn(c["vocab_size"], c["n_embd"]))
        self.wpe = nn.Parameter(torch.randn(c["n_positions"], c["n_embd"]) * 0.5)
        self.h = nn.ModuleList([Block(c["n_embd"], c["n_head"]) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"])

    def forward(self, input_ids, attention_mask, position_ids, *past):
        x = self.wte[input_ids] + self.wpe[position_ids]
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * FLOAT32_MIN
        presents = []
        for i, block in enumerate(self.h):
            x, k, v = block(x, mask, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return (self.ln_f(x) @ self.wte.T, *presents)

    def empty_past(self, batch):
        d = self.c["n_embd"] // self.c["n_head"]
        return [torch.zeros(batch, self.c["n_head"], 0, d) for _ in range(2 * self.c["n_layer"])]

    def to_zoo(self):
        sd = {"transformer.wte.weight": self.wte, "transformer.wpe.weight": self.wpe, "lm_head.weight": self.wte,
              "transformer.ln_f.weight": self.ln_f.weight, "transformer.ln_f.bias": self.ln_f.bias}
        for i, b in enumerate(self.h):
            p = f"transformer.h.{i}."
            sd.update({p + "ln_1.weight": b.ln_1.weight, p + "ln_1.bias": b.ln_1.bias,
                       p + "ln_2.weight": b.ln_2.weight, p + "ln_2.bias": b.ln_2.bias,
                       p + "attn.c_attn.weight": b.attn.c_attn_w, p + "attn.c_attn.bias": b.attn.c_attn_b,
                       p + "attn.c_proj.weight": b.attn.c_proj_w, p + "attn.c_proj.bias": b.attn.c_proj_b,
                       p + "mlp.c_fc.weight": b.fc.weight.T, p + "mlp.c_fc.bias": b.fc.bias,
                       p + "mlp.c_proj.weight": b.proj.weight.T, p + "mlp.c_proj.bias": b.proj.bias})
        return {k: np.ascontiguousarray(v.detach().numpy()) for k, v in sd.items()}
