"""kiln.nn.zoo: ready-made architectures (include/kiln/nn/zoo.h) as kiln.nn modules.

    net = kiln.nn.zoo.create_model("resnet18", num_labels=10, num_channels=1)
    net(np.zeros((2, 1, 224, 224), np.float32))          # logits
    kiln.nn.zoo.config_for("bert", num_hidden_layers=2)   # the full config (HF's field names)
    net.save_pretrained("out"); kiln.nn.zoo.from_pretrained("out")   # config.json + model.safetensors

Weights load by name from the reference implementation each entry names (torchvision, HF).
"""
from kiln._core import core
from kiln.nn.module import _wrap

_nn = core.nn

__all__ = ["model_names", "config_for", "create_model", "from_pretrained", "example_inputs", "dynamic_axes"]


def model_names():
    return list(_nn.zoo_model_names())


def config_for(name, **config):
    """The default config of `name` with `config` merged in (unknown keys are an InvalidArgument)."""
    return _nn.zoo_config(name, config)


def create_model(name, **config):
    module = _wrap(_nn.zoo_create(name, config))
    module._zoo_name = name  # for save_pretrained (kiln/nn/pretrained.py)
    module._zoo_config = config_for(name, **config)
    if name in SEQ2SEQ_MODELS and module._zoo_config["part"] == "model":
        _make_seq2seq(module)
    return module


SEQ2SEQ_MODELS = ("bart", "t5")  # the encoder-decoder entries


def _make_seq2seq(module):
    """What HF's encoder-decoder models offer the Trainer and DataCollatorForSeq2Seq: forward's
    argument names (labels last: the model then returns its loss first, as HF's),
    prepare_decoder_input_ids_from_labels, and a generation_config with the config's token ids."""
    import numpy as np
    config = module._zoo_config
    pad, start = config["pad_token_id"], config["decoder_start_token_id"]

    def prepare_decoder_input_ids_from_labels(labels):
        """HF's shift_tokens_right: decoder_start_token_id, then labels[:, :-1], -100 as pad."""
        labels = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels)
        shifted = np.empty_like(labels)
        shifted[:, 0] = start
        shifted[:, 1:] = labels[:, :-1]
        shifted[shifted == -100] = pad
        return shifted

    from kiln.generation import from_model_config
    object.__setattr__(module, "generation_config", from_model_config(config))
    object.__setattr__(module, "prepare_decoder_input_ids_from_labels", prepare_decoder_input_ids_from_labels)
    object.__setattr__(module, "_forward_names", ["input_ids", "attention_mask", "decoder_input_ids", "labels"])
    object.__setattr__(module, "_output_names",
                       lambda inputs: ["loss", "logits"] if "labels" in inputs else ["logits"])


def from_pretrained(folder, **overrides):
    """The zoo model a Hugging Face-style folder holds (config.json + model.safetensors), with its
    weights; overrides change its config (num_labels=3). kiln/nn/pretrained.py has the rules."""
    from kiln.nn.pretrained import from_pretrained as load
    ignore = overrides.pop("ignore_mismatched_sizes", False)
    return load(folder, None, ignore, **overrides)


def example_inputs(name, **config):
    """[(input name, shape)] with a batch of 2, in the model's input order."""
    return [(n, tuple(s)) for n, s in _nn.zoo_example_inputs(name, config)]


def dynamic_axes(name, **config):
    return {k: dict(v) for k, v in _nn.zoo_dynamic_axes(name, config).items()}
