"""Backbones with Hugging Face's interface (transformers' AutoBackbone / BackboneMixin).

    bb = kiln.AutoBackbone.from_config("resnet50", out_indices=(0, 1, 2, 3, 4))
    bb.stage_names        # ['stem', 'stage1', 'stage2', 'stage3', 'stage4']
    bb.channels           # [64, 256, 512, 1024, 2048]
    maps = bb(pixel_values)   # BackboneOutput: the feature maps in stage order (a list of numpy
                              # arrays), also as maps.feature_maps (HF's)
    bb = kiln.AutoBackbone.from_pretrained("my-resnet", out_indices=(2, 3, 4))   # a model folder

Inside a kiln.nn forward, calling a backbone on a Var gives a tuple of Vars.
"""
import os

from kiln._core import core
from kiln.nn.layers import NATIVE_CLASSES
from kiln.nn.module import Module, _wrap

_nn = core.nn

__all__ = ["AutoBackbone", "Backbone", "BackboneOutput"]


class Backbone(Module):
    """A backbone module (made by AutoBackbone.from_config)."""

    def __init__(self, *args, **kwargs):
        raise TypeError("make backbones with kiln.AutoBackbone.from_config(name, ...)")

    @property
    def stage_names(self):
        return list(self._cmod.stage_names)

    @property
    def out_features(self):
        return list(self._cmod.out_features)

    @out_features.setter
    def out_features(self, names):
        self._cmod.set_out_features(list(names))

    @property
    def out_indices(self):
        return tuple(self._cmod.out_indices)

    @out_indices.setter
    def out_indices(self, indices):
        self._cmod.set_out_indices(list(indices))

    @property
    def out_feature_channels(self):
        """Channels of every stage, by name, in stage order."""
        channels = self._cmod.out_feature_channels
        return {name: channels[name] for name in self.stage_names}

    @property
    def channels(self):
        return list(self._cmod.channels)

    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        if isinstance(out, tuple):
            return BackboneOutput(out) if not any(hasattr(o, "_v") for o in out) else out
        return BackboneOutput([out]) if not hasattr(out, "_v") else (out,)


class BackboneOutput(list):
    """HF's BackboneOutput: .feature_maps (a tuple, in stage order), .hidden_states and .attentions
    (None: not returned); still the list of feature maps it was (out[0] is the first map)."""

    @property
    def feature_maps(self):
        return tuple(self)

    hidden_states = None
    attentions = None

    def to_tuple(self):
        return (self.feature_maps,)


NATIVE_CLASSES["_Backbone"] = Backbone


class AutoBackbone:
    """AutoBackbone.from_config(name, out_features=None, out_indices=None, **config): a backbone of a
    zoo model ("resnet18", "resnet34", "resnet50", "convnext_tiny", "vit"); config overrides the
    model's (HF's field names). HF's alignment rules for out_features / out_indices."""

    @staticmethod
    def from_config(name, out_features=None, out_indices=None, **config):
        cmod = _nn.backbone_from_config(name, config, None if out_features is None else list(out_features),
                                        None if out_indices is None else [int(i) for i in out_indices])
        return _wrap(cmod)

    @staticmethod
    def from_pretrained(folder, out_features=None, out_indices=None, **config):
        """The backbone of the model a Hugging Face-style folder holds (config.json and
        model.safetensors: kiln/nn/pretrained.py), with that model's weights (its head left out)."""
        from kiln.nn import pretrained
        values = pretrained.read_config(folder)
        name = pretrained.zoo_name(pretrained.model_type_of(values, os.path.join(os.fspath(folder), "config.json")),
                                   values)
        backbone = AutoBackbone.from_config(name, out_features, out_indices,
                                            **pretrained.zoo_config(name, values, config))
        pretrained.load_weights(backbone, os.fspath(folder), part_of_model=True)
        return backbone

    @staticmethod
    def names():
        return list(_nn.backbone_names())
