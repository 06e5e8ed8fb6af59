"""Generation (kiln/generation.h) against Hugging Face's algorithms written out in PyTorch below
(transformers' _sample / greedy search, _beam_search with BeamSearchScorer and BeamHypotheses,
4.36's length accounting, and the logits processors), over a GPT-2 in torch with HF's layer_past,
attention_mask and position_ids (modeling_gpt2.py's eager attention):

- the zoo's gpt2 with the torch model's weights, exported with and without past (Kiln's KV cache,
  and full recomputation), and the torch model itself exported by torch.onnx with
  past_key_values.N.key / present.N.key (optimum's layout) all give the reference's sequences and
  beam scores (1e-5) for left-padded batches of prompts;
- sampling: seeded (the same seed, the same tokens), each token within top_k / the top_p nucleus of
  the reference's distribution, top_k=1 is greedy.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from gpt2_with_past import TorchGPT2
from kiln_package import import_kiln

import_kiln()
import kiln  # noqa: E402
from kiln.generation import CausalLM, GenerationConfig, generate  # noqa: E402
from kiln.nn import zoo  # noqa: E402

CONFIG = {"vocab_size": 61, "n_positions": 128, "n_embd": 32, "n_layer": 2, "n_head": 4, "resid_pdrop": 0.0,
          "embd_pdrop": 0.0, "attn_pdrop": 0.0}
PROMPTS = [[3, 14, 15, 9, 26], [5, 35], [8, 9, 7, 9]]


# ------------------------------------------------------------------ HF's algorithms, in torch
def left_pad(prompts, pad, copies):
    width = max(map(len, prompts))
    ids = [[pad] * (width - len(p)) + p for p in prompts for _ in range(copies)]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts for _ in range(copies)]
    return torch.tensor(ids), torch.tensor(mask)


def last_logits(model, ids, mask):
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        return model(ids, mask, positions, *model.empty_past(ids.shape[0]))[0][:, -1, :].double()


def processors(scores, ids, cfg, prompt):
    scores = scores.clone()
    cur_len = ids.shape[1]
    if cfg.get("repetition_penalty", 1.0) != 1.0:
        p = cfg["repetition_penalty"]
        score = torch.gather(scores, 1, ids)
        scores.scatter_(1, ids, torch.where(score < 0, score * p, score / p))
    n = cfg.get("no_repeat_ngram_size", 0)
    if n and cur_len + 1 >= n:
        for r, row in enumerate(ids.tolist()):
            for i in range(len(row) - n + 1):
                if row[i:i + n - 1] == row[cur_len - n + 1:]:
                    scores[r, row[i + n - 1]] = -math.inf
    if cur_len - prompt < cfg.get("min_new_tokens", 0):
        for e in cfg.get("eos_token_id", []):
            scores[:, e] = -math.inf
    return scores


def reference_greedy(model, prompts, cfg, start=None):
    """HF's greedy search; `start`: (last-logits function, first decoder ids, their mask) for an
    encoder-decoder model."""
    pad = cfg.get("pad_token_id", 0)
    last = (lambda ids, mask: last_logits(model, ids, mask)) if start is None else start[0]
    ids, mask = left_pad(prompts, pad, 1) if start is None else start[1:]
    prompt, eos = ids.shape[1], cfg.get("eos_token_id", [])
    unfinished = torch.ones(ids.shape[0], dtype=torch.bool)
    while ids.shape[1] < prompt + cfg["max_new_tokens"]:
        scores = processors(last(ids, mask), ids, cfg, prompt)
        nxt = scores.argmax(-1)
        if eos:
            nxt = torch.where(unfinished, nxt, torch.full_like(nxt, pad))
        ids, mask = torch.cat([ids, nxt[:, None]], 1), torch.cat([mask, torch.ones_like(nxt)[:, None]], 1)
        unfinished &= ~torch.isin(nxt, torch.tensor(eos, dtype=torch.long))
        if not unfinished.any():
            break
    return ids.tolist()


class Hyps:
    def __init__(self, n, lp, early, max_length):
        self.n, self.lp, self.early, self.max_length, self.beams, self.worst = n, lp, early, max_length, [], 1e9

    def add(self, hyp, logprobs, generated_len):
        score = logprobs / generated_len ** self.lp
        if len(self.beams) < self.n or score > self.worst:
            self.beams.append((score, hyp))
            if len(self.beams) > self.n:
                ranked = sorted([(s, i) for i, (s, _) in enumerate(self.beams)])
                del self.beams[ranked[0][1]]
                self.worst = ranked[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best, cur_len, prompt):
        if len(self.beams) < self.n:
            return False
        if self.early is True:
            return True
        length = self.max_length - prompt if self.early == "never" and self.lp > 0 else cur_len - prompt
        return self.worst >= best / length ** self.lp


def reference_beam_search(model, prompts, cfg, start=None):
    nb, pad, eos = cfg["num_beams"], cfg.get("pad_token_id", 0), cfg.get("eos_token_id", [])
    last = (lambda ids, mask: last_logits(model, ids, mask)) if start is None else start[0]
    ids, mask = left_pad(prompts, pad, nb) if start is None else start[1:]
    batch, prompt = len(prompts), ids.shape[1]
    max_length = prompt + cfg["max_new_tokens"]
    hyps = [Hyps(nb, cfg.get("length_penalty", 1.0), cfg.get("early_stopping", False), max_length)
            for _ in range(batch)]
    done = [False] * batch
    beam_scores = torch.zeros(batch, nb, dtype=torch.float64)
    beam_scores[:, 1:] = -1e9
    beam_scores = beam_scores.view(-1)
    while True:
        cur_len = ids.shape[1] + 1
        scores = processors(torch.log_softmax(last(ids, mask), -1), ids, cfg, prompt)
        scores = (scores + beam_scores[:, None]).view(batch, -1)
        vocab = scores.shape[1] // nb
        top, tokens = torch.topk(scores, max(2, 1 + len(eos)) * nb, dim=1)
        nxt_scores = torch.zeros(batch, nb, dtype=torch.float64)
        nxt_tokens = torch.full((batch, nb), pad)
        nxt_idx = torch.zeros(batch, nb, dtype=torch.long)
        for i in range(batch):
            if done[i]:
                continue
            k = 0
            for rank, (t, s) in enumerate(zip(tokens[i].tolist(), top[i].tolist())):
                src, tok = i * nb + t // vocab, t % vocab
                if tok in eos:
                    if rank >= nb:
                        continue
                    hyps[i].add(ids[src].tolist(), s, cur_len - prompt)
                else:
                    nxt_scores[i, k], nxt_tokens[i, k], nxt_idx[i, k] = s, tok, src
                    k += 1
                if k == nb:
                    break
            done[i] = done[i] or hyps[i].is_done(top[i].max().item(), cur_len, prompt)
        beam_scores, idx = nxt_scores.view(-1), nxt_idx.view(-1)
        ids = torch.cat([ids[idx], nxt_tokens.view(-1, 1)], 1)
        mask = torch.cat([mask[idx], torch.ones(batch * nb, 1, dtype=torch.long)], 1)
        if all(done) or ids.shape[1] >= max_length:
            break
    for i in range(batch):
        if not done[i]:
            for k in range(nb):
                hyps[i].add(ids[i * nb + k].tolist(), beam_scores[i * nb + k].item(), ids.shape[1] - prompt)
    seqs, best = [], []
    for h in hyps:
        ranked = sorted(h.beams, key=lambda x: x[0])
        for _ in range(cfg.get("num_return_sequences", 1)):
            s, hyp = ranked.pop()
            seqs.append(hyp)
            best.append(s)
    width = min(max(map(len, seqs)) + 1, max_length)
    out = [s + ([eos[0] if eos else pad] + [pad] * (width - len(s) - 1) if len(s) < width else []) for s in seqs]
    return out, best


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gen")
    torch_model = TorchGPT2(CONFIG).eval()
    weights = torch_model.to_zoo()
    net = zoo.create_model("gpt2", **CONFIG)
    net.load_state_dict(weights)
    net.eval()
    # torch's own export of the decoder with past (optimum's names), dynamic batch and lengths.
    names = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{k}" for i in range(CONFIG["n_layer"]) for k in ("key", "value")]
    outputs = ["logits"] + [f"present.{i}.{k}" for i in range(CONFIG["n_layer"]) for k in ("key", "value")]
    ids = torch.tensor([[1, 2]])
    past = [torch.zeros(1, CONFIG["n_head"], 3, CONFIG["n_embd"] // CONFIG["n_head"])] * (2 * CONFIG["n_layer"])
    axes = {"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "t"}, "position_ids": {0: "b", 1: "s"},
            "logits": {0: "b", 1: "s"}}
    axes.update({n: {0: "b", 2: "p"} for n in names[3:]})
    axes.update({n: {0: "b", 2: "t"} for n in outputs[1:]})
    path = folder / "torch_with_past.onnx"
    torch.onnx.export(torch_model, (ids, torch.ones(1, 5, dtype=torch.long), torch.tensor([[3, 4]]), *past), path,
                      input_names=names, output_names=outputs, dynamic_axes=axes, opset_version=17)
    return {"torch": torch_model, "zoo": net, "torch_onnx": CausalLM(str(path), 2)}


def all_lms(models):
    return {"zoo with past": models["zoo"], "torch export with past": models["torch_onnx"]}


GREEDY_CASES = [
    dict(max_new_tokens=12),
    dict(max_new_tokens=10, repetition_penalty=1.4, no_repeat_ngram_size=2, min_new_tokens=4),
]


@pytest.mark.parametrize("cfg", GREEDY_CASES)
def test_greedy_matches_hugging_faces_algorithm(models, cfg):
    cfg = dict(cfg, pad_token_id=0)
    plain = reference_greedy(models["torch"], PROMPTS, cfg)
    # An eos the reference reaches early in one row: the rows then end, padded.
    eos = plain[0][len(PROMPTS[0]) + 2]
    cfg["eos_token_id"] = [eos]
    want = reference_greedy(models["torch"], PROMPTS, cfg)
    for name, lm in all_lms(models).items():
        for use_cache in (True, False):
            got = generate(lm, PROMPTS, use_cache=use_cache, **cfg)
            assert got.tolist() == want, (name, use_cache)


@pytest.mark.parametrize("early_stopping", [False, True, "never"])
def test_beam_search_matches_hugging_faces_algorithm(models, early_stopping):
    cfg = dict(max_new_tokens=9, num_beams=4, num_return_sequences=2, length_penalty=0.8,
               early_stopping=early_stopping, pad_token_id=0, no_repeat_ngram_size=3)
    probe, _ = reference_beam_search(models["torch"], PROMPTS, cfg)
    cfg["eos_token_id"] = [probe[2][len(PROMPTS[0]) + 1]]  # an eos some beams reach
    want, want_scores = reference_beam_search(models["torch"], PROMPTS, cfg)
    for name, lm in all_lms(models).items():
        for use_cache in (True, False):
            out = generate(lm, PROMPTS, use_cache=use_cache, return_dict_in_generate=True, **cfg)
            assert out.sequences.tolist() == want, (name, use_cache)
            np.testing.assert_allclose(out.sequences_scores, want_scores, rtol=1e-5, atol=1e-6)


def test_cache_runs_one_token_per_call_and_plans_per_block(models):
    net = models["zoo"]
    lm = kiln.generation._causal_lm(net, 2)
    assert lm.has_cache_inputs
    out = kiln._kiln.generate(lm._lm, PROMPTS, {"max_new_tokens": 70})
    assert out["model_calls"] == 70  # the prompt's run, then one call per new token but the last
    assert len(out["sequences"][0]) == 5 + 70


def test_sampling_is_seeded_and_stays_in_the_allowed_tokens(models):
    cfg = dict(do_sample=True, max_new_tokens=15, top_k=5, temperature=0.7, seed=3, num_return_sequences=2)
    a = generate(models["zoo"], PROMPTS, **cfg)
    assert a.tolist() == generate(models["zoo"], PROMPTS, **cfg).tolist()
    assert a.tolist() != generate(models["zoo"], PROMPTS, **dict(cfg, seed=4)).tolist()
    assert a.shape[0] == 2 * len(PROMPTS)
    width = max(map(len, PROMPTS))
    for row, prompt in zip(a.tolist(), [p for p in PROMPTS for _ in range(2)]):
        pad = width - len(prompt)
        for t in range(width, len(row)):
            logits = last_logits(models["torch"], torch.tensor([row[pad:t]]), torch.ones(1, t - pad, dtype=torch.long))
            assert row[t] in torch.topk(logits[0], 5).indices.tolist()
    # top_p: each token inside the nucleus of its step.
    b = generate(models["zoo"], PROMPTS, do_sample=True, max_new_tokens=10, top_k=0, top_p=0.6, seed=1)
    for row, prompt in zip(b.tolist(), PROMPTS):
        pad = width - len(prompt)
        for t in range(width, len(row)):
            probs = torch.softmax(last_logits(models["torch"], torch.tensor([row[pad:t]]),
                                              torch.ones(1, t - pad, dtype=torch.long))[0], -1)
            ranked = torch.sort(probs, descending=True)
            nucleus = ranked.indices[:int((ranked.values.cumsum(0) < 0.6).sum()) + 1].tolist()
            assert row[t] in nucleus
    greedy = generate(models["zoo"], PROMPTS, max_new_tokens=8)
    top1 = generate(models["zoo"], PROMPTS, max_new_tokens=8, do_sample=True, top_k=1, seed=9)
    assert top1.tolist() == greedy.tolist()


def test_hugging_face_inputs_and_config_files(models, tmp_path):
    ids = torch.tensor([[0, 0, 3, 14], [5, 35, 8, 9]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    out = generate(models["zoo"], ids, attention_mask=mask, max_new_tokens=4)
    assert isinstance(out, torch.Tensor)
    assert out.tolist() == generate(models["zoo"], [[3, 14], [5, 35, 8, 9]], max_new_tokens=4).tolist()
    config = GenerationConfig(max_new_tokens=6, num_beams=2, eos_token_id=7, pad_token_id=0)
    config.save_pretrained(tmp_path)
    loaded = GenerationConfig.from_pretrained(tmp_path)
    assert loaded.num_beams == 2 and loaded.eos_token_id == 7
    assert generate(models["zoo"], PROMPTS, generation_config=loaded).tolist() == generate(
        models["zoo"], PROMPTS, max_new_tokens=6, num_beams=2, eos_token_id=7, pad_token_id=0).tolist()
    assert models["zoo"].generate(PROMPTS, max_new_tokens=3).shape == (3, 8)


def test_clear_errors(models, tmp_path):
    with pytest.raises(kiln.InvalidArgument, match="num_return_sequences"):
        generate(models["zoo"], PROMPTS, num_beams=2, num_return_sequences=3)
    with pytest.raises(kiln.InvalidArgument, match="top_p"):
        generate(models["zoo"], PROMPTS, do_sample=True, top_p=0.0)
    with pytest.raises(kiln.InvalidArgument, match="index 999"):  # the embedding names the bad id
        generate(models["zoo"], [[1, 999]], max_new_tokens=2)
    with pytest.raises(kiln.InvalidArgument, match="nothing to generate"):
        generate(models["zoo"], [list(range(25))])  # HF's default max_length 20
    with pytest.raises(kiln.Unsupported, match="beam sampling"):
        generate(models["zoo"], PROMPTS, num_beams=2, do_sample=True)
    with pytest.raises(TypeError, match="unknown arguments"):
        generate(models["zoo"], PROMPTS, max_new_token=3)
    classifier = zoo.create_model("bert", vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=16)
    path = tmp_path / "bert.onnx"
    classifier.export(path, zoo.example_inputs("bert", vocab_size=50, hidden_size=32, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=64,
                                               max_position_embeddings=16), input_dtypes=["int64"] * 3)
    with pytest.raises(kiln.InvalidArgument, match="token_type_ids"):
        CausalLM(str(path))


def test_cli_generates_what_the_api_does(models, kiln, tmp_path):
    import json
    import subprocess
    config = dict(CONFIG, with_past=True)
    past = zoo.create_model("gpt2", **config)
    past.load_state_dict(models["torch"].to_zoo())
    past.eval()
    outputs = ["logits"] + [f"present.{i}.{k}" for i in range(CONFIG["n_layer"]) for k in ("key", "value")]
    path = tmp_path / "gpt2_with_past.onnx"
    past.export(path, zoo.example_inputs("gpt2", **config), zoo.dynamic_axes("gpt2", **config),
                input_dtypes=["int64"] * 3 + ["float32"] * (2 * CONFIG["n_layer"]), output_names=outputs)
    want = generate(models["zoo"], PROMPTS, max_new_tokens=6, num_beams=3, num_return_sequences=2)
    width = max(map(len, PROMPTS))
    (tmp_path / "generation_config.json").write_text(json.dumps({"num_beams": 3, "max_new_tokens": 2}))
    args = [str(kiln), "generate", str(path), "--generation-config", str(tmp_path / "generation_config.json"),
            "--max-new-tokens", "6", "--num-return-sequences", "2"]
    for p in PROMPTS:
        args += ["--input-ids", ",".join(map(str, p))]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()
    assert [list(map(int, line.split(","))) for line in out] == [row[width:] for row in want.tolist()]
    bad = subprocess.run([str(kiln), "generate", str(path), "--input-ids", "1,2", "--top-p", "2", "--do-sample"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "top_p" in bad.stderr


# ------------------------------------------------------------------------ encoder-decoder models
class TorchSeq2Seq(nn.Module):
    """A BART-like encoder-decoder (shared embedding and tied head with a logits bias, learned
    positions, a post-LayerNorm encoder layer, a decoder layer with causal self-attention and
    cross-attention)."""

    def __init__(self, vocab=53, d=32, heads=4):
        super().__init__()
        torch.manual_seed(1)
        self.heads, self.scale = heads, 1.0 / math.sqrt(d // heads)
        self.embed = nn.Parameter(torch.randn(vocab, d))
        self.bias = nn.Parameter(torch.randn(vocab) * 0.1)
        self.enc_pos, self.dec_pos = nn.Parameter(torch.randn(64, d) * 0.3), nn.Parameter(torch.randn(64, d) * 0.3)
        self.w = nn.ParameterList([nn.Parameter(torch.randn(d, d) * 0.3) for _ in range(12)])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(5)])
        self.fc = nn.ModuleList([nn.Linear(d, 2 * d), nn.Linear(2 * d, d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)])

    def heads_of(self, z):
        return z.view(z.shape[0], z.shape[1], self.heads, -1).transpose(1, 2)

    def attend(self, x, k, v, additive, w):
        b, t, d = x.shape
        scores = self.heads_of(x @ self.w[w]) @ k.transpose(-1, -2) * self.scale + additive
        return (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, d) @ self.w[w + 3]

    def encode(self, input_ids, attention_mask):
        x = self.embed[input_ids] + self.enc_pos[:input_ids.shape[1]]
        additive = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        x = self.norms[0](x + self.attend(x, self.heads_of(x @ self.w[1]), self.heads_of(x @ self.w[2]), additive, 0))
        return self.norms[1](x + self.fc[1](torch.relu(self.fc[0](x))))

    def finish(self, y, ek, ev, attention_mask):
        cross = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        y = self.norms[3](y + self.attend(y, ek, ev, cross, 8))
        y = self.norms[4](y + self.fc[3](torch.relu(self.fc[2](y))))
        return y @ self.embed.T + self.bias

    def decode_full(self, decoder_ids, hidden, attention_mask):
        """logits and the caches: self-attention keys and values, cross-attention keys and values."""
        t = decoder_ids.shape[1]
        y = self.embed[decoder_ids] + self.dec_pos[:t]
        k, v = self.heads_of(y @ self.w[5]), self.heads_of(y @ self.w[6])
        causal = torch.triu(torch.full((t, t), torch.finfo(torch.float32).min), diagonal=1)
        y = self.norms[2](y + self.attend(y, k, v, causal, 4))
        ek, ev = self.heads_of(hidden @ self.w[9]), self.heads_of(hidden @ self.w[10])
        return self.finish(y, ek, ev, attention_mask), k, v, ek, ev

    def decode_step(self, input_ids, attention_mask, past_k, past_v, ek, ev):
        """One new token over the cached keys and values (optimum's decoder with past)."""
        p = past_k.shape[2]
        y = self.embed[input_ids] + self.dec_pos[p:p + 1]
        k = torch.cat([past_k, self.heads_of(y @ self.w[5])], 2)
        v = torch.cat([past_v, self.heads_of(y @ self.w[6])], 2)
        y = self.norms[2](y + self.attend(y, k, v, 0.0, 4))
        return self.finish(y, ek, ev, attention_mask), k, v

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.decode_full(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)[0]


class _Encoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m.encode(input_ids, attention_mask)


class _Decoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask):
        return self.m.decode_full(input_ids, encoder_hidden_states, encoder_attention_mask)


class _DecoderWithPast(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, encoder_attention_mask, past_k, past_v, enc_k, enc_v):
        return self.m.decode_step(input_ids, encoder_attention_mask, past_k, past_v, enc_k, enc_v)


SOURCES = [[4, 9, 17, 2], [11, 2], [30, 31, 32, 33, 2]]


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    folder = tmp_path_factory.mktemp("s2s")
    m = TorchSeq2Seq().eval()
    ids, mask, dec = torch.tensor([[4, 9, 2]]), torch.ones(1, 3, dtype=torch.long), torch.tensor([[0, 7]])
    axes = {"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}, "decoder_input_ids": {0: "b", 1: "t"},
            "logits": {0: "b", 1: "t"}}
    torch.onnx.export(m, (ids, mask, dec), folder / "whole.onnx", input_names=["input_ids", "attention_mask",
                      "decoder_input_ids"], output_names=["logits"], dynamic_axes=axes, opset_version=17)
    torch.onnx.export(_Encoder(m), (ids, mask), folder / "encoder_model.onnx",
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                      dynamic_axes={"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"},
                                    "last_hidden_state": {0: "b", 1: "s"}}, opset_version=17)
    hidden = m.encode(ids, mask).detach()
    present = ["present.0.decoder.key", "present.0.decoder.value", "present.0.encoder.key", "present.0.encoder.value"]
    cache_axes = {n: {0: "b", 2: "t" if ".decoder." in n else "s"} for n in present}
    torch.onnx.export(_Decoder(m), (dec, hidden, mask), folder / "decoder_model.onnx",
                      input_names=["input_ids", "encoder_hidden_states", "encoder_attention_mask"],
                      output_names=["logits"] + present,
                      dynamic_axes={"input_ids": {0: "b", 1: "t"}, "encoder_hidden_states": {0: "b", 1: "s"},
                                    "encoder_attention_mask": {0: "b", 1: "s"}, "logits": {0: "b", 1: "t"},
                                    **cache_axes}, opset_version=17)
    _, k, v, ek, ev = m.decode_full(dec, hidden, mask)
    past = [n.replace("present", "past_key_values") for n in present]
    past_axes = {n: {0: "b", 2: "p" if ".decoder." in n else "s"} for n in past}
    torch.onnx.export(_DecoderWithPast(m), (dec[:, -1:], mask, k.detach(), v.detach(), ek.detach(), ev.detach()),
                      folder / "decoder_with_past_model.onnx",
                      input_names=["input_ids", "encoder_attention_mask"] + past, output_names=["logits"] + present[:2],
                      dynamic_axes={"input_ids": {0: "b"}, "encoder_attention_mask": {0: "b", 1: "s"},
                                    "logits": {0: "b"}, **past_axes, **{n: {0: "b", 2: "t"} for n in present[:2]}},
                      opset_version=17)
    files = [str(folder / f) for f in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")]
    lms = {"optimum's encoder + decoder": kiln.generation.Seq2SeqLM(files[0], files[1], num_threads=2),
           "optimum's three files (KV cache)": kiln.generation.Seq2SeqLM(*files, num_threads=2),
           "whole model": kiln.generation.Seq2SeqLM(str(folder / "whole.onnx"), num_threads=2)}
    return m, lms, folder


def seq2seq_start(m, copies, start_id):
    """The reference's (last-logits function, decoder ids, mask) for SOURCES, right-padded."""
    width = max(map(len, SOURCES))
    src = torch.tensor([s + [0] * (width - len(s)) for s in SOURCES])
    src_mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in SOURCES])

    def last(ids, mask):
        rows = torch.arange(ids.shape[0]) // copies
        with torch.no_grad():
            return m(src[rows], src_mask[rows], ids)[:, -1, :].double()

    n = len(SOURCES) * copies
    return last, torch.full((n, 1), start_id), torch.ones(n, 1, dtype=torch.long)


def test_encoder_decoder_greedy_and_beams_match_hugging_faces_algorithm(seq2seq):
    m, lms, _ = seq2seq
    greedy = dict(max_new_tokens=8, pad_token_id=0, decoder_start_token_id=2, repetition_penalty=1.2)
    probe = reference_greedy(None, SOURCES, greedy, seq2seq_start(m, 1, 2))
    greedy["eos_token_id"] = [probe[0][3]]
    want = reference_greedy(None, SOURCES, greedy, seq2seq_start(m, 1, 2))
    beams = dict(max_new_tokens=7, num_beams=3, num_return_sequences=2, pad_token_id=0, decoder_start_token_id=2,
                 length_penalty=1.1)
    probe, _ = reference_beam_search(None, SOURCES, beams, seq2seq_start(m, 3, 2))
    beams["eos_token_id"] = [probe[1][2]]
    want_beams, want_scores = reference_beam_search(None, SOURCES, beams, seq2seq_start(m, 3, 2))
    for name, lm in lms.items():
        assert generate(lm, SOURCES, **greedy).tolist() == want, name
        out = generate(lm, SOURCES, return_dict_in_generate=True, **beams)
        assert out.sequences.tolist() == want_beams, name
        np.testing.assert_allclose(out.sequences_scores, want_scores, rtol=1e-5, atol=1e-6)
    with pytest.raises(kiln.InvalidArgument, match="decoder_start_token_id"):
        generate(lms["whole model"], SOURCES, max_new_tokens=3)


def test_cli_generates_with_an_encoder_decoder(seq2seq, kiln):
    import subprocess
    _, lms, folder = seq2seq
    want = generate(lms["whole model"], SOURCES, max_new_tokens=6, decoder_start_token_id=2, num_beams=2)
    args = [str(kiln), "generate", str(folder / "decoder_model.onnx"), "--encoder", str(folder / "encoder_model.onnx"),
            "--decoder-with-past", str(folder / "decoder_with_past_model.onnx"), "--decoder-start-token-id", "2",
            "--max-new-tokens", "6", "--num-beams", "2"]
    for source in SOURCES:
        args += ["--input-ids", ",".join(map(str, source))]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()
    assert [list(map(int, line.split(","))) for line in out] == [row[1:] for row in want.tolist()]
    # Refusals, by flag: a cache file without the encoder, unreadable files.
    bad = {"--decoder-with-past needs --encoder": [str(kiln), "generate", str(folder / "decoder_model.onnx"),
                                                   "--decoder-with-past", str(folder / "decoder_with_past_model.onnx"),
                                                   "--input-ids", "4,5"],
           "--input-file '.*missing.txt' cannot be read": [str(kiln), "generate", str(folder / "whole.onnx"),
                                                            "--seq2seq", "--input-file", str(folder / "missing.txt")],
           "--generation-config '.*missing.json' cannot be read": [str(kiln), "generate", str(folder / "whole.onnx"),
                                                                    "--seq2seq", "--input-ids", "4,5",
                                                                    "--generation-config",
                                                                    str(folder / "missing.json")]}
    import re
    for message, command in bad.items():
        proc = subprocess.run(command, capture_output=True, text=True)
        assert proc.returncode != 0 and re.search(message, proc.stderr), (message, proc.stderr)


def test_models_with_inputs_generation_cannot_feed_are_refused(seq2seq):
    from onnx import TensorProto, helper
    _, lms, folder = seq2seq
    # A past input without its present output, and past inputs without position_ids.
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", 4])
    key, value = (helper.make_tensor_value_info(f"past_key_values.0.{k}", TensorProto.FLOAT, ["b", 2, "p", 3])
                  for k in ("key", "value"))
    node = helper.make_node("Identity", ["input_ids"], ["logits"])
    model = helper.make_model(helper.make_graph([node], "g", [ids, key], [logits]))
    with pytest.raises(kiln.InvalidArgument, match="every layer needs both past_key_values.N.key and .value"):
        CausalLM(model.SerializeToString())
    model = helper.make_model(helper.make_graph([node], "g", [ids, key, value], [logits]))
    with pytest.raises(kiln.InvalidArgument, match="'past_key_values.0.key' and 'present.0.key'"):
        CausalLM(model.SerializeToString())
    # An encoder-decoder whose parts are swapped: the encoder's inputs are not a decoder's.
    swapped = "decoder input 'attention_mask'|needs input_ids and encoder_hidden_states"
    with pytest.raises(kiln.InvalidArgument, match=swapped):
        kiln.generation.Seq2SeqLM(str(folder / "decoder_model.onnx"), str(folder / "encoder_model.onnx"))
    # The decoder with past must match the decoder's present outputs.
    with pytest.raises(kiln.InvalidArgument, match="decoder with past"):
        kiln.generation.Seq2SeqLM(str(folder / "encoder_model.onnx"), str(folder / "decoder_model.onnx"),
                                  str(folder / "encoder_model.onnx"))
