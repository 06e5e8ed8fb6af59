"""Text generation with Hugging Face's GenerationConfig names (kiln/generation.h): greedy search,
sampling (temperature, top_k, top_p, seeded) and beam search, over a causal LM's ONNX model, with a
KV cache when the model takes past_key_values (optimum's decoder-with-past layout, or a zoo gpt2
exported with with_past=True).

    from kiln.generation import GenerationConfig, generate
    out = generate("gpt2_with_past.onnx", input_ids, attention_mask=mask, max_new_tokens=32, num_beams=4)
    net = kiln.nn.zoo.create_model("gpt2", ...); net.generate(input_ids, max_new_tokens=20)

An encoder-decoder model is a Seq2SeqLM (optimum's encoder + decoder files, or one whole model): the
decoder starts from decoder_start_token_id and the sequences are the decoder's.

input_ids may be a list of prompts (lists of ids, any lengths) or a left-padded [B, S] array with its
attention_mask; the result is HF's: [B * num_return_sequences, L] ids (a numpy array, or a torch
tensor when input_ids was one), the prompt left-padded, rows that ended early padded with the pad
token. `return_dict_in_generate=True` gives an object with .sequences and, for beams,
.sequences_scores.
"""
import json
import os
import tempfile

from kiln._core import core as _native

__all__ = ["GenerationConfig", "GenerateOutput", "generate", "CausalLM", "Seq2SeqLM"]

_DEFAULTS = dict(max_length=20, max_new_tokens=None, min_length=0, min_new_tokens=None, do_sample=False,
                 num_beams=1, num_return_sequences=1, early_stopping=False, length_penalty=1.0, temperature=1.0,
                 top_k=50, top_p=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0, eos_token_id=None,
                 pad_token_id=None, bos_token_id=None, decoder_start_token_id=None, forced_bos_token_id=None,
                 forced_eos_token_id=None,
                 use_cache=True, seed=0)


class GenerationConfig:
    """transformers' GenerationConfig: its field names and defaults (the ones Kiln implements;
    others are kept as attributes and ignored, as HF keeps unknown ones)."""

    def __init__(self, **kwargs):
        for k, v in _DEFAULTS.items():
            setattr(self, k, kwargs.pop(k, v))
        for k, v in kwargs.items():
            setattr(self, k, v)

    def to_dict(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def update(self, **kwargs):
        """Sets the known fields among kwargs; returns the rest (HF's update)."""
        rest = {}
        for k, v in kwargs.items():
            if k in _DEFAULTS or hasattr(self, k):
                setattr(self, k, v)
            else:
                rest[k] = v
        return rest

    def validate(self):
        _native.validate_generation_config(self._native_dict())

    def _native_dict(self):
        return {k: v for k, v in self.to_dict().items() if k in _DEFAULTS and v is not None}

    @classmethod
    def from_pretrained(cls, folder, config_file_name="generation_config.json"):
        path = os.path.join(folder, config_file_name) if os.path.isdir(folder) else folder
        with open(path, encoding="utf-8") as f:
            return cls(**json.load(f))

    def save_pretrained(self, folder, config_file_name="generation_config.json"):
        self.validate()
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".generation_config.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(folder, config_file_name))

    def __repr__(self):
        return f"GenerationConfig({json.dumps(self.to_dict())})"


class GenerateOutput:
    def __init__(self, sequences, sequences_scores=None):
        self.sequences = sequences
        self.sequences_scores = sequences_scores

    def __getitem__(self, key):
        return getattr(self, key)


class CausalLM:
    """A causal LM's ONNX model (a path or bytes) ready to generate from."""

    def __init__(self, model, num_threads=0, cache_block=64):
        self._lm = _native.CausalLM(model, num_threads, cache_block)

    @property
    def has_cache_inputs(self):
        return self._lm.has_cache_inputs


class Seq2SeqLM:
    """An encoder-decoder model: optimum's encoder and decoder files (paths or bytes), with its
    decoder_with_past file for a KV cache, or one model taking input_ids, attention_mask and
    decoder_input_ids (decoder=None)."""

    def __init__(self, encoder, decoder=None, decoder_with_past=None, num_threads=0):
        self._lm = _native.Seq2SeqLM(encoder, decoder, decoder_with_past, num_threads)


def _prompts(input_ids, attention_mask):
    if hasattr(input_ids, "detach"):
        input_ids = input_ids.detach().cpu().numpy()
    if hasattr(attention_mask, "detach"):
        attention_mask = attention_mask.detach().cpu().numpy()
    if hasattr(input_ids, "ndim"):
        if input_ids.ndim == 1:
            input_ids = input_ids[None]
        rows = input_ids.tolist()
        if attention_mask is None:
            return rows
        return [[int(t) for t, m in zip(r, mr) if m] for r, mr in zip(rows, attention_mask.tolist())]
    if input_ids and isinstance(input_ids[0], int):
        return [list(input_ids)]
    if attention_mask is not None:
        return [[int(t) for t, m in zip(r, mr) if m] for r, mr in zip(input_ids, attention_mask)]
    return [list(map(int, r)) for r in input_ids]


def _causal_lm(model, num_threads):
    if isinstance(model, (CausalLM, Seq2SeqLM)):
        return model
    if hasattr(model, "_zoo_name"):  # a kiln.nn zoo module: its generation graphs, its weights
        return _zoo_lm(model, num_threads)
    return CausalLM(model, num_threads)


def _zoo_lm(module, num_threads):
    """The module's CausalLM (its decoder-with-past graph) or Seq2SeqLM (encoder, decoder and
    decoder-with-past graphs), kept on the module while its weights (by a hash of their bytes) and
    the thread count stay the same: a Seq2SeqTrainer evaluation generates batch after batch with
    one export and one set of plans."""
    import hashlib

    import numpy as np
    digest = hashlib.blake2b(digest_size=16)
    for name, value in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(np.asarray(value)).tobytes())
    key = (digest.hexdigest(), num_threads)
    cached = module.__dict__.get("_kiln_generation_lm")
    if cached is not None and cached[0] == key:
        return cached[1]
    from kiln.nn.zoo import SEQ2SEQ_MODELS
    name = module._zoo_name
    if name in SEQ2SEQ_MODELS:  # optimum's three parts, by their "part" key
        parts = [_zoo_bytes(module, part=p) for p in ("encoder", "decoder", "decoder_with_past")]
        lm = Seq2SeqLM(*parts, num_threads=num_threads)
    elif name == "gpt2":
        lm = CausalLM(_zoo_bytes(module, with_past=True), num_threads)
    else:
        raise NotImplementedError(f"generate: the zoo's {name!r} is not a language model; export an ONNX causal LM "
                                  "and pass its path")
    object.__setattr__(module, "_kiln_generation_lm", (key, lm))
    return lm


def _zoo_bytes(module, **config):
    return _native.nn.zoo_export_bytes(module._zoo_name, dict(module._zoo_config, **config), module._cmod)


_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_eos_token_id")


def from_model_config(config):
    """HF's GenerationConfig.from_model_config: the token ids a model's config names."""
    return GenerationConfig(**{k: config[k] for k in _TOKEN_FIELDS if config.get(k) is not None})


def _model_generation_defaults(model):
    """The model's own generation_config (a zoo encoder-decoder's token ids), as HF's generate
    starts from model.generation_config."""
    own = getattr(model, "generation_config", None)
    return own.to_dict() if isinstance(own, GenerationConfig) else {}


def generate(model, input_ids=None, attention_mask=None, generation_config=None, return_dict_in_generate=False,
             num_threads=0, **kwargs):
    """Generates continuations of the prompts (see the module's docstring)."""
    config = GenerationConfig(**(generation_config.to_dict() if generation_config is not None
                                 else _model_generation_defaults(model)))
    unknown = config.update(**kwargs)
    if unknown:
        raise TypeError(f"generate: unknown arguments {sorted(unknown)}")
    lm = _causal_lm(model, num_threads)
    prompts = _prompts(input_ids, attention_mask)
    native = config._native_dict()
    if isinstance(native.get("eos_token_id"), int):
        native["eos_token_id"] = [native["eos_token_id"]]
    if isinstance(lm, Seq2SeqLM):
        out = _native.generate_seq2seq(lm._lm, prompts, native)
    else:
        out = _native.generate(lm._lm, prompts, native)
    import numpy as np
    sequences = np.asarray(out["sequences"], dtype=np.int64)
    if hasattr(input_ids, "detach"):
        import torch
        sequences = torch.from_numpy(sequences)
    if return_dict_in_generate:
        scores = np.asarray(out["sequences_scores"]) if out["sequences_scores"] else None
        return GenerateOutput(sequences, scores)
    return sequences
