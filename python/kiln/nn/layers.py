"""kiln.nn's layers and containers: the C++ modules with torch.nn's constructor arguments.

    nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
    nn.Sequential(nn.Linear(4, 8), nn.ReLU()) / nn.Sequential(OrderedDict(fc=nn.Linear(4, 8)))

Built-in layers keep their forward in C++ (a Python subclass overriding forward of one of them is
not traced: subclass kiln.nn.Module instead).
"""
from collections import OrderedDict

from kiln._core import core
from kiln.errors import Unsupported
from kiln.nn.module import Module
from kiln.nn.var import Var

_nn = core.nn

# Python class by the name of the bound C++ class (for wrapping modules built in C++).
NATIVE_CLASSES = {}


def _native(name, cname=None, base=Module):
    ccls = getattr(_nn, cname or name)

    def __init__(self, *args, **kwargs):
        self._init_native(ccls(*args, **kwargs))

    cls = type(name, (base,), {"__init__": __init__, "__module__": "kiln.nn",
                               "__doc__": f"torch.nn.{name}'s arguments and defaults; forward in Kiln's C++."})
    NATIVE_CLASSES[ccls.__name__] = cls
    return cls


Linear = _native("Linear")
Embedding = _native("Embedding")
Conv1d = _native("Conv1d")
Conv2d = _native("Conv2d")
ConvTranspose2d = _native("ConvTranspose2d")
BatchNorm1d = _native("BatchNorm1d")
BatchNorm2d = _native("BatchNorm2d")
LayerNorm = _native("LayerNorm")
GroupNorm = _native("GroupNorm")
ReLU = _native("ReLU")
GELU = _native("GELU")
SiLU = _native("SiLU")
Tanh = _native("Tanh")
Sigmoid = _native("Sigmoid")
Dropout = _native("Dropout")
Identity = _native("Identity")
Flatten = _native("Flatten")
MaxPool2d = _native("MaxPool2d")
AvgPool2d = _native("AvgPool2d")
AdaptiveAvgPool2d = _native("AdaptiveAvgPool2d")


class MultiheadAttention(_native("MultiheadAttention")):
    """forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (attn_output, attn_output_weights or None)."""

    def __call__(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                 average_attn_weights=True, is_causal=False):
        if not isinstance(query, Var):
            if key_padding_mask is not None or attn_mask is not None or not need_weights or is_causal:
                raise Unsupported("MultiheadAttention run on arrays takes query, key, value only; call it inside a "
                                  "forward for masks and flags")
            return super().__call__(query, key, value)
        outs = self._cmod._attend(query._v, key._v, value._v, _opt(key_padding_mask), bool(need_weights),
                                  _opt(attn_mask), bool(average_attn_weights), bool(is_causal))
        return Var(outs[0]), (Var(outs[1]) if len(outs) > 1 else None)


def _opt(v):
    return None if v is None else v._v


class _TransformerLayer(Module):
    _positions = ()

    def __call__(self, *args, **kwargs):
        is_causal = kwargs.pop("is_causal", False) or kwargs.pop("tgt_is_causal", False)
        if kwargs.pop("memory_is_causal", False) or is_causal:
            raise Unsupported(f"{self._get_name()}(is_causal=True) from Python: pass the causal mask as the mask")
        values = list(args) + [None] * (len(self._positions) - len(args))
        for name, v in kwargs.items():
            if name not in self._positions:
                raise TypeError(f"{self._get_name()}.forward() got an unexpected keyword argument '{name}'")
            values[self._positions.index(name)] = v
        while values and values[-1] is None:
            values.pop()
        return super().__call__(*values)


class TransformerEncoderLayer(_TransformerLayer, _native("TransformerEncoderLayer")):
    _positions = ("src", "src_mask", "src_key_padding_mask")


class TransformerDecoderLayer(_TransformerLayer, _native("TransformerDecoderLayer")):
    _positions = ("tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")


# ---- Containers ----------------------------------------------------------------------------------
class _IndexedChildren:
    """What Sequential and ModuleList share: children named "0", "1", ... in order."""

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def __len__(self):
        return len(self._children())

    def __iter__(self):
        return iter(list(self._children().values()))


class Sequential(_IndexedChildren, Module):
    """Sequential(*modules) (children "0", "1", ...) or Sequential(OrderedDict(name=module))."""

    def __init__(self, *args):
        self._init_native(_nn._Sequential())
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        items = list(self._children().items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(items[idx]))
        return items[idx][1]


class ModuleList(_IndexedChildren, Module):
    """Holds modules (children "0", "1", ...); has no forward."""

    def __init__(self, modules=None):
        self._init_native(_nn._ModuleList())
        if modules is not None:
            self.extend(modules)

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, idx):
        values = list(self._children().values())
        if isinstance(idx, slice):
            raise Unsupported("slicing a ModuleList (a module may have one parent path in kiln.nn's trace names)")
        return values[idx]

    def __iadd__(self, modules):
        return self.extend(modules)


class ModuleDict(Module):
    """Holds modules by name; has no forward."""

    def __init__(self, modules=None):
        self._init_native(_nn._ModuleDict())
        if modules is not None:
            self.update(modules)

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __getitem__(self, key):
        return self._children()[key]

    def __contains__(self, key):
        return key in self._children()

    def __len__(self):
        return len(self._children())

    def __iter__(self):
        return iter(list(self._children()))

    def keys(self):
        return list(self._children().keys())

    def values(self):
        return list(self._children().values())

    def items(self):
        return list(self._children().items())


NATIVE_CLASSES.update({"MultiheadAttention": MultiheadAttention, "TransformerEncoderLayer": TransformerEncoderLayer,
                       "TransformerDecoderLayer": TransformerDecoderLayer, "_Sequential": Sequential,
                       "_ModuleList": ModuleList, "_ModuleDict": ModuleDict})
