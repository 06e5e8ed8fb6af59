"""Hugging Face's BartForConditionalGeneration and T5ForConditionalGeneration written out in torch
(transformers is not installed) with HF's module tree, parameter names, tied weights and eager
computation: the references of the zoo's "bart" and "t5" (tests/python/test_zoo_seq2seq.py).

Each forward takes (input_ids, attention_mask, decoder_input_ids[, labels]) and returns logits, or
(loss, logits) with labels: CrossEntropyLoss(ignore_index=-100) over the flattened positions.
"""
import math

import torch
from torch import nn

FLOAT32_MIN = torch.finfo(torch.float32).min


def extended_mask(mask):
    """HF's inverted padding mask [B, 1, 1, S]: 0 where attended, float32's lowest elsewhere."""
    return (1.0 - mask[:, None, None, :].to(torch.float32)) * FLOAT32_MIN


def causal_mask(queries, keys):
    """[queries, keys]: float32's lowest where key j comes after query i (the queries are the last
    `queries` of `keys` positions)."""
    i = torch.arange(queries)[:, None] + (keys - queries)
    j = torch.arange(keys)[None, :]
    return torch.where(j > i, torch.tensor(FLOAT32_MIN), torch.tensor(0.0))


def lm_loss(logits, labels):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def new_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT = {"gelu": nn.functional.gelu, "relu": nn.functional.relu, "gelu_new": new_gelu, "silu": nn.functional.silu}

# ------------------------------------------------------------------------------------------- BART


class BartAttention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = dropout
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def _shape(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, h, key_value_states=None, mask=None, causal=False, past=None):
        b, t, d = h.shape
        q = self._shape(self.q_proj(h) * self.scaling)
        if key_value_states is not None and past is not None:  # cross-attention over cached keys
            k, v = past
        elif key_value_states is not None:
            k, v = self._shape(self.k_proj(key_value_states)), self._shape(self.v_proj(key_value_states))
        else:
            k, v = self._shape(self.k_proj(h)), self._shape(self.v_proj(h))
            if past is not None:
                k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(-1, -2)
        if causal:
            scores = scores + causal_mask(t, k.shape[2])
        if mask is not None:
            scores = scores + mask
        probs = nn.functional.dropout(torch.softmax(scores, dim=-1), p=self.dropout, training=self.training)
        out = (probs @ v).transpose(1, 2).reshape(b, t, d)
        return self.out_proj(out), (k, v)


class BartEncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.self_attn = BartAttention(d, c["encoder_attention_heads"], c["attention_dropout"])
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.dropout, self.activation_dropout = c["dropout"], c["activation_dropout"]
        self.act = ACT[c["activation_function"]]
        self.fc1, self.fc2 = nn.Linear(d, c["encoder_ffn_dim"]), nn.Linear(c["encoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, h, mask):
        drop = lambda x, p: nn.functional.dropout(x, p=p, training=self.training)  # noqa: E731
        h = self.self_attn_layer_norm(h + drop(self.self_attn(h, mask=mask)[0], self.dropout))
        x = self.fc2(drop(self.act(self.fc1(h)), self.activation_dropout))
        return self.final_layer_norm(h + drop(x, self.dropout))


class BartDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, heads = c["d_model"], c["decoder_attention_heads"]
        self.self_attn = BartAttention(d, heads, c["attention_dropout"])
        self.dropout, self.activation_dropout = c["dropout"], c["activation_dropout"]
        self.act = ACT[c["activation_function"]]
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = BartAttention(d, heads, c["attention_dropout"])
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, c["decoder_ffn_dim"]), nn.Linear(c["decoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, h, encoder_h, encoder_mask, past=None):
        drop = lambda x, p: nn.functional.dropout(x, p=p, training=self.training)  # noqa: E731
        a, self_kv = self.self_attn(h, causal=True, past=None if past is None else past[:2])
        h = self.self_attn_layer_norm(h + drop(a, self.dropout))
        a, cross_kv = self.encoder_attn(h, encoder_h, encoder_mask, past=None if past is None else past[2:])
        h = self.encoder_attn_layer_norm(h + drop(a, self.dropout))
        x = self.fc2(drop(self.act(self.fc1(h)), self.activation_dropout))
        return self.final_layer_norm(h + drop(x, self.dropout)), self_kv + cross_kv


class BartLearnedPositionalEmbedding(nn.Embedding):
    def __init__(self, n, d):
        super().__init__(n + 2, d)

    def forward(self, ids, past=0):
        return super().forward(torch.arange(past, past + ids.shape[1]) + 2)


class BartStack(nn.Module):
    def __init__(self, c, shared, layer):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["d_model"], padding_idx=c["pad_token_id"])
        self.embed_tokens.weight = shared.weight
        self.embed_positions = BartLearnedPositionalEmbedding(c["max_position_embeddings"], c["d_model"])
        count = c["encoder_layers"] if layer is BartEncoderLayer else c["decoder_layers"]
        self.layers = nn.ModuleList([layer(c) for _ in range(count)])
        self.layernorm_embedding = nn.LayerNorm(c["d_model"])
        self.dropout = c["dropout"]
        self.scale = math.sqrt(c["d_model"]) if c["scale_embedding"] else 1.0

    def embed(self, ids, past=0):
        h = self.embed_tokens(ids) * self.scale + self.embed_positions(ids, past)
        return nn.functional.dropout(self.layernorm_embedding(h), p=self.dropout, training=self.training)


class BartModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.shared = nn.Embedding(c["vocab_size"], c["d_model"], padding_idx=c["pad_token_id"])
        self.encoder = BartStack(c, self.shared, BartEncoderLayer)
        self.decoder = BartStack(c, self.shared, BartDecoderLayer)


class BartForConditionalGeneration(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = BartModel(c)
        self.register_buffer("final_logits_bias", torch.zeros((1, c["vocab_size"])))
        self.lm_head = nn.Linear(c["d_model"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.model.shared.weight

    def encode(self, input_ids, attention_mask):
        h = self.model.encoder.embed(input_ids)
        for layer in self.model.encoder.layers:
            h = layer(h, extended_mask(attention_mask))
        return h

    def decode(self, ids, encoder_h, attention_mask, past=None):
        """Logits and each layer's (self k, self v, cross k, cross v); `past` as returned."""
        stack = self.model.decoder
        h = stack.embed(ids, 0 if past is None else past[0][0].shape[2])
        presents = []
        for i, layer in enumerate(stack.layers):
            h, kv = layer(h, encoder_h, extended_mask(attention_mask), None if past is None else past[i])
            presents.append(kv)
        return self.lm_head(h) + self.final_logits_bias, presents

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels=None):
        logits = self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)[0]
        return logits if labels is None else (lm_loss(logits, labels), logits)

# --------------------------------------------------------------------------------------------- T5


class T5LayerNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(d)), eps

    def forward(self, h):
        variance = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(variance + self.variance_epsilon))


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """HF's T5Attention._relative_position_bucket."""
    buckets = 0
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact)).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position, if_large)


class T5Attention(nn.Module):
    def __init__(self, c, is_decoder, has_relative_attention_bias):
        super().__init__()
        self.is_decoder, self.has_bias = is_decoder, has_relative_attention_bias
        self.heads, self.d_kv = c["num_heads"], c["d_kv"]
        self.buckets, self.max_distance = c["relative_attention_num_buckets"], c["relative_attention_max_distance"]
        inner = self.heads * self.d_kv
        self.q, self.k, self.v = (nn.Linear(c["d_model"], inner, bias=False) for _ in range(3))
        self.o = nn.Linear(inner, c["d_model"], bias=False)
        self.dropout = c["dropout_rate"]
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.buckets, self.heads)

    def compute_bias(self, queries, keys):
        relative = torch.arange(keys)[None, :] - torch.arange(queries)[:, None]
        buckets = relative_position_bucket(relative, not self.is_decoder, self.buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute([2, 0, 1]).unsqueeze(0)

    def _shape(self, x):
        return x.view(x.shape[0], -1, self.heads, self.d_kv).transpose(1, 2)

    def forward(self, h, mask, key_value_states=None, position_bias=None, past=None):
        b, t, _ = h.shape
        q = self._shape(self.q(h))
        if key_value_states is not None and past is not None:
            k, v = past
        elif key_value_states is not None:
            k, v = self._shape(self.k(key_value_states)), self._shape(self.v(key_value_states))
        else:
            k, v = self._shape(self.k(h)), self._shape(self.v(h))
            if past is not None:
                k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(3, 2)
        if position_bias is None:
            if self.has_bias:
                position_bias = self.compute_bias(k.shape[2], k.shape[2])[:, :, -t:, :]
            else:
                position_bias = torch.zeros((1, self.heads, t, k.shape[2]))
            position_bias = position_bias + mask
        probs = torch.softmax(scores + position_bias, dim=-1)
        probs = nn.functional.dropout(probs, p=self.dropout, training=self.training)
        out = (probs @ v).transpose(1, 2).reshape(b, t, -1)
        return self.o(out), (k, v), position_bias


class T5DenseActDense(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.wo = nn.Linear(c["d_ff"], c["d_model"], bias=False)
        self.dropout, self.act = nn.Dropout(c["dropout_rate"]), ACT[c["feed_forward_proj"]]

    def forward(self, h):
        return self.wo(self.dropout(self.act(self.wi(h))))


class T5DenseGatedActDense(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi_0 = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.wi_1 = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.wo = nn.Linear(c["d_ff"], c["d_model"], bias=False)
        act = c["feed_forward_proj"].split("-", 1)[1]
        self.dropout, self.act = nn.Dropout(c["dropout_rate"]), ACT["gelu_new" if act == "gelu" else act]

    def forward(self, h):
        return self.wo(self.dropout(self.act(self.wi_0(h)) * self.wi_1(h)))


class T5LayerFF(nn.Module):
    def __init__(self, c):
        super().__init__()
        gated = c["feed_forward_proj"].startswith("gated-")
        self.DenseReluDense = T5DenseGatedActDense(c) if gated else T5DenseActDense(c)
        self.layer_norm = T5LayerNorm(c["d_model"], c["layer_norm_epsilon"])
        self.dropout = nn.Dropout(c["dropout_rate"])

    def forward(self, h):
        return h + self.dropout(self.DenseReluDense(self.layer_norm(h)))


class T5LayerSelfAttention(nn.Module):
    def __init__(self, c, is_decoder, has_bias):
        super().__init__()
        self.SelfAttention = T5Attention(c, is_decoder, has_bias)
        self.layer_norm = T5LayerNorm(c["d_model"], c["layer_norm_epsilon"])
        self.dropout = nn.Dropout(c["dropout_rate"])

    def forward(self, h, mask, position_bias, past=None):
        a, kv, bias = self.SelfAttention(self.layer_norm(h), mask, position_bias=position_bias, past=past)
        return h + self.dropout(a), kv, bias


class T5LayerCrossAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.EncDecAttention = T5Attention(c, True, False)
        self.layer_norm = T5LayerNorm(c["d_model"], c["layer_norm_epsilon"])
        self.dropout = nn.Dropout(c["dropout_rate"])

    def forward(self, h, encoder_h, mask, position_bias, past=None):
        a, kv, bias = self.EncDecAttention(self.layer_norm(h), mask, encoder_h, position_bias, past)
        return h + self.dropout(a), kv, bias


class T5Block(nn.Module):
    def __init__(self, c, is_decoder, has_bias):
        super().__init__()
        self.layer = nn.ModuleList([T5LayerSelfAttention(c, is_decoder, has_bias)] +
                                   ([T5LayerCrossAttention(c)] if is_decoder else []) + [T5LayerFF(c)])


class T5Stack(nn.Module):
    def __init__(self, c, shared, is_decoder):
        super().__init__()
        self.embed_tokens, self.is_decoder = shared, is_decoder
        count = c["num_decoder_layers"] or c["num_layers"] if is_decoder else c["num_layers"]
        self.block = nn.ModuleList([T5Block(c, is_decoder, i == 0) for i in range(count)])
        self.final_layer_norm = T5LayerNorm(c["d_model"], c["layer_norm_epsilon"])
        self.dropout = nn.Dropout(c["dropout_rate"])

    def forward(self, ids, mask, encoder_h=None, encoder_mask=None, past=None):
        h = self.dropout(self.embed_tokens(ids))
        bias = cross_bias = None
        presents = []
        for i, block in enumerate(self.block):
            p = None if past is None else past[i]
            h, kv, bias = block.layer[0](h, mask, bias, None if p is None else p[:2])
            if self.is_decoder:
                h, cross_kv, cross_bias = block.layer[1](h, encoder_h, encoder_mask, cross_bias,
                                                         None if p is None else p[2:])
                kv = kv + cross_kv
            h = block.layer[-1](h)
            presents.append(kv)
        return self.dropout(self.final_layer_norm(h)), presents


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.shared = nn.Embedding(c["vocab_size"], c["d_model"])
        self.encoder = T5Stack(c, self.shared, False)
        self.decoder = T5Stack(c, self.shared, True)
        self.lm_head = nn.Linear(c["d_model"], c["vocab_size"], bias=False)
        if c["tie_word_embeddings"]:
            self.lm_head.weight = self.shared.weight

    def encode(self, input_ids, attention_mask):
        return self.encoder(input_ids, extended_mask(attention_mask))[0]

    def decode(self, ids, encoder_h, attention_mask, past=None):
        total = ids.shape[1] + (0 if past is None else past[0][0].shape[2])
        h, presents = self.decoder(ids, causal_mask(ids.shape[1], total), encoder_h, extended_mask(attention_mask),
                                   past)
        if self.c["tie_word_embeddings"]:
            h = h * self.c["d_model"] ** -0.5
        return self.lm_head(h), presents

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels=None):
        logits = self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)[0]
        return logits if labels is None else (lm_loss(logits, labels), logits)
