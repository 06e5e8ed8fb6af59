"""Backbones with Hugging Face's interface (transformers' AutoBackbone / BackboneMixin).

    bb = kiln.AutoBackbone.from_config("resnet50", out_indices=(0, 1, 2, 3, 4))
    bb.stage_names        # ['stem', 'stage1', 'stage2', 'stage3', 'stage4']
    bb.channels           # [64, 256, 512, 1024, 2048]
    maps = bb(pixel_values)   # the feature maps, in stage order (a list of numpy arrays)

Inside a kiln.nn forward, calling a backbone on a Var gives a tuple of Vars.
"""
from kiln._core import core
from kiln.nn.layers import NATIVE_CLASSES
from kiln.nn.module import Module, _wrap

_nn = core.nn

__all__ = ["AutoBackbone", "Backbone"]


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
            return list(out) if not any(hasattr(o, "_v") for o in out) else out
        return [out] if not hasattr(out, "_v") else (out,)


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
    def names():
        return list(_nn.backbone_names())
