"""How ORTModule sees a call and an output: flat tensors plus a structure that puts them back
(containers, keys, and the non-tensor leaves, which are constants of a plan), and the wrapper module
that is exported in the wrapped module's place."""
from __future__ import annotations

import dataclasses

import torch


class _Fallback(Exception):
    """Why a call cannot run on Kiln (the fallback policy decides what happens)."""


class _Const:
    """A non-tensor leaf of a call or an output (None, a bool, a number, a string): part of the plan."""

    def __init__(self, value):
        self.value = value


_CONSTANTS = (type(None), bool, int, float, str)


def _flatten(value, what, constants=False):
    """(tensors, structure) of a tensor or a nested tuple / list / dict / dataclass of them; with
    `constants`, None, bools, numbers and strings are leaves kept in the structure."""
    if isinstance(value, torch.Tensor):
        return [value], None
    if constants and isinstance(value, _CONSTANTS):
        return [], _Const(value)
    if isinstance(value, (tuple, list)):
        tensors, parts = [], []
        for item in value:
            t, s = _flatten(item, what, constants)
            tensors += t
            parts.append((len(t), s))
        return tensors, (type(value), parts)
    if isinstance(value, dict) or dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = value.items() if isinstance(value, dict) else ((f.name, getattr(value, f.name))
                                                                for f in dataclasses.fields(value))
        tensors, parts = [], []
        for key, item in items:
            t, s = _flatten(item, what, constants)
            tensors += t
            parts.append((key, len(t), s))
        return tensors, (type(value), parts)
    raise _Fallback(f"{what} holds a {type(value).__name__}; Kiln's ORTModule takes tensors, None, numbers, "
                    "strings and nested tuples, lists, dicts and dataclasses of them")


def _unflatten(tensors, structure):
    if structure is None:
        return tensors[0]
    if isinstance(structure, _Const):
        return structure.value
    kind, parts = structure
    at = 0
    if kind is dict or issubclass(kind, dict) or dataclasses.is_dataclass(kind):
        out = {}
        for key, n, s in parts:
            out[key] = _unflatten(tensors[at:at + n], s)
            at += n
        if kind is dict:
            return out
        # A dataclass (Hugging Face's ModelOutput is both) from its fields, another mapping from a dict.
        return kind(**out) if dataclasses.is_dataclass(kind) else kind(out)
    items = []
    for n, s in parts:
        items.append(_unflatten(tensors[at:at + n], s))
        at += n
    if kind in (tuple, list):
        return kind(items)
    return kind(*items) if hasattr(kind, "_fields") else kind(items)  # a namedtuple, another sequence


def _signature(structure):
    """A hashable form of a call's structure: containers, keys and constants (the tensors' shapes,
    dtypes and requires_grad are keyed beside it)."""
    if structure is None:
        return None
    if isinstance(structure, _Const):
        return ("const", type(structure.value).__name__, structure.value)
    kind, parts = structure
    return (kind, tuple((p[0], p[1], _signature(p[2])) if len(p) == 3 else (p[0], _signature(p[1])) for p in parts))


class _Call(torch.nn.Module):
    """What is exported: the wrapped module called with the flat tensors of a call put back into its
    structure (keywords, constants, nesting); the output it returned is kept in `captured`."""

    def __init__(self, module, structure):
        super().__init__()
        self.inner = module
        self.structure = structure
        self.captured = []

    def forward(self, *tensors):  # noqa: D102
        args, kwargs = _unflatten(list(tensors), self.structure)
        out = self.inner(*args, **kwargs)
        self.captured.append(out)
        flat, _ = _flatten(out, "the module's output", constants=True)
        if not flat:
            raise _Fallback(f"the module's forward returned no tensor ({type(out).__name__}); there is nothing "
                            "for Kiln to compute")
        return tuple(flat)
