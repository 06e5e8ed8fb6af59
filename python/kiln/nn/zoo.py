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
    return module


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
