"""CheckpointState, Parameter, Parameters and Properties, as onnxruntime.training.api has them."""
from __future__ import annotations

import os
from typing import Iterator, Tuple, Union

import numpy as np

from kiln._core import core
from kiln.training.api._args import bool_arg, path_arg

PropertyValue = Union[int, float, str]


class Parameter:
    """A model parameter of a CheckpointState: its data, gradient and whether it trains. Returned by
    `state.parameters[name]`; not created directly."""

    def __init__(self, state: "core.CheckpointState", name: str):
        self._state = state
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def data(self) -> np.ndarray:
        """A copy of the parameter's value."""
        return self._state.parameter_data(self._name)

    @data.setter
    def data(self, value: np.ndarray) -> None:
        """Copies `value` into the parameter; its shape and dtype must match (ValueError /
        TypeError naming the parameter otherwise)."""
        self._state.set_parameter_data(self._name, _array(value, f"parameter '{self._name}'"))

    @property
    def grad(self) -> np.ndarray | None:
        """The accumulated gradient, or None before the first training call."""
        return self._state.parameter_grad(self._name)

    @property
    def requires_grad(self) -> bool:
        return self._state.parameter_requires_grad(self._name)

    def __repr__(self) -> str:
        return f"Parameter(name={self._name}, requires_grad={self.requires_grad})"


def _array(value, what):
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{what}: expected a numpy array, got {type(value).__name__}")
    return value


def _name(name):
    if not isinstance(name, str):
        raise TypeError(f"names are str, not {type(name).__name__}")
    return name


class Parameters:
    """The parameters of a CheckpointState by name: `params[name]` is a Parameter, `params[name] =
    array` copies the array in, iteration yields (name, Parameter) pairs in the checkpoint's order."""

    def __init__(self, state: "core.CheckpointState"):
        self._state = state

    def __getitem__(self, name: str) -> Parameter:
        if not self._state.has_parameter(_name(name)):
            raise KeyError(f"Could not find parameter {name} in the checkpoint state.")
        return Parameter(self._state, name)

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self[name].data = value

    def __contains__(self, name: str) -> bool:
        return isinstance(name, str) and self._state.has_parameter(name)

    def __iter__(self) -> Iterator[Tuple[str, Parameter]]:
        for name in self._state.parameter_names():
            yield name, Parameter(self._state, name)

    def __len__(self) -> int:
        return len(self._state.parameter_names())

    def keys(self):
        return list(self._state.parameter_names())

    def __repr__(self) -> str:
        return f"Parameters({[p for _, p in self]})"


class Properties:
    """User properties of a CheckpointState (int, float or str values) by name; iteration yields
    (name, value) pairs."""

    def __init__(self, state: "core.CheckpointState"):
        self._state = state

    def __getitem__(self, name: str) -> PropertyValue:
        if not self._state.has_property(_name(name)):
            raise KeyError(f"Could not find property {name} in the checkpoint state.")
        return self._state.get_property(name)

    def __setitem__(self, name: str, value: PropertyValue) -> None:
        if not isinstance(value, (int, float, str)):
            raise TypeError(f"property '{name}': values are int, float or str, not {type(value).__name__}")
        self._state.set_property(_name(name), value)

    def __delitem__(self, name: str) -> None:
        if not self._state.erase_property(_name(name)):
            raise KeyError(f"Could not find property {name} in the checkpoint state.")

    def __contains__(self, name: str) -> bool:
        return isinstance(name, str) and self._state.has_property(name)

    def __iter__(self) -> Iterator[Tuple[str, PropertyValue]]:
        for name in self._state.property_names():
            yield name, self._state.get_property(name)

    def __len__(self) -> int:
        return len(self._state.property_names())

    def keys(self):
        return list(self._state.property_names())

    def __repr__(self) -> str:
        return f"Properties({dict(self)})"


class CheckpointState:
    """The state of a training run: parameters, optimizer state and user properties. Create it
    with CheckpointState.load_checkpoint; the file format is safetensors (docs/checkpoint.md)."""

    def __init__(self, state: "core.CheckpointState"):
        if not isinstance(state, core.CheckpointState):
            raise TypeError(f"Invalid argument for CheckpointState received {type(state)}")
        self._state = state

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: str | os.PathLike) -> "CheckpointState":
        return cls(core.CheckpointState.load(path_arg(checkpoint_uri, "checkpoint_uri")))

    @classmethod
    def save_checkpoint(cls, state: "CheckpointState", checkpoint_uri: str | os.PathLike,
                        include_optimizer_state: bool = False) -> None:
        if not isinstance(state, CheckpointState):
            raise TypeError(f"state must be a CheckpointState, not {type(state).__name__}")
        core.CheckpointState.save(state._state, path_arg(checkpoint_uri, "checkpoint_uri"),
                                  bool_arg(include_optimizer_state, "include_optimizer_state"))

    @property
    def parameters(self) -> Parameters:
        return Parameters(self._state)

    @property
    def properties(self) -> Properties:
        return Properties(self._state)

    # The older onnxruntime API: state[name] for a parameter or a property.
    def __getitem__(self, name: str):
        if name in self.parameters:
            return self.parameters[name]
        if name in self.properties:
            return self.properties[name]
        raise KeyError(f"Could not find {name} in the checkpoint state.")

    def __setitem__(self, name: str, value) -> None:
        if name in self.parameters:
            self.parameters[name] = value
        else:
            self.properties[name] = value

    def __contains__(self, name: str) -> bool:
        return name in self.parameters or name in self.properties
